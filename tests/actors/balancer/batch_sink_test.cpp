// The batched edges of the balancer: many items in one submit, and a
// batch_sink that hears their ends coalesced, each exactly once - also for
// refusals, cancels, batches over the limit, and at stop.
#include <catch2/catch.hpp>

#include <map>

#include "tests/runtime_fixture.hpp"

using namespace cohort;
using namespace cohort::actors;
using namespace std::chrono_literals;

namespace {

using fixture = test::actor_fixture;

// What a batch sink heard: every end by key, and how many messages.
struct heard {
  std::map<uint64_t, int> count;
  std::map<uint64_t, work_end> ends;
  std::vector<std::vector<uint64_t>> messages;
  bool timed_out = false;
};

// Receives ends at `self` until `n` arrived, then any extra for a while.
heard receive_ends(caf::scoped_actor& self, size_t n) {
  heard out;
  size_t received = 0;
  auto on_ends = [&](result_atom, std::vector<work_end>& ends) {
    out.messages.emplace_back();
    for (auto& e : ends) {
      out.messages.back().push_back(e.key);
      ++out.count[e.key];
      out.ends[e.key] = std::move(e);
      ++received;
    }
  };
  while (received < n && !out.timed_out)
    self->receive(
        on_ends, caf::after(60s) >> [&] { out.timed_out = true; });
  bool quiet = false;
  while (!quiet)
    self->receive(
        on_ends, caf::after(50ms) >> [&] { quiet = true; });
  return out;
}

} // namespace

TEST_CASE_METHOD(fixture,
                 "a batched submit to a batch sink: every item ends once, "
                 "ends coalesced",
                 "[actors][balancer][batch]") {
  auto rt =
      actors::runtime::start(sys, test::make_config(dir, 2, {{"sim0", 1}}));
  REQUIRE(rt);
  caf::scoped_actor self{sys};
  auto sink = caf::actor_cast<batch_sink>(self);
  std::vector<work_item> items;
  // Two refused at once (unknown tenant, empty inputs), then good ones.
  items.push_back(test::gemv_item(1, "nobody"));
  items.push_back(test::gemv_item(2));
  items.back().inputs.clear();
  for (uint64_t id = 3; id <= 402; ++id)
    items.push_back(test::gemv_item(id));
  auto sent = items;
  self->send((*rt)->entry(), submit_atom::value, std::move(sent), sink);
  auto h = receive_ends(self, items.size());
  REQUIRE_FALSE(h.timed_out);
  REQUIRE(h.count.size() == items.size());
  for (auto& [key, n] : h.count) {
    INFO("item " << key);
    CHECK(n == 1);
  }
  CHECK(code_of(h.ends[1].error) == errc::unknown_tenant);
  CHECK(code_of(h.ends[2].error) == errc::invalid_arguments);
  for (auto& item : items) {
    if (item.id <= 2)
      continue;
    auto& e = h.ends[item.id];
    INFO("item " << item.id);
    REQUIRE_FALSE(e.error);
    CHECK(e.result.id == item.id);
    CHECK(check_result(item, e.result.output).empty());
  }
  // The two refusals ended in the same handler: one message, in order.
  REQUIRE(h.messages[0].size() >= 2);
  CHECK(h.messages[0][0] == 1);
  CHECK(h.messages[0][1] == 2);
  CHECK(h.messages.size() < items.size());
  for (auto& m : h.messages)
    CHECK(m.size() <= max_end_batch);
  auto stats = (*rt)->placement_stats();
  REQUIRE(stats);
  CHECK(stats->completed == 400);
  CHECK(stats->admission.rejected == 2);
}

TEST_CASE_METHOD(fixture,
                 "a batched submit with a client sink ends each item by "
                 "itself; duplicate ids in one batch are refused",
                 "[actors][balancer][batch]") {
  auto rt = actors::runtime::start(sys, test::make_config(dir, 2, {}));
  REQUIRE(rt);
  caf::scoped_actor self{sys};
  std::vector<work_item> items;
  for (uint64_t id = 1; id <= 50; ++id)
    items.push_back(test::gemv_item(id));
  // While the first 7 may still be in flight, a second 7 is refused.
  auto twin = test::gemv_item(7);
  auto batch = items;
  batch.push_back(twin);
  self->send((*rt)->entry(), submit_atom::value, std::move(batch),
             caf::actor_cast<client_sink>(self));
  test::ends out;
  size_t received = 0;
  while (received < 51 && !out.timed_out)
    self->receive(
        [&](result_atom, work_result& res) {
          ++out.count[res.id];
          out.results[res.id] = std::move(res);
          ++received;
        },
        [&](failed_atom, uint64_t id, caf::error& err) {
          ++out.count[id];
          out.errors[id] = std::move(err);
          ++received;
        },
        caf::after(60s) >> [&] { out.timed_out = true; });
  REQUIRE_FALSE(out.timed_out);
  CHECK(out.count.size() == 50);
  CHECK(out.results.size() == 50);
  // Item 7 was still open when its twin came, in the same message: the
  // twin is refused, and both ends are told.
  CHECK(out.count[7] == 2);
  CHECK(code_of(out.errors[7]) == errc::duplicate_id);
  test::check_results(items, out);
}

TEST_CASE_METHOD(fixture,
                 "a batch over the limit ends every item with "
                 "invalid_arguments",
                 "[actors][balancer][batch]") {
  auto rt = actors::runtime::start(sys, test::make_config(dir, 1, {}));
  REQUIRE(rt);
  caf::scoped_actor self{sys};
  // Items without inputs: the batch is refused before any is looked at.
  std::vector<work_item> items(max_submit_batch + 1);
  for (size_t i = 0; i < items.size(); ++i) {
    items[i].id = i + 1;
    items[i].tenant = "t";
  }
  self->send((*rt)->entry(), submit_atom::value, std::move(items),
             caf::actor_cast<batch_sink>(self));
  auto h = receive_ends(self, max_submit_batch + 1);
  REQUIRE_FALSE(h.timed_out);
  REQUIRE(h.count.size() == max_submit_batch + 1);
  size_t refused = 0;
  for (auto& [key, e] : h.ends)
    if (code_of(e.error) == errc::invalid_arguments &&
        to_string(e.error).find("at most 65536") != std::string::npos)
      ++refused;
  CHECK(refused == max_submit_batch + 1);
  for (auto& m : h.messages)
    CHECK(m.size() <= max_end_batch);
  CHECK(h.messages.size() >= (max_submit_batch + 1) / max_end_batch);
}

TEST_CASE_METHOD(fixture,
                 "a batch sink hears cancels and the ends at stop once",
                 "[actors][balancer][batch]") {
  auto cfg = test::make_config(dir, 0, {{"sim0", 1}});
  cfg.set_shutdown_drain_ms(20);
  auto rt = actors::runtime::start(sys, cfg);
  REQUIRE(rt);
  auto& r = **rt;
  // A 64 x 64 gemv is about 12 us at speed 1: 50 ms each.
  r.sim_device("sim0")->slow_down(50.0 * 1000.0 / 12.0);
  caf::scoped_actor self{sys};
  auto sink = caf::actor_cast<batch_sink>(self);
  std::vector<work_item> items;
  for (uint64_t id = 1; id <= 30; ++id)
    items.push_back(test::gemv_item(id));
  auto sent = items;
  self->send(r.entry(), submit_atom::value, std::move(sent), sink);
  // The last one still waits behind the others: it never runs.
  self->send(r.entry(), cancel_atom::value, uint64_t{30}, sink);
  std::this_thread::sleep_for(20ms);
  r.stop();
  auto h = receive_ends(self, items.size());
  REQUIRE_FALSE(h.timed_out);
  REQUIRE(h.count.size() == items.size());
  size_t stopped = 0;
  for (auto& [key, n] : h.count) {
    INFO("item " << key);
    CHECK(n == 1);
    if (code_of(h.ends[key].error) == errc::shutting_down)
      ++stopped;
  }
  CHECK(code_of(h.ends[30].error) == errc::cancelled);
  CHECK(stopped > 0);
  // After stop the closed door refuses, still through the batch sink.
  self->send(r.entry(), submit_atom::value, test::gemv_item(99), sink);
  auto late = receive_ends(self, 1);
  REQUIRE(late.ends.count(99) == 1);
  CHECK(code_of(late.ends[99].error) == errc::shutting_down);
}
