// The circuit breaker alone, with time passed in.
#include <catch2/catch.hpp>

#include "actors/balancer/circuit_breaker.hpp"

using namespace cohort;
using namespace cohort::actors;
using namespace cohort::actors::balancer;
using namespace std::chrono_literals;

namespace {

circuit_config small() {
  circuit_config c;
  c.failures = 3;
  c.window = 1000ms;
  c.open_for = 100ms;
  c.probes = 2;
  return c;
}

} // namespace

TEST_CASE("a circuit opens after N failures within its window",
          "[actors][supervisor]") {
  circuit_breaker b{small()};
  auto t = circuit_breaker::clock::now();
  CHECK_FALSE(b.failed(t));
  CHECK_FALSE(b.failed(t + 10ms));
  CHECK(b.allows(t + 10ms));
  CHECK(b.failed(t + 20ms));
  CHECK(b.state(t + 20ms) == circuit_state::open);
  CHECK_FALSE(b.allows(t + 50ms));
  // Failures while open do not extend it.
  CHECK_FALSE(b.failed(t + 60ms));
  CHECK(b.reopens_at() == t + 120ms);
}

TEST_CASE("failures outside the window do not add up", "[actors][supervisor]") {
  circuit_breaker b{small()};
  auto t = circuit_breaker::clock::now();
  b.failed(t);
  b.failed(t + 10ms);
  CHECK_FALSE(b.failed(t + 1500ms));
  CHECK(b.state(t + 1500ms) == circuit_state::closed);
}

TEST_CASE("half-open lets the probes through and closes when they pass",
          "[actors][supervisor]") {
  circuit_breaker b{small()};
  auto t = circuit_breaker::clock::now();
  for (int i = 0; i < 3; ++i)
    b.failed(t);
  auto later = t + 150ms;
  CHECK(b.state(later) == circuit_state::half_open);
  CHECK(b.allows(later));
  b.placed(later);
  CHECK(b.allows(later));
  b.placed(later);
  // Two probes out: nothing more until they end.
  CHECK_FALSE(b.allows(later));
  CHECK_FALSE(b.succeeded(later));
  CHECK_FALSE(b.allows(later)); // one passed, one out
  CHECK(b.succeeded(later));
  CHECK(b.state(later) == circuit_state::closed);
  CHECK(b.allows(later));
}

TEST_CASE("a failed probe opens the circuit again", "[actors][supervisor]") {
  circuit_breaker b{small()};
  auto t = circuit_breaker::clock::now();
  for (int i = 0; i < 3; ++i)
    b.failed(t);
  auto later = t + 150ms;
  REQUIRE(b.allows(later));
  b.placed(later);
  CHECK(b.failed(later));
  CHECK(b.state(later) == circuit_state::open);
  CHECK_FALSE(b.allows(later + 50ms));
  CHECK(b.state(later + 100ms) == circuit_state::half_open);
}

TEST_CASE("a probe that moves on without an outcome frees its slot",
          "[actors][supervisor]") {
  circuit_breaker b{small()};
  auto t = circuit_breaker::clock::now();
  for (int i = 0; i < 3; ++i)
    b.failed(t);
  auto later = t + 150ms;
  b.placed(later);
  b.placed(later);
  REQUIRE_FALSE(b.allows(later));
  b.abandoned();
  CHECK(b.allows(later));
}
