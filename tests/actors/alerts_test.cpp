// In-process alerts: each rule fires on made-up counters and resolves when
// they recover; a firing alert reaches the audit log.
#include <catch2/catch.hpp>

#include <fstream>
#include <thread>

#include "actors/alerts.hpp"
#include "config/alerts.hpp"
#include "tests/runtime_fixture.hpp"

using namespace cohort;
using namespace cohort::actors;
using namespace std::chrono_literals;

namespace {

using clock_type = std::chrono::steady_clock;

alert_inputs healthy(clock_type::time_point now) {
  alert_inputs in;
  in.now = now;
  device_stats d;
  d.name = "sim0";
  d.status = device_status::available;
  in.stats.devices.push_back(d);
  memory_snapshot m;
  m.device = "sim0";
  m.capacity = 1000;
  m.limit = 1000;
  m.used = 100;
  in.memory.push_back(m);
  tenant_headroom t;
  t.tenant = "t";
  t.memory_quota = 1000;
  t.memory = 10;
  t.max_inflight = 10;
  t.inflight = 1;
  in.headroom.tenants.push_back(t);
  return in;
}

bool fires(const std::vector<alert_evaluator::change>& cs,
           const std::string& name, const std::string& subject) {
  for (auto& c : cs)
    if (c.firing && c.what.name == name && c.what.subject == subject)
      return true;
  return false;
}

bool resolves(const std::vector<alert_evaluator::change>& cs,
              const std::string& name) {
  for (auto& c : cs)
    if (!c.firing && c.what.name == name)
      return true;
  return false;
}

} // namespace

TEST_CASE("each alert rule fires and resolves", "[actors][alerts]") {
  alert_evaluator ev{alert_rules{}};
  auto t0 = clock_type::now();
  CHECK(ev.evaluate(healthy(t0)).empty());
  SECTION("vram_high") {
    auto in = healthy(t0 + 1s);
    in.memory[0].used = 950;
    auto cs = ev.evaluate(in);
    CHECK(fires(cs, "vram_high", "sim0"));
    REQUIRE(ev.firing().size() == 1);
    CHECK(ev.firing()[0].detail == "95% of its memory limit in use");
    // Still high: no new change; back down: resolved.
    CHECK(ev.evaluate(in).empty());
    CHECK(resolves(ev.evaluate(healthy(t0 + 2s)), "vram_high"));
    CHECK(ev.firing().empty());
  }
  SECTION("allocation_failures is a rate") {
    auto in = healthy(t0 + 1s);
    in.memory[0].refused["out_of_memory"] = 5;
    CHECK(fires(ev.evaluate(in), "allocation_failures", "sim0"));
    // No new refusals in the next second: resolved.
    in.now = t0 + 2s;
    CHECK(resolves(ev.evaluate(in), "allocation_failures"));
  }
  SECTION("device_unavailable waits its time") {
    auto in = healthy(t0 + 1s);
    in.stats.devices[0].status = device_status::resetting;
    CHECK(ev.evaluate(in).empty());
    in.now = t0 + 7s;
    in.stats.devices[0].status = device_status::offline;
    auto cs = ev.evaluate(in);
    CHECK(fires(cs, "device_unavailable", "sim0"));
    CHECK(cs.at(0).what.severity == "critical");
    CHECK(resolves(ev.evaluate(healthy(t0 + 8s)), "device_unavailable"));
  }
  SECTION("circuit_open") {
    auto in = healthy(t0 + 1s);
    in.stats.devices[0].circuit = circuit_state::half_open;
    CHECK(fires(ev.evaluate(in), "circuit_open", "sim0"));
  }
  SECTION("fallback_rate_high needs enough items") {
    auto in = healthy(t0 + 1s);
    in.stats.completed = 5;
    in.stats.fallbacks = 5;
    CHECK(ev.evaluate(in).empty()); // 5 items: too few to judge
    in.now = t0 + 2s;
    in.stats.completed = 105;
    in.stats.fallbacks = 25;
    CHECK(fires(ev.evaluate(in), "fallback_rate_high", "runtime"));
    in.now = t0 + 3s;
    in.stats.completed = 205;
    CHECK(resolves(ev.evaluate(in), "fallback_rate_high"));
  }
  SECTION("tenant_near_quota: memory or in flight, never a zero quota") {
    auto in = healthy(t0 + 1s);
    in.headroom.tenants[0].inflight = 9;
    CHECK(fires(ev.evaluate(in), "tenant_near_quota", "t"));
    in = healthy(t0 + 2s);
    in.headroom.tenants[0].memory_quota = 0;
    in.headroom.tenants[0].max_inflight = 0;
    in.headroom.tenants[0].memory = 1 << 30;
    in.headroom.tenants[0].inflight = 1000;
    CHECK(resolves(ev.evaluate(in), "tenant_near_quota"));
  }
}

TEST_CASE("alert thresholds are checked at start", "[actors][alerts]") {
  pb::RuntimeConfig cfg;
  auto r = config::alert_rules_of(cfg);
  REQUIRE(r);
  CHECK(r->vram_high_fraction == 0.9);
  CHECK(r->enabled);
  cfg.mutable_alerts()->set_vram_high_fraction(1.5);
  CHECK(code_of(config::alert_rules_of(cfg).error()) == errc::malformed_config);
  cfg.mutable_alerts()->set_vram_high_fraction(0.5);
  cfg.mutable_alerts()->set_allocation_failure_rate(-1);
  CHECK_FALSE(config::alert_rules_of(cfg));
  cfg.mutable_alerts()->set_allocation_failure_rate(0);
  CHECK(r->xid_count == 3);
  CHECK(r->xid_window == 600s);
  cfg.mutable_alerts()->set_xid_count(5);
  cfg.mutable_alerts()->set_xid_window_ms(120000);
  r = config::alert_rules_of(cfg);
  REQUIRE(r);
  CHECK(r->xid_count == 5);
  CHECK(r->xid_window == 120s);
  cfg.mutable_alerts()->set_xid_count(10'001);
  CHECK(code_of(config::alert_rules_of(cfg).error()) == errc::malformed_config);
}

TEST_CASE_METHOD(test::actor_fixture,
                 "a device lost for good raises an alert that is audited",
                 "[actors][alerts]") {
  auto cfg = test::make_config(dir, 1, {{"sim0", 1}});
  cfg.mutable_alerts()->set_eval_interval_ms(20);
  cfg.mutable_alerts()->set_device_unavailable_ms(50);
  auto rt = runtime::start(sys, cfg);
  REQUIRE(rt);
  (*rt)->sim_device("sim0")->lose(true);
  // The device actor notices at its next health tick.
  bool seen = false;
  for (int i = 0; i < 300 && !seen; ++i) {
    auto a = (*rt)->alerts();
    REQUIRE(a);
    for (auto& x : *a)
      seen |= x.name == "device_unavailable" && x.subject == "sim0";
    if (!seen)
      std::this_thread::sleep_for(10ms);
  }
  CHECK(seen);
  REQUIRE((*rt)->flush_audit());
  std::ifstream in{(*rt)->audit_path(), std::ios::binary};
  std::string log{std::istreambuf_iterator<char>{in}, {}};
  CHECK(log.find("firing: device_unavailable critical (sim0)") !=
        std::string::npos);
}

TEST_CASE("xid_errors fires for repeated Xids of one device within the "
          "window, and resolves when they age out",
          "[actors][alerts]") {
  alert_rules rules;
  rules.xid_count = 3;
  rules.xid_window = 60s;
  alert_evaluator eval{rules};
  auto t0 = clock_type::now();
  auto at = [&](std::chrono::seconds s, uint64_t sim0, uint64_t sim1) {
    auto in = healthy(t0 + s);
    in.xids = {{"sim0", sim0, 79}, {"sim1", sim1, 13}};
    return eval.evaluate(in);
  };
  // Xids from before the node watched do not count.
  CHECK_FALSE(fires(at(0s, 40, 0), "xid_errors", "sim0"));
  CHECK(at(10s, 41, 1).empty());
  CHECK(at(20s, 42, 2).empty());
  // A third within 60 s: sim0 fires, sim1 (2) does not.
  auto third = at(30s, 43, 2);
  REQUIRE(fires(third, "xid_errors", "sim0"));
  CHECK_FALSE(fires(third, "xid_errors", "sim1"));
  auto firing = eval.firing();
  REQUIRE(firing.size() == 1);
  CHECK(firing[0].severity == "critical");
  CHECK(firing[0].detail == "3 Xid errors within 60 s (the last: Xid 79)");
  // Still three within the window at 65 s (10 s, 20 s and 30 s); the first
  // ages out at 71 s.
  CHECK(at(65s, 43, 2).empty());
  CHECK(resolves(at(75s, 43, 2), "xid_errors"));
  // A burst of many at once counts as many.
  CHECK(fires(at(80s, 43, 12), "xid_errors", "sim1"));
}

TEST_CASE_METHOD(test::actor_fixture,
                 "repeated Xids of a device raise xid_errors, audited",
                 "[actors][alerts]") {
  auto cfg = test::make_config(dir, 1, {{"sim0", 1}});
  cfg.mutable_alerts()->set_eval_interval_ms(20);
  cfg.mutable_alerts()->set_xid_count(2);
  auto rt = runtime::start(sys, cfg);
  REQUIRE(rt);
  // Application-level Xids: the device is degraded, not lost; each is
  // counted when raised and fails one launch there.
  auto sim = (*rt)->sim_device("sim0");
  REQUIRE(sim != nullptr);
  // Let the alert actor take its first look before the Xids come.
  std::this_thread::sleep_for(100ms);
  sim->raise_xid(13);
  sim->raise_xid(13);
  bool seen = false;
  for (int i = 0; i < 300 && !seen; ++i) {
    auto a = (*rt)->alerts();
    REQUIRE(a);
    for (auto& x : *a)
      seen |= x.name == "xid_errors" && x.subject == "sim0";
    if (!seen)
      std::this_thread::sleep_for(10ms);
  }
  CHECK(seen);
  REQUIRE((*rt)->flush_audit());
  std::ifstream in{(*rt)->audit_path(), std::ios::binary};
  std::string log{std::istreambuf_iterator<char>{in}, {}};
  CHECK(log.find("firing: xid_errors critical (sim0): 2 Xid errors within "
                 "600 s (the last: Xid 13)") != std::string::npos);
}
