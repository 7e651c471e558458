// runtime::submit: futures and callbacks without a thread per item, ids the
// caller may reuse, cancel, and every end delivered exactly once - also at
// and after stop.
#include <catch2/catch.hpp>

#include <atomic>
#include <mutex>
#include <set>
#include <thread>

#include "tests/runtime_fixture.hpp"

using namespace cohort;
using namespace cohort::actors;
using namespace std::chrono_literals;

namespace {

using fixture = test::actor_fixture;

} // namespace

TEST_CASE_METHOD(fixture,
                 "futures get each item's end, with the caller's ids, also "
                 "when ids repeat",
                 "[actors][client]") {
  auto rt = runtime::start(sys, test::make_config(dir, 2, {{"sim0", 1}}));
  REQUIRE(rt);
  auto& r = **rt;
  std::vector<work_item> items;
  std::vector<work_future> futures;
  // Every id twice: the runtime tells them apart by their futures.
  for (uint64_t i = 0; i < 200; ++i) {
    items.push_back(test::gemv_item(1 + i / 2));
    futures.push_back(r.submit(items.back()));
    CHECK(futures.back().valid());
    CHECK(futures.back().id() == 1 + i / 2);
  }
  for (size_t i = 0; i < futures.size(); ++i) {
    auto res = futures[i].get();
    REQUIRE(res);
    CHECK(res->id == items[i].id);
    CHECK(res->tag == 0);
    CHECK(check_result(items[i], res->output).empty());
    CHECK_FALSE(futures[i].valid());
    // Taken once: a second get is an error, not a wait.
    CHECK(code_of(futures[i].get().error()) == errc::invalid_arguments);
  }
  // The audit log names the caller's ids.
  REQUIRE(r.flush_audit());
  std::map<uint64_t, int> completed;
  for (auto& rec : test::read_audit(r.audit_path()))
    if (rec.kind() == pb::COMPLETED)
      ++completed[rec.work_id()];
  CHECK(completed.size() == 100);
  for (auto& [id, n] : completed)
    CHECK(n == 2);
}

TEST_CASE_METHOD(fixture, "a future reports refusals and waits with a timeout",
                 "[actors][client]") {
  auto rt = runtime::start(sys, test::make_config(dir, 0, {{"sim0", 1}}));
  REQUIRE(rt);
  auto& r = **rt;
  auto bad = test::gemv_item(7, "nobody");
  auto f = r.submit(bad);
  auto res = f.get();
  REQUIRE_FALSE(res);
  CHECK(code_of(res.error()) == errc::unknown_tenant);
  // A 64 x 64 gemv is about 12 us at speed 1: 200 ms.
  r.sim_device("sim0")->slow_down(200.0 * 1000.0 / 12.0);
  auto slow = r.submit(test::gemv_item(8));
  CHECK_FALSE(slow.wait_for(20ms));
  CHECK_FALSE(slow.ready());
  CHECK(slow.wait_for(10s));
  CHECK(slow.ready());
  REQUIRE(slow.get());
  work_future empty;
  CHECK_FALSE(empty.valid());
  CHECK_FALSE(empty.wait_for(1ms));
  CHECK(code_of(empty.get().error()) == errc::invalid_arguments);
}

TEST_CASE_METHOD(fixture,
                 "cancel ends a waiting item with cancelled, exactly once",
                 "[actors][client]") {
  auto cfg = test::make_config(dir, 0, {{"sim0", 1}});
  cfg.mutable_tenant(0)->set_max_inflight(1);
  cfg.mutable_tenant(0)->set_on_limit(pb::QUEUE);
  auto rt = runtime::start(sys, cfg);
  REQUIRE(rt);
  auto& r = **rt;
  r.sim_device("sim0")->slow_down(100.0 * 1000.0 / 12.0);
  auto running = r.submit(test::gemv_item(1));
  auto held = r.submit(test::gemv_item(2));
  r.cancel(held);
  auto end = held.get();
  REQUIRE_FALSE(end);
  CHECK(code_of(end.error()) == errc::cancelled);
  REQUIRE(running.get());
  // Cancelling what already ended does nothing.
  auto done = r.submit(test::gemv_item(3));
  REQUIRE(done.wait_for(10s));
  r.cancel(done);
  REQUIRE(done.get());
  auto s = r.placement_stats();
  REQUIRE(s);
  CHECK(s->admission.rejected == 1);
  CHECK(s->completed == 2);
}

TEST_CASE_METHOD(fixture,
                 "callbacks run once per item on the runtime's callback "
                 "thread, and may submit and wait",
                 "[actors][client]") {
  auto rt = runtime::start(sys, test::make_config(dir, 2, {{"sim0", 1}}));
  REQUIRE(rt);
  auto& r = **rt;
  std::mutex mtx;
  std::map<uint64_t, int> ends;
  std::set<std::thread::id> threads;
  std::atomic<int> chained{0};
  std::atomic<int> waited{0};
  // Catch2 asserts on one thread only: callbacks count, the test checks.
  std::atomic<int> failed{0};
  auto caller = std::this_thread::get_id();
  for (uint64_t i = 1; i <= 100; ++i)
    r.submit(test::gemv_item(i), [&, i](caf::expected<work_result> res) {
      {
        std::lock_guard<std::mutex> guard{mtx};
        ++ends[i];
        threads.insert(std::this_thread::get_id());
      }
      if (!res)
        ++failed;
      if (i == 1) {
        // A callback may block on the runtime: it does not hold up the
        // balancer, which ends the item it waits for.
        if (r.run(test::gemv_item(1000)))
          ++waited;
        // ... and submit more work, whose callback runs later.
        r.submit(test::gemv_item(1001), [&](caf::expected<work_result> more) {
          if (more)
            ++chained;
        });
      }
      if (i == 2)
        throw std::runtime_error("a callback's exception is dropped");
    });
  for (int i = 0; i < 500 && chained == 0; ++i)
    std::this_thread::sleep_for(10ms);
  r.stop();
  CHECK(failed == 0);
  CHECK(waited == 1);
  CHECK(chained == 1);
  REQUIRE(ends.size() == 100);
  for (auto& [id, n] : ends)
    CHECK(n == 1);
  CHECK(threads.size() == 1);
  CHECK(threads.count(caller) == 0);
}

TEST_CASE_METHOD(fixture,
                 "stop ends every future and runs every callback first; "
                 "after it, ends come at once",
                 "[actors][client]") {
  auto cfg = test::make_config(dir, 0, {{"sim0", 1}});
  cfg.set_shutdown_drain_ms(50);
  auto rt = runtime::start(sys, cfg);
  REQUIRE(rt);
  auto& r = **rt;
  r.sim_device("sim0")->slow_down(50.0 * 1000.0 / 12.0);
  std::vector<work_future> futures;
  std::atomic<int> called{0};
  for (uint64_t i = 1; i <= 40; ++i) {
    futures.push_back(r.submit(test::gemv_item(i)));
    r.submit(test::gemv_item(100 + i),
             [&](caf::expected<work_result>) { ++called; });
  }
  r.stop();
  CHECK(called == 40);
  int stopped = 0;
  for (auto& f : futures) {
    CHECK(f.ready());
    auto end = f.get();
    if (!end && code_of(end.error()) == errc::shutting_down)
      ++stopped;
  }
  CHECK(stopped > 0);
  auto late = r.submit(test::gemv_item(500));
  CHECK(late.ready());
  CHECK(code_of(late.get().error()) == errc::shutting_down);
  bool inline_call = false;
  r.submit(test::gemv_item(501), [&](caf::expected<work_result> end) {
    inline_call = !end && code_of(end.error()) == errc::shutting_down;
  });
  CHECK(inline_call);
}

TEST_CASE_METHOD(fixture,
                 "a batched submit: one message, a future per item in order, "
                 "or a callback with each item's id",
                 "[actors][client][batch]") {
  auto rt = runtime::start(sys, test::make_config(dir, 2, {{"sim0", 1}}));
  REQUIRE(rt);
  auto& r = **rt;
  std::vector<work_item> items;
  for (uint64_t i = 0; i < 300; ++i)
    items.push_back(test::gemv_item(1 + i % 150)); // ids repeat: fine
  items[10].tenant = "nobody";
  auto futures = r.submit(items);
  REQUIRE(futures.size() == items.size());
  for (size_t i = 0; i < futures.size(); ++i) {
    CHECK(futures[i].id() == items[i].id);
    auto end = futures[i].get();
    if (i == 10) {
      REQUIRE_FALSE(end);
      CHECK(code_of(end.error()) == errc::unknown_tenant);
      continue;
    }
    REQUIRE(end);
    CHECK(end->id == items[i].id);
    CHECK(check_result(items[i], end->output).empty());
  }
  std::mutex mtx;
  std::map<uint64_t, int> ends;
  std::map<uint64_t, errc> errors;
  std::vector<work_item> more;
  for (uint64_t id = 1000; id < 1200; ++id)
    more.push_back(test::gemv_item(id));
  more[5].inputs.clear();
  r.submit(more, [&](uint64_t id, caf::expected<work_result> end) {
    std::lock_guard<std::mutex> guard{mtx};
    ++ends[id];
    if (!end)
      errors[id] = code_of(end.error());
    else if (end->id != id)
      errors[id] = errc::duplicate_id; // a wrong id: fails below
  });
  for (int i = 0; i < 1000; ++i) {
    {
      std::lock_guard<std::mutex> guard{mtx};
      if (ends.size() == more.size())
        break;
    }
    std::this_thread::sleep_for(10ms);
  }
  r.stop();
  REQUIRE(ends.size() == more.size());
  for (auto& [id, n] : ends)
    CHECK(n == 1);
  REQUIRE(errors.size() == 1);
  CHECK(errors[1005] == errc::invalid_arguments);
  // After stop: every future filled, every callback called at once.
  auto late = r.submit(std::vector<work_item>{test::gemv_item(1),
                                              test::gemv_item(2)});
  REQUIRE(late.size() == 2);
  for (auto& f : late) {
    REQUIRE(f.ready());
    CHECK(code_of(f.get().error()) == errc::shutting_down);
  }
  int called = 0;
  r.submit(std::vector<work_item>{test::gemv_item(3)},
           [&](uint64_t id, caf::expected<work_result> end) {
             called += id == 3 && !end &&
                       code_of(end.error()) == errc::shutting_down;
           });
  CHECK(called == 1);
}

TEST_CASE("the scheduler settings of a config reach CAF", "[actors][client]") {
  pb::RuntimeConfig cfg;
  auto* s = cfg.mutable_scheduler();
  s->set_threads(3);
  s->set_moderate_sleep_us(7);
  s->set_relaxed_sleep_us(2000);
  system_config sys_cfg{cfg};
  caf::actor_system sys{sys_cfg};
  CHECK(sys.scheduler().num_workers() == 3);
  auto sleep = caf::get_or(
      sys.config(), "work-stealing.moderate-sleep-duration", caf::timespan{0});
  CHECK(sleep == caf::timespan{std::chrono::microseconds{7}});
  auto relaxed = caf::get_or(
      sys.config(), "work-stealing.relaxed-sleep-duration", caf::timespan{0});
  CHECK(relaxed == caf::timespan{std::chrono::microseconds{2000}});
  // Cohort's defaults: no pause in the moderate phase.
  system_config plain;
  caf::actor_system sys2{plain};
  CHECK(caf::get_or(sys2.config(), "work-stealing.moderate-sleep-duration",
                    caf::timespan{std::chrono::microseconds{50}}) ==
        caf::timespan{0});
  CHECK(sys2.scheduler().num_workers() >= 2);
}
