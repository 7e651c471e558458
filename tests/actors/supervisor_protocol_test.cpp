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

// A simulated GPU named `name` with 64 MiB.
std::shared_ptr<devices::device> sim_gpu(const std::string& name) {
  devices::sim::sim_params params;
  params.name = name;
  params.memory_bytes = 64ull << 20;
  auto dev = devices::sim::make_sim_device(params);
  REQUIRE(dev);
  return *dev;
}

// A supervisor of the devices of `roster` that reports to the test, which
// stands for its balancer and audit log; stopped at the end.
struct supervised {
  caf::scoped_actor self;
  std::shared_ptr<device_roster> roster;
  supervisor_actor sup;
  /// Why the last ask was refused.
  caf::error refused;

  supervised(caf::actor_system& sys,
             std::vector<std::shared_ptr<devices::device>> devs)
      : self{sys}, roster(std::make_shared<device_roster>(std::move(devs))) {
    supervisor_config cfg;
    cfg.restart_delay = 5ms;
    sup = sys.spawn(supervisor_impl, roster,
                    caf::actor_cast<balancer_actor>(self),
                    caf::actor_cast<audit_actor>(self), cfg);
  }
  ~supervised() { self->send_exit(sup, caf::exit_reason::user_shutdown); }

  // Whether the supervisor answers `xs` with true within 5 s.
  template <class... Ts> bool ask(Ts... xs) {
    bool ok = false;
    self->request(sup, 5s, xs...)
        .receive([&](bool b) { ok = b; },
                 [&](caf::error& e) {
                   refused = e;
                   ok = false;
                 });
    return ok;
  }

  // No change within 100 ms.
  bool quiet() {
    return next_change(self, 100ms).cause == static_cast<device_cause>(0);
  }
};

} // namespace

TEST_CASE_METHOD(fixture,
                 "the supervisor tells the balancer one change per step of "
                 "a device's life cycle",
                 "[actors][supervisor][lifecycle]") {
  supervised s{sys, {sim_gpu("sim0")}};
  auto& self = s.self;
  auto ask = [&](auto... xs) { return s.ask(xs...); };
  auto quiet = [&] { return s.quiet(); };
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
}

TEST_CASE_METHOD(fixture,
                 "a device removed from the machine is out until a rescan "
                 "finds it, and comes back as it was",
                 "[actors][supervisor][lifecycle][rescan]") {
  supervised s{sys, {sim_gpu("sim0")}};
  auto& self = s.self;
  auto& sup = s.sup;
  auto& refused = s.refused;
  auto ask = [&](auto... xs) { return s.ask(xs...); };
  auto quiet = [&] { return s.quiet(); };
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
}

TEST_CASE_METHOD(fixture,
                 "a device appended to the roster starts when the supervisor "
                 "is told; any other index is refused",
                 "[actors][supervisor][lifecycle][rescan]") {
  supervised s{sys, {sim_gpu("sim0")}};
  auto& self = s.self;
  auto& refused = s.refused;
  auto ask = [&](auto... xs) { return s.ask(xs...); };
  REQUIRE(ask(start_atom::value));
  CHECK(next_change(self).index == 0);
  // Not in the roster yet: refused.
  CHECK_FALSE(ask(add_atom::value, uint32_t{1}));
  CHECK(code_of(refused) == errc::invalid_arguments);
  REQUIRE(s.roster->add(sim_gpu("sim1")) == 1);
  REQUIRE(ask(add_atom::value, uint32_t{1}));
  auto c = next_change(self);
  CHECK(c.index == 1);
  CHECK(c.cause == device_cause::started);
  CHECK(c.status == device_status::available);
  CHECK(c.generation == 1);
  // Told twice, or of another index: refused, nothing changes.
  CHECK_FALSE(ask(add_atom::value, uint32_t{1}));
  CHECK(code_of(refused) == errc::invalid_arguments);
  CHECK_FALSE(ask(add_atom::value, uint32_t{0}));
  // It is supervised like the others: an operator drains it by name.
  REQUIRE(ask(drain_atom::value, std::string{"sim1"}));
  c = next_change(self);
  CHECK(c.index == 1);
  CHECK(c.status == device_status::draining);
}
