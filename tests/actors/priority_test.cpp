// Priority within a tenant (docs/jobs.md): a tenant's waiting items go by
// priority, then in the order they came, wherever they wait (held back,
// parked for a device, in the ready queue); other tenants keep their turns.
#include <catch2/catch.hpp>

#include <algorithm>
#include <mutex>
#include <thread>

#include "messages/cohort.pb.h"
#include "tests/runtime_fixture.hpp"

using namespace cohort;
using namespace cohort::actors;
using namespace std::chrono_literals;

using fixture = test::actor_fixture;

namespace {

// The ids of the items that ended, in the order they ended.
struct end_order {
  std::mutex mx;
  std::vector<uint64_t> ids;
  std::vector<caf::error> errors;

  work_callback callback() {
    return [this](caf::expected<work_result> x) {
      std::lock_guard<std::mutex> guard{mx};
      if (x)
        ids.push_back(x->id);
      else
        errors.push_back(x.error());
    };
  }

  // Waits (up to 20 s) until `n` items ended; the ids that ended well.
  std::vector<uint64_t> wait(size_t n) {
    auto until = std::chrono::steady_clock::now() + 20s;
    for (;;) {
      {
        std::lock_guard<std::mutex> guard{mx};
        if (ids.size() + errors.size() >= n ||
            std::chrono::steady_clock::now() >= until) {
          for (auto& e : errors)
            UNSCOPED_INFO("error: " << to_string(e));
          return ids;
        }
      }
      std::this_thread::sleep_for(2ms);
    }
  }
};

using test::wait_items;

// Takes `device` offline and waits until the balancer knows (set_offline
// answers once the supervisor acted; items submitted before the balancer
// hears of it could still go there).
void take_offline(runtime& rt, const std::string& device) {
  REQUIRE_FALSE(rt.set_offline(device));
  auto until = std::chrono::steady_clock::now() + 10s;
  for (;;) {
    auto st = rt.placement_stats();
    REQUIRE(st);
    bool off = false;
    for (auto& d : st->devices)
      off |= d.name == device && d.status == device_status::offline;
    if (off)
      return;
    REQUIRE(std::chrono::steady_clock::now() < until);
    std::this_thread::sleep_for(1ms);
  }
}

work_item with_priority(uint64_t id, std::string tenant, int32_t priority) {
  auto item = test::gemv_item(id, std::move(tenant));
  item.priority = priority;
  return item;
}

// One simulated GPU running one launch at a time, `latency_us` each.
pb::RuntimeConfig one_stream(const test::temp_dir& dir, uint32_t latency_us) {
  auto cfg = test::make_config(dir, 0, {{"sim0", 1}});
  auto* g = cfg.mutable_devices()->mutable_sim_gpu(0);
  g->set_streams(1);
  g->set_launch_latency_us(latency_us);
  return cfg;
}

} // namespace

TEST_CASE_METHOD(fixture,
                 "a tenant's waiting items run by priority, then in the "
                 "order they came",
                 "[actors][jobs][priority]") {
  auto rt = runtime::start(sys, one_stream(dir, 5'000));
  REQUIRE(rt);
  auto& r = **rt;
  // Its only device is offline: every item waits for it.
  take_offline(r, "sim0");
  end_order ends;
  const std::vector<std::pair<uint64_t, int32_t>> items{
      {1, 0}, {2, 0}, {3, 5}, {4, -1}, {5, 5}, {6, 9}, {7, INT32_MIN}};
  for (auto [id, p] : items)
    r.submit(with_priority(id, "t", p), ends.callback());
  auto views = wait_items(r, [&](auto& xs) {
    return xs.size() == items.size() &&
           std::all_of(xs.begin(), xs.end(),
                       [](auto& v) { return v.state == "queued"; });
  });
  REQUIRE(views.size() == items.size());
  // Listings show each one's priority.
  for (auto& v : views) {
    auto i = std::find_if(items.begin(), items.end(),
                          [&](auto& x) { return x.first == v.id; });
    REQUIRE(i != items.end());
    CHECK(v.priority == i->second);
  }
  REQUIRE_FALSE(r.set_online("sim0"));
  auto got = ends.wait(items.size());
  CHECK(got == std::vector<uint64_t>{6, 3, 5, 1, 2, 4, 7});
  // An ended item keeps its priority in its view.
  auto ended = r.item(views.front().job);
  REQUIRE(ended);
  CHECK(ended->state == "done");
  CHECK(ended->priority == views.front().priority);
}

TEST_CASE_METHOD(fixture,
                 "held items are admitted by priority, and priorities do not "
                 "reorder another tenant's items",
                 "[actors][jobs][priority]") {
  auto cfg = one_stream(dir, 5'000);
  // Tenant t: one item in flight, the others held in order of admission.
  auto* t = cfg.mutable_tenant(0);
  t->set_max_inflight(1);
  t->set_on_limit(pb::QUEUE);
  t->set_queue_timeout_ms(60000);
  auto rt = runtime::start(sys, cfg);
  REQUIRE(rt);
  auto& r = **rt;
  take_offline(r, "sim0");
  end_order ends;
  r.submit(with_priority(1, "t", 0), ends.callback());
  r.submit(with_priority(2, "t", 1), ends.callback());
  r.submit(with_priority(3, "t", 0), ends.callback());
  r.submit(with_priority(4, "t", 3), ends.callback());
  r.submit(with_priority(5, "t", 1), ends.callback());
  auto views = wait_items(r, [](auto& xs) {
    return xs.size() == 5 && std::count_if(xs.begin(), xs.end(), [](auto& v) {
                               return v.state == "held";
                             }) == 4;
  });
  REQUIRE(views.size() == 5);
  // Held ones are listed first, in the order they are to be admitted.
  std::vector<uint64_t> held;
  for (auto& v : views)
    if (v.state == "held")
      held.push_back(v.id);
  CHECK(held == std::vector<uint64_t>{4, 2, 5, 3});
  REQUIRE_FALSE(r.set_online("sim0"));
  CHECK(ends.wait(5) == std::vector<uint64_t>{1, 4, 2, 5, 3});
}

TEST_CASE_METHOD(fixture,
                 "a tenant's priorities leave another tenant's turns alone",
                 "[actors][jobs][priority]") {
  auto cfg = one_stream(dir, 5'000);
  auto* u = cfg.add_tenant();
  u->set_tenant("u");
  u->add_kernels("*");
  u->add_devices("*");
  auto rt = runtime::start(sys, cfg);
  REQUIRE(rt);
  auto& r = **rt;
  take_offline(r, "sim0");
  end_order ends;
  // t's and u's items alternate; t's later ones have higher priorities.
  for (uint64_t i = 0; i < 4; ++i) {
    r.submit(with_priority(10 + i, "t", int32_t(i)), ends.callback());
    r.submit(with_priority(20 + i, "u", 0), ends.callback());
  }
  wait_items(r, [](auto& xs) { return xs.size() == 8; });
  REQUIRE_FALSE(r.set_online("sim0"));
  auto got = ends.wait(8);
  REQUIRE(got.size() == 8);
  // u's come in their order, and t's by priority.
  std::vector<uint64_t> t_ids, u_ids;
  for (auto id : got)
    (id < 20 ? t_ids : u_ids).push_back(id);
  CHECK(t_ids == std::vector<uint64_t>{13, 12, 11, 10});
  CHECK(u_ids == std::vector<uint64_t>{20, 21, 22, 23});
  // The tenants still take turns (equal weights): neither runs more than
  // two items in a row.
  size_t run = 1, longest = 1;
  for (size_t k = 1; k < got.size(); ++k) {
    run = (got[k] < 20) == (got[k - 1] < 20) ? run + 1 : 1;
    longest = std::max(longest, run);
  }
  CHECK(longest <= 2);
}
