// The supervisor alone, with a test actor in the balancer's place: every
// change of a device's life cycle reaches the balancer as exactly one
// device_change, with its generation, status and cause.
#include <catch2/catch.hpp>

#include "actors/supervisor.hpp"
#include "devices/sim/sim_device.hpp"
#include "tests/runtime_fixture.hpp"

using namespace cohort;
using namespace cohort::actors;
using namespace std::chrono_literals;

namespace {

using fixture = test::actor_fixture;

// The next change, or a cause of 0 after `wait`.
device_change next_change(caf::scoped_actor& self,
                          std::chrono::milliseconds wait = 5000ms) {
  device_change out;
  out.cause = static_cast<device_cause>(0);
  self->receive([&](device_atom, device_change& c) { out = std::move(c); },
                caf::after(wait) >> [] {});
  return out;
}

} // namespace

TEST_CASE_METHOD(fixture,
                 "the supervisor tells the balancer one change per step of "
                 "a device's life cycle",
                 "[actors][supervisor][lifecycle]") {
  devices::sim::sim_params params;
  params.name = "sim0";
  params.memory_bytes = 64ull << 20;
  auto dev = devices::sim::make_sim_device(params);
  REQUIRE(dev);
  caf::scoped_actor self{sys};
  supervisor_config cfg;
  cfg.restart_delay = 5ms;
  auto sup = sys.spawn(supervisor_impl,
                       std::vector<std::shared_ptr<devices::device>>{*dev},
                       caf::actor_cast<balancer_actor>(self),
                       caf::actor_cast<audit_actor>(self), cfg);
  auto ask = [&](auto... xs) {
    bool ok = false;
    self->request(sup, 5s, xs...)
        .receive([&](bool b) { ok = b; }, [&](caf::error&) { ok = false; });
    return ok;
  };
  auto quiet = [&] {
    return next_change(self, 100ms).cause == static_cast<device_cause>(0);
  };
  REQUIRE(ask(start_atom::value));
  auto c = next_change(self);
  CHECK(c.cause == device_cause::started);
  CHECK(c.index == 0);
  CHECK(c.generation == 1);
  CHECK(c.status == device_status::available);
  CHECK(c.handle);
  CHECK(quiet());
  // An operator drains it: its actor runs on.
  REQUIRE(ask(drain_atom::value, std::string{"sim0"}));
  c = next_change(self);
  CHECK(c.cause == device_cause::health);
  CHECK(c.status == device_status::draining);
  CHECK(c.generation == 1);
  CHECK(quiet());
  // Its actor crashes (not a device fault): a loss, then a new generation
  // that comes back draining, as the operator left it.
  REQUIRE(ask(crash_atom::value, std::string{"sim0"}));
  c = next_change(self);
  CHECK(c.cause == device_cause::crashed);
  CHECK(c.status == device_status::resetting);
  CHECK(c.generation == 1);
  CHECK(c.reason);
  c = next_change(self);
  CHECK(c.cause == device_cause::started);
  CHECK(c.generation == 2);
  CHECK(c.status == device_status::draining);
  CHECK(c.handle);
  CHECK(quiet());
  REQUIRE(ask(online_atom::value, std::string{"sim0"}));
  c = next_change(self);
  CHECK(c.cause == device_cause::health);
  CHECK(c.status == device_status::available);
  CHECK(quiet());
  // Offline by an operator, then online: restarted as generation 3.
  REQUIRE(ask(offline_atom::value, std::string{"sim0"}));
  c = next_change(self);
  CHECK(c.cause == device_cause::offline);
  CHECK(c.status == device_status::offline);
  CHECK(code_of(c.reason) == errc::device_offline);
  CHECK(quiet());
  REQUIRE(ask(online_atom::value, std::string{"sim0"}));
  c = next_change(self);
  CHECK(c.cause == device_cause::started);
  CHECK(c.generation == 3);
  CHECK(c.status == device_status::available);
  CHECK(quiet());
  CHECK(std::string{to_string(device_cause::gave_up)} == "gave_up");
  self->send_exit(sup, caf::exit_reason::user_shutdown);
}

TEST_CASE_METHOD(fixture,
                 "a device removed from the machine is out until a rescan "
                 "finds it, and comes back as it was",
                 "[actors][supervisor][lifecycle][rescan]") {
  devices::sim::sim_params params;
  params.name = "sim0";
  params.memory_bytes = 64ull << 20;
  auto dev = devices::sim::make_sim_device(params);
  REQUIRE(dev);
  caf::scoped_actor self{sys};
  supervisor_config cfg;
  cfg.restart_delay = 5ms;
  auto sup = sys.spawn(supervisor_impl,
                       std::vector<std::shared_ptr<devices::device>>{*dev},
                       caf::actor_cast<balancer_actor>(self),
                       caf::actor_cast<audit_actor>(self), cfg);
  caf::error refused;
  auto ask = [&](auto... xs) {
    bool ok = false;
    self->request(sup, 5s, xs...)
        .receive([&](bool b) { ok = b; },
                 [&](caf::error& e) {
                   refused = e;
                   ok = false;
                 });
    return ok;
  };
  auto quiet = [&] {
    return next_change(self, 100ms).cause == static_cast<device_cause>(0);
  };
  REQUIRE(ask(start_atom::value));
  CHECK(next_change(self).cause == device_cause::started);
  // Removed: its actor ends, its work is told device_lost, it is offline.
  self->send(sup, remove_atom::value, uint32_t{0},
             std::string{"missing from 2 scan(s) in a row"});
  auto c = next_change(self);
  CHECK(c.cause == device_cause::removed);
  CHECK(c.status == device_status::offline);
  CHECK(code_of(c.reason) == errc::device_lost);
  CHECK_THAT(describe(c.reason), Catch::Contains("removed from the machine"));
  CHECK(quiet());
  // An operator cannot bring it back; a second removal changes nothing.
  CHECK_FALSE(ask(online_atom::value, std::string{"sim0"}));
  CHECK(code_of(refused) == errc::invalid_transition);
  self->send(sup, remove_atom::value, uint32_t{0}, std::string{"again"});
  CHECK(quiet());
  // Found again: restarted, a new generation.
  self->send(sup, restore_atom::value, uint32_t{0});
  c = next_change(self);
  CHECK(c.cause == device_cause::started);
  CHECK(c.status == device_status::available);
  CHECK(c.generation == 2);
  CHECK(quiet());
  // Drained, removed, found again: it comes back draining.
  REQUIRE(ask(drain_atom::value, std::string{"sim0"}));
  CHECK(next_change(self).status == device_status::draining);
  self->send(sup, remove_atom::value, uint32_t{0}, std::string{"gone"});
  CHECK(next_change(self).cause == device_cause::removed);
  self->send(sup, restore_atom::value, uint32_t{0});
  c = next_change(self);
  CHECK(c.cause == device_cause::started);
  CHECK(c.status == device_status::draining);
  // Offline by an operator, removed, found again: it stays offline, and
  // the operator's online brings it back.
  REQUIRE(ask(offline_atom::value, std::string{"sim0"}));
  CHECK(next_change(self).cause == device_cause::offline);
  self->send(sup, remove_atom::value, uint32_t{0}, std::string{"gone"});
  CHECK(next_change(self).cause == device_cause::removed);
  self->send(sup, restore_atom::value, uint32_t{0});
  CHECK(quiet());
  REQUIRE(ask(online_atom::value, std::string{"sim0"}));
  c = next_change(self);
  CHECK(c.cause == device_cause::started);
  CHECK(c.status == device_status::available);
  CHECK(std::string{to_string(device_cause::removed)} == "removed");
  self->send_exit(sup, caf::exit_reason::user_shutdown);
}
