// Job control (docs/jobs.md): the live items with their states, one item by
// job number (live or ended), and cancels by job, tenant and client, each
// audited, every item still ending once.
#include <catch2/catch.hpp>

#include <algorithm>
#include <thread>

#include "messages/cohort.pb.h"
#include "tests/runtime_fixture.hpp"

using namespace cohort;
using namespace cohort::actors;
using namespace std::chrono_literals;

using fixture = test::actor_fixture;

namespace {

using test::wait_items;

size_t count_state(const std::vector<item_view>& items, const char* state) {
  return size_t(std::count_if(items.begin(), items.end(),
                              [&](auto& v) { return v.state == state; }));
}

} // namespace

TEST_CASE_METHOD(fixture,
                 "live items show their state, and cancels by job, tenant "
                 "and client end each once, audited",
                 "[actors][jobs]") {
  // Tenant t may use sim1 only, which an operator takes offline: its
  // admitted items wait (queued) and, past 2 in flight, the others are
  // held, for as long as the test looks. Tenant u's launches take a
  // second on sim0.
  auto cfg = test::make_config(dir, 0, {{"sim0", 1}, {"sim1", 1}});
  cfg.mutable_devices()->mutable_sim_gpu(0)->set_launch_latency_us(1'000'000);
  auto* t = cfg.mutable_tenant(0);
  t->clear_devices();
  t->add_devices("sim1");
  t->set_max_inflight(2);
  t->set_on_limit(pb::QUEUE);
  t->set_queue_timeout_ms(120000);
  auto* u = cfg.add_tenant();
  u->set_tenant("u");
  u->add_kernels("*");
  u->add_devices("sim0");
  auto rt = runtime::start(sys, cfg);
  REQUIRE(rt);
  auto& r = **rt;
  REQUIRE_FALSE(r.set_offline("sim1"));
  std::vector<work_future> t_items;
  for (uint64_t id = 1; id <= 4; ++id)
    t_items.push_back(r.submit(test::gemv_item(id, "t")));
  auto u_item = r.submit(test::gemv_item(7, "u"));
  auto items = wait_items(r, [](auto& xs) {
    return xs.size() == 5 && count_state(xs, "held") == 2 &&
           count_state(xs, "queued") == 2 && count_state(xs, "running") == 1;
  });
  INFO(items.size());
  REQUIRE(items.size() == 5);
  // Held ones first, then by job number; all this runtime's own.
  CHECK(items[0].state == "held");
  CHECK(items[1].state == "held");
  CHECK(items[0].job < items[1].job);
  CHECK_THAT(items[0].detail, Catch::Contains("in flight"));
  for (auto& v : items) {
    CHECK(v.client == r.client());
    CHECK(v.kernel == "gemv");
    CHECK(v.age_ns > 0);
    CHECK(v.job > 0);
    if (v.state == "running") {
      CHECK(v.device == "sim0");
      CHECK(v.tenant == "u");
    }
    if (v.state == "queued")
      CHECK(v.detail == "no device of its grant takes work now");
  }
  CHECK(std::is_sorted(items.begin() + 2, items.end(),
                       [](auto& a, auto& b) { return a.job < b.job; }));
  // One tenant's only.
  item_filter only_u;
  only_u.tenant = "u";
  auto us = r.items(only_u);
  REQUIRE(us);
  REQUIRE(us->size() == 1);
  CHECK(us->front().id == 7);
  // One by job number.
  auto held_job = items[0].job;
  auto one = r.item(held_job);
  REQUIRE(one);
  CHECK(one->state == "held");
  CHECK(one->tenant == "t");
  // Cancel a held item by job: it ends with cancelled, never ran.
  item_filter by_job;
  by_job.job = held_job;
  auto n = r.cancel_items(by_job, "the test");
  REQUIRE(n);
  CHECK(*n == 1);
  auto held_id = items[0].id;
  auto& held_future = t_items[held_id - 1];
  auto held_end = held_future.get();
  REQUIRE_FALSE(held_end);
  CHECK(code_of(held_end.error()) == errc::cancelled);
  CHECK_THAT(describe(held_end.error()), Catch::Contains("the test"));
  // Again: nothing more to cancel.
  n = r.cancel_items(by_job, "the test");
  REQUIRE(n);
  CHECK(*n == 0);
  // Everything of tenant t: the other held one, and those admitted (a
  // running one ends when its launch does).
  item_filter by_tenant;
  by_tenant.tenant = "t";
  n = r.cancel_items(by_tenant, "the test");
  REQUIRE(n);
  CHECK(*n == 3);
  for (size_t i = 0; i < t_items.size(); ++i) {
    if (i == held_id - 1)
      continue; // ended above
    auto end = t_items[i].get();
    REQUIRE_FALSE(end);
    CHECK(code_of(end.error()) == errc::cancelled);
  }
  // Ended items are described with how they ended.
  auto ended = r.item(held_job);
  REQUIRE(ended);
  CHECK(ended->state == "cancelled");
  CHECK_THAT(ended->detail, Catch::Contains("cancelled by the test"));
  // Tenant u's item is untouched (it may have ended by now: its launch
  // takes a second).
  auto left = r.items();
  REQUIRE(left);
  CHECK(left->size() <= 1);
  for (auto& v : *left)
    CHECK(v.tenant == "u");
  // By client: a new item of t (it waits for sim1) and, if it still runs,
  // u's.
  auto late = r.submit(test::gemv_item(8, "t"));
  wait_items(r, [](auto& xs) {
    return std::any_of(xs.begin(), xs.end(), [](auto& v) { return v.id == 8; });
  });
  item_filter by_client;
  by_client.client = r.client();
  n = r.cancel_items(by_client, "the test");
  REQUIRE(n);
  CHECK(*n >= 1);
  CHECK(*n <= 2);
  CHECK(code_of(late.get().error()) == errc::cancelled);
  auto u_end = u_item.get();
  if (*n == 2)
    CHECK(code_of(u_end.error()) == errc::cancelled);
  else
    CHECK(u_end);
  CHECK(r.items()->empty());
  // Unknown jobs, and a cancel that names nothing.
  auto unknown = r.item(999'999);
  REQUIRE_FALSE(unknown);
  CHECK(code_of(unknown.error()) == errc::unknown_item);
  auto none = r.cancel_items({}, "the test");
  REQUIRE_FALSE(none);
  CHECK(code_of(none.error()) == errc::invalid_arguments);
  // Each cancel is one CANCEL record saying who and what the item did.
  REQUIRE(r.flush_audit());
  auto records = test::read_audit(dir.file("audit.log"));
  size_t cancels = 0;
  bool held_said = false;
  for (auto& rec : records)
    if (rec.kind() == pb::CANCEL) {
      ++cancels;
      CHECK_THAT(rec.detail(), Catch::Contains("cancelled by the test while"));
      held_said = held_said || rec.detail().find("while held (job " +
                                                 std::to_string(held_job) +
                                                 ")") != std::string::npos;
    }
  CHECK(cancels == 4 + *n);
  CHECK(held_said);
}

TEST_CASE_METHOD(fixture,
                 "a finished item is described as done, with its "
                 "device",
                 "[actors][jobs]") {
  auto cfg = test::make_config(dir, 0, {{"sim0", 1}});
  auto rt = runtime::start(sys, cfg);
  REQUIRE(rt);
  auto f = (*rt)->submit(test::gemv_item(1));
  REQUIRE(f.get());
  // The job numbers start at 1 in a new runtime.
  auto v = (*rt)->item(1);
  REQUIRE(v);
  CHECK(v->state == "done");
  CHECK(v->device == "sim0");
  CHECK(v->id == 1);
  CHECK(v->attempts >= 1);
  CHECK(v->detail.empty());
  CHECK((*rt)->items()->empty());
}

namespace {

work_item axpy_item(uint64_t id, size_t n) {
  work_item item;
  item.id = id;
  item.tenant = "t";
  item.kernel = kernel_id::axpy;
  item.args.alpha = 2.0f;
  item.inputs.emplace_back(kernels::random_floats(id, n));
  item.inputs.emplace_back(kernels::random_floats(id + 5000, n));
  return item;
}

const item_view* find_id(const std::vector<item_view>& items, uint64_t id) {
  for (auto& v : items)
    if (v.id == id)
      return &v;
  return nullptr;
}

} // namespace

TEST_CASE_METHOD(fixture,
                 "a member of a merged launch not sent yet ends at once when "
                 "cancelled; the others run",
                 "[actors][jobs]") {
  // Two GPUs of one stream and launches of 1 s: four blockers each keep
  // them busy for 4 s and fill what the balancer sends them, so what
  // comes next waits here (long enough on a loaded machine).
  auto cfg = test::make_config(dir, 0, {{"sim0", 1}, {"sim1", 1}});
  for (auto& g : *cfg.mutable_devices()->mutable_sim_gpu()) {
    g.set_streams(1);
    g.set_launch_latency_us(1'000'000);
  }
  auto* rule = cfg.mutable_placement()->add_batch();
  rule->set_kernel("axpy");
  rule->set_preferred_batch(3);
  rule->set_max_item_elements(1000);
  auto rt = runtime::start(sys, cfg);
  REQUIRE(rt);
  auto& r = **rt;
  std::vector<work_item> items;
  // Blockers, too large to merge.
  for (uint64_t id = 1; id <= 8; ++id)
    items.push_back(axpy_item(id, 5000));
  // Three small ones: one merged launch.
  for (uint64_t id = 11; id <= 13; ++id)
    items.push_back(axpy_item(id, 100));
  // Merged (no longer waiting to be), not sent.
  auto merged = [&](auto& xs) {
    auto* m = find_id(xs, 12);
    return m != nullptr && (m->state == "placed" || m->state == "queued") &&
           m->detail.find("merged") == std::string::npos;
  };
  bool ended_at_once = false, blocker_ran = false;
  auto e = test::submit_all(sys, r, items, [&] {
    auto live = wait_items(r, merged);
    REQUIRE(merged(live));
    auto n = r.cancel_items({find_id(live, 12)->job, "", 0}, "the test");
    REQUIRE(n);
    CHECK(*n == 1);
    // It ended already, while the blockers still run.
    auto now = r.items();
    REQUIRE(now);
    ended_at_once = find_id(*now, 12) == nullptr;
    for (uint64_t id = 1; id <= 8; ++id)
      blocker_ran = blocker_ran || find_id(*now, id) != nullptr;
  });
  CHECK(ended_at_once);
  CHECK(blocker_ran);
  test::check_exactly_once(items, e);
  REQUIRE(e.errors.count(12) == 1);
  CHECK(code_of(e.errors.at(12)) == errc::cancelled);
  // The merged launch's other members ran, apart or merged again.
  CHECK(e.results.count(11) == 1);
  CHECK(e.results.count(13) == 1);
  CHECK(e.results.size() == items.size() - 1);
}
