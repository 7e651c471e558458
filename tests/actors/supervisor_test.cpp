// Supervision end to end: operators' drain, offline and online; a sticky
// error cleared by a new context; warnings that degrade; the watchdog counted
// from a launch's start; circuits; one_for_all; the fallback latency budget.
#include <catch2/catch.hpp>

#include <fstream>
#include <thread>

#include "config/supervision.hpp"
#include "tests/runtime_fixture.hpp"

using namespace cohort;
using namespace cohort::actors;
using namespace std::chrono_literals;

namespace {

using test::gemv_items;
using test::wait_status;

using fixture = test::actor_fixture;

bool audit_mentions(runtime& rt, const std::string& text) {
  return test::audit_text(rt).find(text) != std::string::npos;
}

} // namespace

TEST_CASE_METHOD(fixture, "operators drain, take offline and bring online",
                 "[actors][supervisor]") {
  auto cfg = test::make_config(dir, 0, {{"sim0", 1}, {"sim1", 1}, {"sim2", 1}});
  auto rt = runtime::start(sys, cfg);
  REQUIRE(rt);
  auto& r = **rt;
  REQUIRE_FALSE(r.drain("sim0"));
  CHECK(wait_status(r, 0, device_status::draining) == device_status::draining);
  REQUIRE_FALSE(r.set_offline("sim1"));
  CHECK(wait_status(r, 1, device_status::offline) == device_status::offline);
  auto items = gemv_items(40);
  auto e = test::submit_all(sys, r, items, [] {});
  test::check_exactly_once(items, e);
  CHECK(e.errors.empty());
  for (auto& [id, res] : e.results)
    CHECK(res.device == "sim2");
  // Bad requests: an unknown device, draining an offline one.
  CHECK(code_of(r.drain("nope")) == errc::unknown_device);
  CHECK(code_of(r.drain("sim1")) == errc::invalid_transition);
  // Both come back and take work again.
  REQUIRE_FALSE(r.set_online("sim0"));
  REQUIRE_FALSE(r.set_online("sim1"));
  CHECK(wait_status(r, 0, device_status::available) ==
        device_status::available);
  CHECK(wait_status(r, 1, device_status::available) ==
        device_status::available);
  (*rt)->sim_device("sim2")->slow_down(1000);
  auto more = gemv_items(40, 100);
  auto e2 = test::submit_all(sys, r, more, [] {});
  test::check_exactly_once(more, e2);
  std::set<std::string> used;
  for (auto& [id, res] : e2.results)
    used.insert(res.device);
  CHECK(used.count("sim0") == 1);
  CHECK(used.count("sim1") == 1);
  CHECK(audit_mentions(r, "draining -> available (online: operator)"));
  // An operator's offline and online is no restart.
  auto stats = r.placement_stats();
  REQUIRE(stats);
  for (auto& d : stats->devices)
    CHECK(d.restarts == 0);
  // A loss after it is.
  r.sim_device("sim1")->lose();
  CHECK(wait_status(r, 1, device_status::available) ==
        device_status::available);
  std::this_thread::sleep_for(100ms);
  stats = r.placement_stats();
  REQUIRE(stats);
  CHECK(stats->devices[1].restarts == 1);
  CHECK(stats->devices[0].restarts == 0);
}

TEST_CASE_METHOD(fixture, "taking a busy device offline moves its work",
                 "[actors][supervisor]") {
  auto cfg = test::make_config(dir, 0, {{"sim0", 1}, {"sim1", 1}});
  auto rt = runtime::start(sys, cfg);
  REQUIRE(rt);
  (*rt)->sim_device("sim0")->slow_down(3000);
  (*rt)->sim_device("sim1")->slow_down(3000);
  auto items = gemv_items(30);
  auto e = test::submit_all(sys, **rt, items, [&] {
    std::this_thread::sleep_for(20ms);
    REQUIRE_FALSE((*rt)->set_offline("sim0"));
  });
  test::check_exactly_once(items, e);
  CHECK(e.errors.empty());
  auto stats = (*rt)->placement_stats();
  REQUIRE(stats);
  CHECK(stats->devices[0].status == device_status::offline);
  // An operator's offline is not a loss and opens no circuit.
  CHECK(stats->devices[0].losses == 0);
  CHECK(stats->devices[0].circuit_opens == 0);
  CHECK(stats->retries > 0);
}

TEST_CASE_METHOD(fixture, "a sticky error is cleared by a new context",
                 "[actors][supervisor]") {
  auto cfg = test::make_config(dir, 0, {{"sim0", 1}});
  auto rt = runtime::start(sys, cfg);
  REQUIRE(rt);
  auto sim = (*rt)->sim_device("sim0");
  sim->poison();
  // In-process reset cannot clear it.
  CHECK(code_of(sim->reset()) == errc::context_poisoned);
  auto items = gemv_items(10);
  auto e = test::submit_all(sys, **rt, items, [] {});
  test::check_exactly_once(items, e);
  CHECK(e.errors.empty());
  auto stats = (*rt)->placement_stats();
  REQUIRE(stats);
  CHECK(stats->devices[0].losses == 1);
  CHECK(stats->devices[0].restarts == 1);
  CHECK(stats->devices[0].status == device_status::available);
  CHECK(audit_mentions(**rt, "recreating the context"));
  CHECK(audit_mentions(**rt, "new context, restart 1 of"));
}

TEST_CASE_METHOD(fixture, "warnings degrade a device until it is quiet",
                 "[actors][supervisor]") {
  auto cfg = test::make_config(dir, 0, {{"sim0", 1}, {"sim1", 1}});
  cfg.mutable_supervision()->set_degraded_quiet_ms(150);
  auto rt = runtime::start(sys, cfg);
  REQUIRE(rt);
  (*rt)->sim_device("sim0")->warn("thermal throttling");
  CHECK(wait_status(**rt, 0, device_status::degraded) ==
        device_status::degraded);
  CHECK(audit_mentions(**rt, "warning: thermal throttling (injected)"));
  CHECK(wait_status(**rt, 0, device_status::available) ==
        device_status::available);
  // An application-level Xid fails one kernel and degrades the device too.
  (*rt)->sim_device("sim1")->raise_xid(31);
  auto items = gemv_items(5);
  auto e = test::submit_all(sys, **rt, items, [] {});
  test::check_exactly_once(items, e);
  CHECK(wait_status(**rt, 1, device_status::degraded) ==
        device_status::degraded);
}

TEST_CASE_METHOD(fixture, "the watchdog counts from a launch's start",
                 "[actors][supervisor]") {
  auto cfg = test::make_config(dir, 0, {});
  auto* g = cfg.mutable_devices()->add_sim_gpu();
  g->set_name("sim0");
  g->set_memory_mib(64);
  g->set_streams(1);
  g->set_speed(1);
  auto* kt = cfg.mutable_supervision()->add_kernel_timeout();
  kt->set_kernel("gemv");
  kt->set_timeout_ms(400);
  cfg.set_kernel_timeout_ms(50); // every other kernel
  auto rt = runtime::start(sys, cfg);
  REQUIRE(rt);
  auto sim = (*rt)->sim_device("sim0");
  // About 150 ms each, one stream: the fourth ends 600 ms after it was
  // queued, yet each runs well inside its 400 ms from its own start.
  sim->slow_down(12000);
  auto items = gemv_items(4);
  auto e = test::submit_all(sys, **rt, items, [] {});
  test::check_exactly_once(items, e);
  CHECK(e.errors.empty());
  auto stats = (*rt)->placement_stats();
  REQUIRE(stats);
  CHECK(stats->devices[0].losses == 0);
  // A launch that runs past its own timeout hangs the device: 4x slower,
  // about 600 ms against 400.
  sim->slow_down(48000);
  auto slow = gemv_items(1, 10);
  auto e2 = test::submit_all(sys, **rt, slow, [] {});
  test::check_exactly_once(slow, e2);
  stats = (*rt)->placement_stats();
  REQUIRE(stats);
  CHECK(stats->devices[0].losses >= 1);
  CHECK(audit_mentions(**rt, "ran past its 400 ms kernel timeout"));
}

TEST_CASE_METHOD(fixture,
                 "a circuit opens on repeated faults and closes on "
                 "passing probes",
                 "[actors][supervisor]") {
  // The tenant may use only sim0: while its circuit is open, items wait.
  auto cfg = test::make_config(dir, 1, {{"sim0", 100}});
  cfg.mutable_tenant(0)->clear_devices();
  cfg.mutable_tenant(0)->add_devices("sim0");
  auto* c = cfg.mutable_supervision()->mutable_circuit();
  c->set_failures(3);
  c->set_open_ms(200);
  c->set_probes(2);
  auto rt = runtime::start(sys, cfg);
  REQUIRE(rt);
  auto sim = (*rt)->sim_device("sim0");
  // Each Xid fails one launch; the item then runs there on its retry.
  for (int i = 0; i < 2; ++i) {
    sim->raise_xid(13);
    auto one = gemv_items(1, uint64_t(i + 1));
    auto e = test::submit_all(sys, **rt, one, [] {});
    test::check_exactly_once(one, e);
    CHECK(e.errors.empty());
  }
  auto stats = (*rt)->placement_stats();
  REQUIRE(stats);
  CHECK(stats->devices[1].circuit == circuit_state::closed);
  // The third failure opens it: the item waits out the open period.
  sim->raise_xid(13);
  auto third = gemv_items(1, 3);
  auto t0 = std::chrono::steady_clock::now();
  caf::scoped_actor self{sys};
  self->send((*rt)->entry(), submit_atom::value, third[0],
             caf::actor_cast<client_sink>(self));
  std::this_thread::sleep_for(50ms);
  stats = (*rt)->placement_stats();
  REQUIRE(stats);
  CHECK(stats->devices[1].circuit_opens == 1);
  CHECK(stats->devices[1].circuit == circuit_state::open);
  bool ended = false;
  self->receive([&](result_atom, work_result&) { ended = true; },
                [&](failed_atom, uint64_t, caf::error&) {});
  CHECK(ended);
  CHECK(std::chrono::steady_clock::now() - t0 >= 190ms);
  auto after = gemv_items(20, 100);
  auto e2 = test::submit_all(sys, **rt, after, [] {});
  test::check_exactly_once(after, e2);
  stats = (*rt)->placement_stats();
  REQUIRE(stats);
  CHECK(stats->devices[1].circuit == circuit_state::closed);
  CHECK(audit_mentions(**rt, "circuit closed: its probes passed"));
}

TEST_CASE_METHOD(fixture, "one_for_all restarts every device with the lost one",
                 "[actors][supervisor]") {
  auto cfg = test::make_config(dir, 0, {{"sim0", 1}, {"sim1", 1}});
  cfg.mutable_supervision()->set_strategy(pb::ONE_FOR_ALL);
  auto rt = runtime::start(sys, cfg);
  REQUIRE(rt);
  (*rt)->sim_device("sim0")->lose();
  CHECK(wait_status(**rt, 0, device_status::available) ==
        device_status::available);
  std::this_thread::sleep_for(100ms);
  auto stats = (*rt)->placement_stats();
  REQUIRE(stats);
  CHECK(stats->devices[0].restarts == 1);
  CHECK(stats->devices[1].restarts == 1);
  CHECK(audit_mentions(**rt, "(one_for_all)"));
  auto items = gemv_items(10);
  auto e = test::submit_all(sys, **rt, items, [] {});
  test::check_exactly_once(items, e);
}

TEST_CASE_METHOD(fixture,
                 "a tenant's fallback budget keeps items off the CPU workers: "
                 "they wait for a GPU or fail, as its policy says",
                 "[actors][supervisor]") {
  auto cfg = test::make_config(dir, 1, {{"sim0", 100}});
  auto& grant = *cfg.mutable_tenant(0);
  grant.set_fallback_budget_ms(20);
  grant.set_queue_timeout_ms(300);
  // Items that fell back, and those whose end was an error of `code`.
  auto count = [](const test::ends& e, errc code) {
    size_t fell_back = 0, failed = 0;
    for (auto& [id, res] : e.results)
      fell_back += res.fallback ? 1 : 0;
    for (auto& [id, err] : e.errors)
      failed += code_of(err) == code ? 1 : 0;
    return std::pair{fell_back, failed};
  };
  // The GPU is lost 40 ms after the items were admitted: on the CPU worker
  // each would end past the 20 ms budget.
  auto run = [&](bool permanent) {
    auto rt = runtime::start(sys, cfg);
    REQUIRE(rt);
    auto sim = (*rt)->sim_device("sim0");
    sim->slow_down(20000);
    auto items = gemv_items(10);
    auto e = test::submit_all(sys, **rt, items, [&] {
      std::this_thread::sleep_for(40ms);
      sim->lose(permanent);
      sim->slow_down(1);
    });
    test::check_exactly_once(items, e);
    auto stats = (*rt)->placement_stats();
    REQUIRE(stats);
    auto fb = stats->fallback_by_tenant["t"];
    auto audit = test::audit_text(**rt);
    return std::tuple{std::move(e), fb, std::move(audit)};
  };
  SECTION("FALLBACK_ALLOW: they fall back, timed against the budget") {
    auto [e, fb, audit] = run(true);
    CHECK(e.errors.empty());
    CHECK(fb.items > 0);
    CHECK(fb.budget_ns == 20'000'000);
    CHECK(fb.over_budget > 0);
    CHECK(fb.max_ns > fb.budget_ns);
    CHECK(fb.held_back == 0);
    CHECK_THAT(audit, Catch::Contains("over the fallback latency budget"));
  }
  SECTION("FALLBACK_FAIL: over_fallback_budget at once") {
    grant.set_on_over_budget(pb::FALLBACK_FAIL);
    auto [e, fb, audit] = run(true);
    auto [fell_back, failed] = count(e, errc::over_fallback_budget);
    CHECK(fell_back == 0);
    CHECK(failed > 0);
    CHECK(failed + e.results.size() == 10);
    CHECK(fb.held_back == failed);
    for (auto& [id, err] : e.errors)
      CHECK_THAT(describe(err),
                 Catch::Contains("past tenant 't''s fallback budget of 20 ms"));
    CHECK_THAT(audit, Catch::Contains("held back: predicted to end on cpu0"));
  }
  SECTION("FALLBACK_WAIT: the GPU comes back and runs them") {
    grant.set_on_over_budget(pb::FALLBACK_WAIT);
    auto [e, fb, audit] = run(false);
    CHECK(e.errors.empty());
    CHECK(count(e, errc::none).first == 0);
    CHECK(fb.held_back > 0);
    size_t on_gpu = 0;
    for (auto& [id, res] : e.results)
      on_gpu += res.device == "sim0" ? 1 : 0;
    CHECK(on_gpu >= fb.held_back);
    CHECK_THAT(audit, Catch::Contains("it waits for a GPU (FALLBACK_WAIT)"));
  }
  SECTION("FALLBACK_WAIT: no GPU comes back within the queue timeout") {
    grant.set_on_over_budget(pb::FALLBACK_WAIT);
    auto [e, fb, audit] = run(true);
    auto [fell_back, failed] = count(e, errc::no_device_available);
    CHECK(fell_back == 0);
    CHECK(failed > 0);
    CHECK(fb.held_back == failed);
    for (auto& [id, err] : e.errors)
      CHECK_THAT(describe(err),
                 Catch::Contains("its fallback budget kept it off the CPU "
                                 "workers"));
  }
  SECTION("a fallback predicted within the budget is made") {
    grant.set_fallback_budget_ms(60'000);
    grant.set_on_over_budget(pb::FALLBACK_FAIL);
    auto [e, fb, audit] = run(true);
    CHECK(e.errors.empty());
    CHECK(count(e, errc::none).first > 0);
    CHECK(fb.held_back == 0);
  }
  SECTION("FALLBACK_WAIT and FALLBACK_FAIL need a budget") {
    grant.set_fallback_budget_ms(0);
    grant.set_on_over_budget(pb::FALLBACK_WAIT);
    auto rt = runtime::start(sys, cfg);
    REQUIRE_FALSE(rt);
    CHECK(code_of(rt.error()) == errc::malformed_config);
    CHECK_THAT(describe(rt.error()),
               Catch::Contains("FALLBACK_WAIT needs a fallback_budget_ms"));
  }
}

TEST_CASE("supervision settings are checked at start", "[actors][supervisor]") {
  test::temp_dir dir;
  auto cfg = test::make_config(dir, 1, {});
  auto* kt = cfg.mutable_supervision()->add_kernel_timeout();
  kt->set_kernel("nope");
  kt->set_timeout_ms(10);
  auto x = config::supervision_of(cfg);
  REQUIRE_FALSE(x);
  CHECK(code_of(x.error()) == errc::malformed_config);
  CHECK(describe(x.error()).find("unknown kernel 'nope'") != std::string::npos);
  cfg.mutable_supervision()->clear_kernel_timeout();
  cfg.mutable_supervision()->set_restart_delay_ms(500);
  cfg.mutable_supervision()->set_max_restart_delay_ms(100);
  CHECK_FALSE(config::supervision_of(cfg));
  cfg.mutable_supervision()->set_max_restart_delay_ms(0);
  cfg.mutable_supervision()->set_degraded_penalty(0.5);
  CHECK_FALSE(config::supervision_of(cfg));
  cfg.mutable_supervision()->set_degraded_penalty(2);
  auto ok = config::supervision_of(cfg);
  REQUIRE(ok);
  CHECK(ok->first.degraded_penalty == 2);
  CHECK(ok->second.restart_delay == 500ms);
}

TEST_CASE_METHOD(fixture,
                 "a device brought online before its actor is gone "
                 "comes back",
                 "[actors][supervisor]") {
  auto cfg = test::make_config(dir, 0, {{"sim0", 1}, {"sim1", 1}});
  auto rt = runtime::start(sys, cfg);
  REQUIRE(rt);
  auto& r = **rt;
  // Online follows offline at once: the old actor may still be alive.
  REQUIRE_FALSE(r.set_offline("sim0"));
  REQUIRE_FALSE(r.set_online("sim0"));
  CHECK(wait_status(r, 0, device_status::available) ==
        device_status::available);
  r.sim_device("sim1")->slow_down(1000);
  auto items = gemv_items(20);
  auto e = test::submit_all(sys, r, items, [] {});
  test::check_exactly_once(items, e);
  CHECK(e.errors.empty());
  std::set<std::string> used;
  for (auto& [id, res] : e.results)
    used.insert(res.device);
  CHECK(used.count("sim0") == 1);
}

TEST_CASE_METHOD(fixture,
                 "restarts caused by a sibling do not count against "
                 "a device's intensity",
                 "[actors][supervisor]") {
  auto cfg = test::make_config(dir, 0, {{"sim0", 1}, {"sim1", 1}});
  cfg.mutable_supervision()->set_strategy(pb::ONE_FOR_ALL);
  cfg.set_max_restarts(2);
  cfg.set_restart_period_ms(60000);
  auto rt = runtime::start(sys, cfg);
  REQUIRE(rt);
  auto& r = **rt;
  // sim0 is lost twice: sim1 restarts with it each time.
  for (uint32_t n = 1; n <= 2; ++n) {
    r.sim_device("sim0")->lose();
    for (int i = 0; i < 300; ++i) {
      auto s = r.placement_stats();
      REQUIRE(s);
      if (s->devices[1].restarts == n &&
          s->devices[1].status == device_status::available)
        break;
      std::this_thread::sleep_for(10ms);
    }
  }
  // sim1's own first loss is within its limit: it restarts.
  r.sim_device("sim1")->lose();
  std::this_thread::sleep_for(100ms);
  CHECK(wait_status(r, 1, device_status::available) ==
        device_status::available);
  auto stats = r.placement_stats();
  REQUIRE(stats);
  CHECK(stats->devices[1].restarts == 3);
  CHECK_FALSE(audit_mentions(r, "restart limit of 2"));
}

TEST_CASE_METHOD(fixture, "a device loss counts once against its circuit",
                 "[actors][supervisor]") {
  auto cfg = test::make_config(dir, 0, {{"sim0", 1}, {"sim1", 1}});
  cfg.mutable_supervision()->mutable_circuit()->set_failures(3);
  auto rt = runtime::start(sys, cfg);
  REQUIRE(rt);
  auto& r = **rt;
  r.sim_device("sim0")->slow_down(3000);
  r.sim_device("sim1")->slow_down(3000);
  auto items = gemv_items(30);
  // Items fill sim0's window (2 per stream) when it is lost.
  auto e = test::submit_all(sys, r, items, [&] {
    std::this_thread::sleep_for(20ms);
    r.sim_device("sim0")->lose();
  });
  test::check_exactly_once(items, e);
  CHECK(e.errors.empty());
  auto stats = r.placement_stats();
  REQUIRE(stats);
  CHECK(stats->devices[0].losses == 1);
  // As many as its circuit's threshold: counted one by one they would open
  // it.
  CHECK(stats->devices[0].failed_placements >= 3);
  CHECK(stats->devices[0].circuit_opens == 0);
}

TEST_CASE_METHOD(fixture, "a drained device comes back from a restart draining",
                 "[actors][supervisor]") {
  auto cfg = test::make_config(dir, 0, {{"sim0", 1}, {"sim1", 1}});
  auto rt = runtime::start(sys, cfg);
  REQUIRE(rt);
  auto& r = **rt;
  REQUIRE_FALSE(r.drain("sim0"));
  CHECK(wait_status(r, 0, device_status::draining) == device_status::draining);
  r.sim_device("sim0")->lose();
  for (int i = 0; i < 300; ++i) {
    auto s = r.placement_stats();
    REQUIRE(s);
    if (s->devices[0].restarts == 1)
      break;
    std::this_thread::sleep_for(10ms);
  }
  auto stats = r.placement_stats();
  REQUIRE(stats);
  CHECK(stats->devices[0].restarts == 1);
  CHECK(stats->devices[0].status == device_status::draining);
  r.sim_device("sim1")->slow_down(1000);
  auto items = gemv_items(20);
  auto e = test::submit_all(sys, r, items, [] {});
  test::check_exactly_once(items, e);
  for (auto& [id, res] : e.results)
    CHECK(res.device == "sim1");
}
