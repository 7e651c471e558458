// Health that acts (docs/supervision.md): temperature and power thresholds
// degrade and drain a device, with hysteresis on the way back; the config's
// thresholds are checked; an operator's word holds over the heat's.
#include <catch2/catch.hpp>

#include <thread>

#include "actors/heat_watch.hpp"
#include "config/supervision.hpp"
#include "tests/runtime_fixture.hpp"

using namespace cohort;
using namespace cohort::actors;
using namespace std::chrono_literals;

using fixture = test::actor_fixture;

namespace {

devices::health::gpu_sample reading(int32_t celsius, double watts = -1,
                                    double limit = -1) {
  devices::health::gpu_sample s;
  s.available = true;
  s.temperature_c = celsius;
  s.power_w = watts;
  s.power_limit_w = limit;
  s.source = "test";
  return s;
}

} // namespace

TEST_CASE("readings raise a device's heat level at once and lower it only "
          "after they stayed cool",
          "[actors][heat]") {
  heat_limits l;
  l.degrade_c = 85;
  l.drain_c = 95;
  l.recover_c = 80;
  l.degrade_power = 0.9;
  l.drain_power = 1.0;
  l.recover_power = 0.8;
  l.recover_for = 100ms;
  heat_watch w{l};
  auto t = std::chrono::steady_clock::time_point{} + 1h;
  CHECK_FALSE(w.observe(reading(60, 100, 300), t));
  // Unreadable samples change nothing.
  devices::health::gpu_sample none;
  CHECK_FALSE(w.observe(none, t));
  auto hot = w.observe(reading(86, 100, 300), t);
  REQUIRE(hot);
  CHECK(hot->level == heat_level::hot);
  CHECK_THAT(hot->why, Catch::Contains("86 C, at or above 85 C"));
  // Straight to critical by power (at its limit).
  auto critical = w.observe(reading(70, 300, 300), t);
  REQUIRE(critical);
  CHECK(critical->level == heat_level::critical);
  CHECK_THAT(critical->why, Catch::Contains("300 W of its 300 W limit"));
  // Below the thresholds but above recover: stays critical however long.
  CHECK_FALSE(w.observe(reading(84, 250, 300), t + 1s));
  CHECK_FALSE(w.observe(reading(84, 250, 300), t + 10s));
  // Cool, but not for long enough; a warm reading starts the wait again.
  CHECK_FALSE(w.observe(reading(70, 100, 300), t + 11s));
  CHECK_FALSE(w.observe(reading(82, 100, 300), t + 11s + 90ms));
  CHECK_FALSE(w.observe(reading(70, 100, 300), t + 11s + 120ms));
  CHECK(w.level() == heat_level::critical);
  auto back = w.observe(reading(70, 100, 300), t + 11s + 230ms);
  REQUIRE(back);
  CHECK(back->level == heat_level::ok);
  CHECK_THAT(back->why, Catch::Contains("for 100 ms"));
  // A device without power readings is judged by its temperature alone.
  heat_watch v{l};
  CHECK_FALSE(v.observe(reading(70), t));
  REQUIRE(v.observe(reading(99), t));
  CHECK(v.level() == heat_level::critical);
}

TEST_CASE("the config's heat thresholds are checked", "[actors][heat]") {
  auto with = [](auto set) {
    pb::RuntimeConfig cfg;
    set(*cfg.mutable_supervision()->mutable_heat());
    return config::supervision_of(cfg);
  };
  auto refused = [&](auto set, const char* why) {
    auto r = with(set);
    INFO(why);
    REQUIRE_FALSE(r);
    CHECK(code_of(r.error()) == errc::malformed_config);
    CHECK_THAT(describe(r.error()), Catch::Contains(why));
  };
  refused(
      [](pb::HeatLimits& h) {
        h.set_degrade_temperature_c(90);
        h.set_drain_temperature_c(90);
      },
      "drain_temperature_c must be above degrade_temperature_c");
  refused(
      [](pb::HeatLimits& h) {
        h.set_degrade_temperature_c(85);
        h.set_recover_temperature_c(85);
      },
      "recover_temperature_c must be below 85 C");
  refused([](pb::HeatLimits& h) { h.set_drain_power_fraction(2.5); },
          "power fractions are 0 to 2");
  refused([](pb::HeatLimits& h) { h.set_degrade_temperature_c(300); },
          "at most 200 C");
  refused([](pb::HeatLimits& h) { h.set_recover_temperature_c(70); },
          "recover_temperature_c without a temperature threshold");
  auto ok = with([](pb::HeatLimits& h) {
    h.set_degrade_temperature_c(85);
    h.set_drain_temperature_c(95);
    h.set_drain_power_fraction(1.0);
  });
  REQUIRE(ok);
  auto& l = ok->second.heat;
  CHECK(l.recover_c == 80);
  CHECK(l.recover_power == Approx(0.95));
  CHECK(l.recover_for == 30s);
  CHECK(l.any());
  CHECK_FALSE(with([](pb::HeatLimits&) {})->second.heat.any());
}

TEST_CASE_METHOD(fixture,
                 "a GPU past the drain threshold is drained, its work goes "
                 "elsewhere, and it comes back once cool; a hot one stays "
                 "degraded while hot",
                 "[actors][heat]") {
  auto cfg = test::make_config(dir, 0, {{"sim0", 1}, {"sim1", 1}});
  auto* sv = cfg.mutable_supervision();
  sv->set_telemetry_interval_ms(10);
  sv->set_degraded_quiet_ms(50);
  auto* heat = sv->mutable_heat();
  heat->set_degrade_temperature_c(85);
  heat->set_drain_temperature_c(95);
  heat->set_recover_ms(100);
  auto rt = runtime::start(sys, cfg);
  REQUIRE(rt);
  auto& r = **rt;
  auto sim1 = r.sim_device("sim1");
  REQUIRE(sim1);
  // Idle at 35 C: 70 more is past the drain threshold.
  sim1->heat(70);
  CHECK(test::wait_status(r, 1, device_status::draining) ==
        device_status::draining);
  auto items = test::gemv_items(20);
  auto e = test::submit_all(sys, r, items, [] {});
  test::check_exactly_once(items, e);
  for (auto& [id, res] : e.results)
    CHECK(res.device == "sim0");
  // 55 C: below the recover threshold (80 C) for 100 ms, then back.
  sim1->heat(20);
  CHECK(test::wait_status(r, 1, device_status::available) ==
        device_status::available);
  // 90 C: hot, degraded, and still degraded well past the quiet period.
  sim1->heat(55);
  CHECK(test::wait_status(r, 1, device_status::degraded) ==
        device_status::degraded);
  std::this_thread::sleep_for(300ms);
  CHECK(test::wait_status(r, 1, device_status::degraded, 10ms) ==
        device_status::degraded);
  // Lost while hot: it comes back degraded, not available.
  sim1->lose();
  auto until = std::chrono::steady_clock::now() + 10s;
  for (;;) {
    auto st = r.placement_stats();
    REQUIRE(st);
    if (st->devices[1].restarts >= 1 ||
        std::chrono::steady_clock::now() >= until)
      break;
    std::this_thread::sleep_for(10ms);
  }
  CHECK(test::wait_status(r, 1, device_status::degraded) ==
        device_status::degraded);
  REQUIRE(r.placement_stats()->devices[1].restarts >= 1);
  sim1->heat(0);
  CHECK(test::wait_status(r, 1, device_status::available) ==
        device_status::available);
  // Every change is audited.
  auto audit = test::audit_text(r);
  CHECK_THAT(audit, Catch::Contains("heat ok -> critical: 105 C, at or above "
                                    "95 C"));
  CHECK_THAT(audit, Catch::Contains("heat critical -> ok"));
  CHECK_THAT(audit, Catch::Contains("heat ok -> hot: 90 C, at or above 85 C"));
  CHECK_THAT(audit, Catch::Contains("available -> degraded (warning: still "
                                    "hot)"));
}

TEST_CASE_METHOD(fixture,
                 "an operator's online holds over a drain for heat, and an "
                 "operator's drain is not ended by cooling",
                 "[actors][heat]") {
  auto cfg = test::make_config(dir, 0, {{"sim0", 1}, {"sim1", 1}});
  auto* sv = cfg.mutable_supervision();
  sv->set_telemetry_interval_ms(10);
  sv->mutable_heat()->set_drain_temperature_c(95);
  sv->mutable_heat()->set_recover_ms(50);
  auto rt = runtime::start(sys, cfg);
  REQUIRE(rt);
  auto& r = **rt;
  auto sim1 = r.sim_device("sim1");
  sim1->heat(70);
  REQUIRE(test::wait_status(r, 1, device_status::draining) ==
          device_status::draining);
  // The operator knows better: online, and it stays so while as hot.
  REQUIRE_FALSE(r.set_online("sim1"));
  std::this_thread::sleep_for(200ms);
  CHECK(test::wait_status(r, 1, device_status::available, 10ms) ==
        device_status::available);
  // Cool, then the operator drains it: cooling again does not undo that.
  sim1->heat(0);
  std::this_thread::sleep_for(200ms);
  REQUIRE_FALSE(r.drain("sim1"));
  sim1->heat(70);
  std::this_thread::sleep_for(100ms);
  sim1->heat(0);
  std::this_thread::sleep_for(300ms);
  CHECK(test::wait_status(r, 1, device_status::draining, 10ms) ==
        device_status::draining);
}
