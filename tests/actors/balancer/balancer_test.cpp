// Admission under the lease and placement with device memory: each limit
// policy (reject, queue, CPU fallback) on in-flight caps, rate limits and
// memory quotas, queue limits and timeouts, and shutdown with items held
// back or in flight. Every item must end exactly once in every case.
#include <catch2/catch.hpp>

#include "tests/runtime_fixture.hpp"

using namespace cohort;
using namespace cohort::actors;
using namespace std::chrono_literals;

namespace {

using fixture = test::actor_fixture;

// One gemv of 64 x 64: what it takes of device memory.
const uint64_t gemv_bytes = item_bytes(test::gemv_item(1));

std::vector<work_item> gemv_items(size_t n, std::string tenant = "t") {
  std::vector<work_item> out;
  for (size_t i = 0; i < n; ++i)
    out.push_back(test::gemv_item(i + 1, tenant));
  return out;
}

// A sim GPU whose gemv takes about `ms` of modeled time.
void slow_to(actors::runtime& rt, const std::string& sim, double ms) {
  // A 64 x 64 gemv is about 12 us at speed 1.
  rt.sim_device(sim)->slow_down(ms * 1000.0 / 12.0);
}

} // namespace

TEST_CASE_METHOD(fixture,
                 "QUEUE holds items over the in-flight cap until "
                 "they fit",
                 "[actors][balancer]") {
  auto cfg = test::make_config(dir, 0, {{"sim0", 1}});
  cfg.mutable_tenant(0)->set_max_inflight(2);
  cfg.mutable_tenant(0)->set_on_limit(pb::QUEUE);
  auto rt = runtime::start(sys, cfg);
  REQUIRE(rt);
  slow_to(**rt, "sim0", 5);
  auto items = gemv_items(8);
  auto e = test::submit_all(sys, **rt, items, [] {});
  test::check_exactly_once(items, e);
  CHECK(e.errors.empty());
  auto s = (*rt)->admission_stats();
  REQUIRE(s);
  CHECK(s->held == 6);
  CHECK(s->admitted == 8);
  CHECK(s->rejected == 0);
}

TEST_CASE_METHOD(fixture,
                 "held items end with the limit's error when their "
                 "time or the queue runs out",
                 "[actors][balancer]") {
  auto cfg = test::make_config(dir, 0, {{"sim0", 1}});
  auto* t = cfg.mutable_tenant(0);
  t->set_max_inflight(1);
  t->set_on_limit(pb::QUEUE);
  t->set_queue_limit(2);
  t->set_queue_timeout_ms(50);
  auto rt = runtime::start(sys, cfg);
  REQUIRE(rt);
  slow_to(**rt, "sim0", 400);
  auto items = gemv_items(5);
  auto e = test::submit_all(sys, **rt, items, [] {});
  test::check_exactly_once(items, e);
  // One ran; two were held and timed out; two found the queue full.
  CHECK(e.results.size() == 1);
  REQUIRE(e.errors.size() == 4);
  int timed_out = 0, full = 0;
  for (auto& [id, err] : e.errors) {
    if (code_of(err) == errc::over_inflight_quota) {
      CHECK_THAT(describe(err), Catch::Contains("held back for 50 ms"));
      ++timed_out;
    } else {
      CHECK(code_of(err) == errc::queue_full);
      CHECK_THAT(describe(err), Catch::Contains("queue of 2"));
      ++full;
    }
  }
  CHECK(timed_out == 2);
  CHECK(full == 2);
  CHECK((*rt)->admission_stats()->timeouts == 2);
}

TEST_CASE_METHOD(fixture, "a rate limit refuses or paces a tenant",
                 "[actors][balancer]") {
  auto cfg = test::make_config(dir, 1, {});
  auto* t = cfg.mutable_tenant(0);
  t->mutable_rate_limit()->set_items_per_second(50);
  t->mutable_rate_limit()->set_burst(3);
  SECTION("REJECT: the burst passes, the rest is refused") {
    auto rt = runtime::start(sys, cfg);
    REQUIRE(rt);
    auto items = gemv_items(10);
    auto e = test::submit_all(sys, **rt, items, [] {});
    test::check_exactly_once(items, e);
    CHECK(e.results.size() == 3);
    CHECK(e.errors.size() == 7);
    for (auto& [id, err] : e.errors)
      CHECK(code_of(err) == errc::over_rate_limit);
  }
  SECTION("QUEUE: everything runs, no faster than the rate") {
    t->set_on_limit(pb::QUEUE);
    auto rt = runtime::start(sys, cfg);
    REQUIRE(rt);
    auto items = gemv_items(10);
    auto start = std::chrono::steady_clock::now();
    auto e = test::submit_all(sys, **rt, items, [] {});
    auto took = std::chrono::steady_clock::now() - start;
    test::check_exactly_once(items, e);
    CHECK(e.errors.empty());
    // 3 at once, then 7 at 50/s: at least 140 ms.
    CHECK(took >= 130ms);
  }
}

TEST_CASE_METHOD(fixture,
                 "a memory quota under REJECT fails what does not fit "
                 "now and refuses what never will",
                 "[actors][balancer]") {
  auto cfg = test::make_config(dir, 1, {{"sim0", 1}});
  auto* t = cfg.mutable_tenant(0);
  t->clear_devices();
  t->add_devices("sim0");
  t->set_memory_quota_bytes(gemv_bytes);
  auto rt = runtime::start(sys, cfg);
  REQUIRE(rt);
  slow_to(**rt, "sim0", 100);
  auto items = gemv_items(3);
  // Too big for its quota anywhere: refused at admission.
  items.push_back(test::gemv_item(4, "t", 128, 128));
  auto e = test::submit_all(sys, **rt, items, [] {});
  test::check_exactly_once(items, e);
  CHECK(e.results.size() == 1);
  REQUIRE(e.errors.size() == 3);
  CHECK(code_of(e.errors[4]) == errc::over_memory_quota);
  CHECK_THAT(describe(e.errors[4]), Catch::Contains("can ever hold"));
  auto s = (*rt)->admission_stats();
  REQUIRE(s);
  CHECK(s->rejected == 1);
  CHECK(s->admitted == 3);
  auto p = (*rt)->placement_stats();
  REQUIRE(p);
  CHECK(p->failed == 2);
}

TEST_CASE_METHOD(fixture,
                 "a memory quota under QUEUE runs items as memory "
                 "frees up, never above the quota",
                 "[actors][balancer][memory]") {
  auto cfg = test::make_config(dir, 0, {{"sim0", 1}});
  auto* t = cfg.mutable_tenant(0);
  t->set_memory_quota_bytes(2 * gemv_bytes);
  t->set_on_limit(pb::QUEUE);
  auto rt = runtime::start(sys, cfg);
  REQUIRE(rt);
  slow_to(**rt, "sim0", 3);
  auto items = gemv_items(10);
  auto e = test::submit_all(sys, **rt, items, [] {});
  test::check_exactly_once(items, e);
  CHECK(e.errors.empty());
  CHECK((*rt)->admission_stats()->memory_waits >= 7);
  auto mem = (*rt)->memory_stats();
  REQUIRE(mem);
  auto& sim = mem->at(0);
  CHECK(sim.device == "sim0");
  CHECK(sim.allocations == 10);
  CHECK(sim.peak_used <= 2 * gemv_bytes);
  CHECK(sim.live_allocations == 0);
}

TEST_CASE_METHOD(fixture,
                 "a memory quota under CPU_FALLBACK runs the rest "
                 "on a CPU worker",
                 "[actors][balancer][memory]") {
  auto cfg = test::make_config(dir, 1, {{"sim0", 100}});
  auto* t = cfg.mutable_tenant(0);
  t->set_memory_quota_bytes(gemv_bytes);
  t->set_on_limit(pb::CPU_FALLBACK);
  auto rt = runtime::start(sys, cfg);
  REQUIRE(rt);
  // Fast on paper (so it is the first choice), slow in fact (items stay).
  slow_to(**rt, "sim0", 50);
  auto items = gemv_items(12);
  auto e = test::submit_all(sys, **rt, items, [] {});
  test::check_exactly_once(items, e);
  CHECK(e.errors.empty());
  // The CPU worker may also get an item on its merits (its first run of
  // gemv is measured); every fallback ran there.
  size_t fell_back = 0;
  for (auto& [id, res] : e.results) {
    if (res.fallback)
      CHECK(res.device == "cpu0");
    fell_back += res.fallback;
  }
  CHECK(fell_back > 0);
  auto s = (*rt)->admission_stats();
  REQUIRE(s);
  CHECK(s->memory_fallbacks == fell_back);
}

TEST_CASE_METHOD(fixture, "stopping ends held and running items once",
                 "[actors][balancer]") {
  auto cfg = test::make_config(dir, 0, {{"sim0", 1}});
  auto* t = cfg.mutable_tenant(0);
  t->set_max_inflight(1);
  t->set_on_limit(pb::QUEUE);
  cfg.set_shutdown_drain_ms(100);
  auto rt = runtime::start(sys, cfg);
  REQUIRE(rt);
  slow_to(**rt, "sim0", 2000);
  auto items = gemv_items(4);
  auto e = test::submit_all(sys, **rt, items, [&] {
    std::this_thread::sleep_for(20ms);
    (*rt)->stop();
  });
  CHECK_FALSE(e.timed_out);
  REQUIRE(e.count.size() == 4);
  for (auto& [id, n] : e.count)
    CHECK(n == 1);
  REQUIRE(e.errors.size() == 4);
  for (auto& [id, err] : e.errors)
    CHECK(code_of(err) == errc::shutting_down);
}

TEST_CASE_METHOD(fixture,
                 "a client's second item with an id in flight is refused "
                 "with duplicate_id",
                 "[actors][balancer]") {
  auto cfg = test::make_config(dir, 0, {{"sim0", 1}});
  auto rt = runtime::start(sys, cfg);
  REQUIRE(rt);
  slow_to(**rt, "sim0", 200);
  caf::scoped_actor self{sys};
  auto sink = caf::actor_cast<client_sink>(self);
  self->send((*rt)->entry(), submit_atom::value, test::gemv_item(7), sink);
  self->send((*rt)->entry(), submit_atom::value, test::gemv_item(7), sink);
  std::vector<caf::error> errors;
  std::vector<work_result> results;
  for (int i = 0; i < 2; ++i)
    self->receive(
        [&](result_atom, work_result& r) { results.push_back(std::move(r)); },
        [&](failed_atom, uint64_t id, caf::error& err) {
          CHECK(id == 7);
          errors.push_back(std::move(err));
        },
        caf::after(10s) >> [&] { FAIL("an end is missing"); });
  REQUIRE(errors.size() == 1);
  CHECK(code_of(errors[0]) == errc::duplicate_id);
  CHECK(results.size() == 1);
  // Once the first has ended, the id is free again; another client's item
  // with the same id never clashes.
  self->send((*rt)->entry(), submit_atom::value, test::gemv_item(7), sink);
  self->receive(
      [&](result_atom, work_result& r) { CHECK(r.id == 7); },
      [&](failed_atom, uint64_t, caf::error& err) { FAIL(describe(err)); });
  auto other = (*rt)->run(test::gemv_item(7));
  CHECK(other);
  CHECK((*rt)->admission_stats()->rejected_by_reason["duplicate_id"] == 1);
}

TEST_CASE_METHOD(fixture, "a submission without a client_sink is refused",
                 "[actors][balancer]") {
  auto cfg = test::make_config(dir, 1, {});
  auto rt = runtime::start(sys, cfg);
  REQUIRE(rt);
  caf::anon_send((*rt)->entry(), submit_atom::value, test::gemv_item(1),
                 client_sink{});
  // It is neither admitted nor run: only the refusal is counted and audited.
  auto stats = (*rt)->admission_stats();
  for (int i = 0; i < 100 && stats && stats->rejected == 0; ++i) {
    std::this_thread::sleep_for(5ms);
    stats = (*rt)->admission_stats();
  }
  REQUIRE(stats);
  CHECK(stats->admitted == 0);
  CHECK(stats->rejected_by_reason["invalid_arguments"] == 1);
  REQUIRE((*rt)->flush_audit());
  auto recs = test::read_audit((*rt)->audit_path());
  bool audited = false;
  for (auto& r : recs)
    audited |= r.kind() == pb::REJECTED &&
               r.detail().find("without a client_sink") != std::string::npos;
  CHECK(audited);
}

TEST_CASE_METHOD(fixture,
                 "cancel ends a waiting item at once and a running one when "
                 "its launch ends",
                 "[actors][balancer]") {
  auto cfg = test::make_config(dir, 0, {{"sim0", 1}});
  auto* t = cfg.mutable_tenant(0);
  t->set_max_inflight(2);
  t->set_on_limit(pb::QUEUE);
  auto rt = runtime::start(sys, cfg);
  REQUIRE(rt);
  slow_to(**rt, "sim0", 300);
  caf::scoped_actor self{sys};
  auto sink = caf::actor_cast<client_sink>(self);
  // 1 and 2 are admitted (2 waits for a stream), 3 is held back.
  for (uint64_t id = 1; id <= 3; ++id)
    self->send((*rt)->entry(), submit_atom::value, test::gemv_item(id), sink);
  std::this_thread::sleep_for(50ms);
  for (uint64_t id : {3, 1, 99})
    self->send((*rt)->entry(), cancel_atom::value, id, sink);
  std::map<uint64_t, caf::error> errors;
  std::map<uint64_t, work_result> results;
  std::vector<uint64_t> order;
  for (int i = 0; i < 3; ++i)
    self->receive(
        [&](result_atom, work_result& r) {
          order.push_back(r.id);
          results[r.id] = std::move(r);
        },
        [&](failed_atom, uint64_t id, caf::error& err) {
          order.push_back(id);
          errors[id] = std::move(err);
        },
        caf::after(10s) >> [&] { FAIL("an end is missing"); });
  // Nothing more arrives: each ended once.
  self->receive(
      [&](result_atom, work_result& r) { FAIL("a second end of " << r.id); },
      [&](failed_atom, uint64_t id, caf::error&) {
        FAIL("a second end of " << id);
      },
      caf::after(100ms) >> [] {});
  REQUIRE(order.size() == 3);
  // The held item ended at once, the running one only when it finished.
  CHECK(order.front() == 3);
  CHECK(code_of(errors[3]) == errc::cancelled);
  CHECK(code_of(errors[1]) == errc::cancelled);
  CHECK_THAT(describe(errors[1]), Catch::Contains("result was dropped"));
  CHECK(results.count(2) == 1);
  CHECK((*rt)->placement_stats()->cancelled == 2);
}

TEST_CASE_METHOD(fixture,
                 "a device's memory refusal is waited for and is not a "
                 "placement",
                 "[actors][balancer][memory]") {
  auto policy = GENERATE(pb::QUEUE, pb::REJECT);
  INFO("on_limit " << pb::LimitPolicy_Name(policy));
  auto cfg = test::make_config(dir, 0, {{"sim0", 1}});
  cfg.set_max_attempts(2);
  cfg.mutable_tenant(0)->set_on_limit(policy);
  auto rt = runtime::start(sys, cfg);
  REQUIRE(rt);
  // Twelve refusals in a row: far more than its placements allow.
  (*rt)->sim_device("sim0")->fail_next_allocations(12);
  auto items = gemv_items(3);
  auto e = test::submit_all(sys, **rt, items, [] {});
  test::check_exactly_once(items, e);
  for (auto& [id, err] : e.errors)
    FAIL_CHECK("item " << id << ": " << describe(err));
  auto stats = (*rt)->placement_stats();
  REQUIRE(stats);
  CHECK(stats->devices[0].memory_refusals == 12);
  CHECK(stats->retries == 0);
  for (auto& [id, res] : e.results)
    CHECK(res.attempts == 1);
}

TEST_CASE_METHOD(fixture,
                 "memory refusals end an item after its queue timeout, with "
                 "the device's error",
                 "[actors][balancer][memory]") {
  auto cfg = test::make_config(dir, 0, {{"sim0", 1}});
  cfg.mutable_tenant(0)->set_on_limit(pb::QUEUE);
  cfg.mutable_tenant(0)->set_queue_timeout_ms(100);
  auto rt = runtime::start(sys, cfg);
  REQUIRE(rt);
  (*rt)->sim_device("sim0")->memory()->faults().fail_above(1);
  auto start = std::chrono::steady_clock::now();
  auto res = (*rt)->run(test::gemv_item(1));
  auto took = std::chrono::steady_clock::now() - start;
  REQUIRE_FALSE(res);
  CHECK(code_of(res.error()) == errc::out_of_memory);
  CHECK_THAT(describe(res.error()), Catch::Contains("queue timeout"));
  CHECK(took >= 100ms);
  auto stats = (*rt)->placement_stats();
  REQUIRE(stats);
  // Backoff: a few dozen tries in 100 ms, not a tight loop.
  CHECK(stats->devices[0].memory_refusals >= 3);
  CHECK(stats->devices[0].memory_refusals <= 60);
}

TEST_CASE_METHOD(fixture,
                 "small simulated GPUs with large items run everything "
                 "without a fault",
                 "[actors][balancer][memory]") {
  // 24 MiB GPUs and items of up to 7 MiB: the pool's exact layout refuses
  // now and then what the balancer's books let through.
  auto cfg = test::make_config(dir, 0, {{"sim0", 1}, {"sim1", 2}});
  for (auto& g : *cfg.mutable_devices()->mutable_sim_gpu())
    g.set_memory_mib(24);
  cfg.mutable_tenant(0)->set_on_limit(pb::QUEUE);
  auto rt = runtime::start(sys, cfg);
  REQUIRE(rt);
  std::vector<work_item> items;
  for (uint64_t id = 1; id <= 200; ++id) {
    // m x n floats: up to 1,700,000 of them, about 6.5 MiB with the rest.
    uint64_t m = 64 + (id * 7919) % 1300, n = 1300;
    items.push_back(test::gemv_item(id, "t", m, n));
  }
  auto e = test::submit_all(sys, **rt, items, [] {});
  test::check_exactly_once(items, e);
  for (auto& [id, err] : e.errors)
    FAIL_CHECK("item " << id << ": " << describe(err));
}

TEST_CASE_METHOD(fixture,
                 "after a loss the balancer's book keeps the lost device's "
                 "blocks until its reset, as its ledger does",
                 "[actors][balancer][memory]") {
  auto cfg = test::make_config(dir, 0, {{"sim0", 1}, {"sim1", 1}});
  auto* t = cfg.mutable_tenant(0);
  t->set_on_limit(pb::QUEUE);
  // Room for exactly two items across the fleet.
  t->set_memory_quota_bytes(2 * gemv_bytes);
  cfg.mutable_supervision()->set_restart_delay_ms(100);
  auto rt = runtime::start(sys, cfg);
  REQUIRE(rt);
  auto& r = **rt;
  // Both items go to sim0: sim1 drains until they run.
  REQUIRE_FALSE(r.drain("sim1"));
  slow_to(r, "sim0", 300);
  auto items = gemv_items(2);
  auto e = test::submit_all(sys, r, items, [&] {
    std::this_thread::sleep_for(30ms);
    REQUIRE_FALSE(r.set_online("sim1"));
    std::this_thread::sleep_for(10ms);
    r.sim_device("sim0")->lose();
  });
  test::check_exactly_once(items, e);
  for (auto& [id, err] : e.errors)
    FAIL_CHECK("item " << id << ": " << describe(err));
  auto stats = r.placement_stats();
  REQUIRE(stats);
  CHECK(stats->devices[0].losses == 1);
  // sim1 was never asked for what the tenant's ledger still held on sim0.
  CHECK(stats->devices[1].memory_refusals == 0);
  CHECK(stats->admission.memory_waits > 0);
}

TEST_CASE_METHOD(fixture,
                 "parked items go first, in order, when their device comes "
                 "back",
                 "[actors][balancer]") {
  auto cfg = test::make_config(dir, 0, {{"sim0", 1}, {"sim1", 1}});
  cfg.mutable_tenant(0)->set_tenant("broad");
  auto* narrow = cfg.add_tenant();
  narrow->set_tenant("narrow");
  narrow->add_kernels("*");
  narrow->add_devices("sim0");
  // The loss opens sim0's circuit for 200 ms after its restart, 250 ms
  // later: narrow's items are parked well before it (also under ASan).
  cfg.mutable_supervision()->set_restart_delay_ms(250);
  cfg.mutable_supervision()->mutable_circuit()->set_failures(1);
  cfg.mutable_supervision()->mutable_circuit()->set_open_ms(200);
  auto rt = runtime::start(sys, cfg);
  REQUIRE(rt);
  auto& r = **rt;
  slow_to(r, "sim0", 5);
  slow_to(r, "sim1", 5);
  std::vector<work_item> broad, narrows;
  for (uint64_t id = 1; id <= 300; ++id)
    broad.push_back(test::gemv_item(id, "broad"));
  for (uint64_t id = 1001; id <= 1004; ++id)
    narrows.push_back(test::gemv_item(id, "narrow"));
  test::ends n;
  // The broad tenant keeps both devices busy; sim0 is lost and narrow's
  // items wait for it.
  auto e = test::submit_all(sys, r, broad, [&] {
    std::this_thread::sleep_for(20ms);
    r.sim_device("sim0")->lose();
    std::this_thread::sleep_for(5ms);
    n = test::submit_all(sys, r, narrows, [] {});
  });
  test::check_exactly_once(broad, e);
  test::check_exactly_once(narrows, n);
  CHECK(n.errors.empty());
  REQUIRE(r.flush_audit());
  // On sim0, after its restart: narrow's four first, in their order.
  bool up = false;
  std::vector<std::pair<std::string, uint64_t>> placed;
  for (auto& rec : test::read_audit(r.audit_path())) {
    if (rec.kind() == pb::DEVICE_EVENT && rec.device() == "sim0" &&
        rec.detail().find("back online") != std::string::npos)
      up = true;
    if (up && rec.kind() == pb::PLACED && rec.device() == "sim0")
      placed.emplace_back(rec.tenant(), rec.work_id());
  }
  REQUIRE(placed.size() >= 4);
  for (size_t i = 0; i < 4; ++i) {
    CHECK(placed[i].first == "narrow");
    CHECK(placed[i].second == 1001 + i);
  }
}

TEST_CASE_METHOD(fixture,
                 "work parks while an operator has every granted device "
                 "offline or draining",
                 "[actors][balancer][supervisor]") {
  auto cfg = test::make_config(dir, 0, {{"sim0", 1}});
  cfg.mutable_tenant(0)->set_queue_timeout_ms(300);
  auto rt = runtime::start(sys, cfg);
  REQUIRE(rt);
  auto& r = **rt;
  auto park_then = [&](auto take_away, uint64_t id) {
    REQUIRE_FALSE(take_away());
    auto e = test::submit_all(sys, r, {test::gemv_item(id)}, [&] {
      std::this_thread::sleep_for(60ms);
      REQUIRE_FALSE(r.set_online("sim0"));
    });
    CHECK_FALSE(e.timed_out);
    CHECK(e.results.count(id) == 1);
    for (auto& [i, err] : e.errors)
      FAIL_CHECK(describe(err));
  };
  SECTION("offline, then online") {
    park_then([&] { return r.set_offline("sim0"); }, 1);
  }
  SECTION("draining, then online") {
    park_then([&] { return r.drain("sim0"); }, 2);
  }
  SECTION("offline for longer than the queue timeout") {
    REQUIRE_FALSE(r.set_offline("sim0"));
    auto start = std::chrono::steady_clock::now();
    auto res = r.run(test::gemv_item(3));
    auto took = std::chrono::steady_clock::now() - start;
    REQUIRE_FALSE(res);
    CHECK(code_of(res.error()) == errc::no_device_available);
    CHECK_THAT(describe(res.error()), Catch::Contains("queue timeout"));
    CHECK(took >= 300ms);
  }
}
