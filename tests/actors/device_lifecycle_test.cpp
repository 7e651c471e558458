// The device life cycle alone: every event from every state.
#include <catch2/catch.hpp>

#include "actors/device_lifecycle.hpp"
#include "messages/errc.hpp"

using namespace cohort;
using namespace cohort::actors;

namespace {

using ev = lifecycle_event;
using st = device_status;

device_lifecycle at(st s) {
  device_lifecycle d;
  switch (s) {
  case st::resetting:
    break;
  case st::available:
    d.apply(ev::restarted);
    break;
  case st::degraded:
    d.apply(ev::restarted);
    d.apply(ev::warning);
    break;
  case st::draining:
    d.apply(ev::restarted);
    d.apply(ev::drain);
    break;
  case st::offline:
    d.apply(ev::gave_up);
    break;
  }
  REQUIRE(d.status() == s);
  return d;
}

} // namespace

TEST_CASE("health events move a device between available, degraded and "
          "resetting",
          "[actors][supervisor]") {
  auto d = at(st::available);
  CHECK(*d.apply(ev::warning) == st::degraded);
  CHECK(*d.apply(ev::warning) == st::degraded);
  CHECK(*d.apply(ev::quiet) == st::available);
  CHECK(*d.apply(ev::lost) == st::resetting);
  CHECK(*d.apply(ev::restarted) == st::available);
  CHECK(*d.apply(ev::gave_up) == st::offline);
  // Warnings, losses and restarts do not revive an offline device.
  CHECK(*d.apply(ev::warning) == st::offline);
  CHECK(*d.apply(ev::lost) == st::offline);
  CHECK(*d.apply(ev::restarted) == st::offline);
}

TEST_CASE("operator events: drain, offline, online",
          "[actors][supervisor]") {
  auto d = at(st::degraded);
  CHECK(*d.apply(ev::drain) == st::draining);
  CHECK(*d.apply(ev::online) == st::available);
  CHECK(*d.apply(ev::offline) == st::offline);
  // An offline device comes back through a reset.
  CHECK(*d.apply(ev::online) == st::resetting);
  CHECK(*d.apply(ev::restarted) == st::available);
}

TEST_CASE("a drain survives a loss and the restart after it",
          "[actors][supervisor]") {
  auto d = at(st::draining);
  CHECK(*d.apply(ev::lost) == st::resetting);
  CHECK(d.drain_requested());
  CHECK(*d.apply(ev::restarted) == st::draining);
  // Draining while resetting takes effect at the restart.
  auto r = at(st::resetting);
  CHECK(*r.apply(ev::drain) == st::resetting);
  CHECK(*r.apply(ev::restarted) == st::draining);
}

TEST_CASE("transitions that do not apply are refused and change nothing",
          "[actors][supervisor]") {
  auto off = at(st::offline);
  auto x = off.apply(ev::drain);
  REQUIRE_FALSE(x);
  CHECK(code_of(x.error()) == errc::invalid_transition);
  CHECK(off.status() == st::offline);
  auto resetting = at(st::resetting);
  auto y = resetting.apply(ev::online);
  REQUIRE_FALSE(y);
  CHECK(code_of(y.error()) == errc::invalid_transition);
  CHECK(describe(y.error()).find("being reset") != std::string::npos);
  CHECK(resetting.status() == st::resetting);
}
