// The ready queues alone: weighted fair queuing on virtual time, no actors.
#include <catch2/catch.hpp>

#include <cstdint>
#include <deque>
#include <map>

#include "actors/balancer/ready_queues.hpp"

using namespace cohort::actors::balancer;

namespace {

// Serves `n` items of cost 1 the way the balancer does: the first queue in
// order gives its oldest ticket. Returns items served per queue.
std::map<size_t, int> serve(ready_queues& rq, const std::vector<double>& w,
                            int n) {
  std::map<size_t, int> out;
  std::vector<size_t> order;
  for (int i = 0; i < n; ++i) {
    rq.order(order);
    if (order.empty())
      break;
    auto q = order.front();
    rq.queue(q).pop_front();
    rq.left(1.0);
    rq.served(q, 1.0, w[q]);
    ++out[q];
  }
  return out;
}

} // namespace

TEST_CASE("ready queues share by weight", "[actors][balancer][ready]") {
  ready_queues rq{2};
  REQUIRE(rq.size() == 3);
  CHECK(rq.merged_queue() == 2);
  for (uint64_t t = 0; t < 300; ++t) {
    rq.push(0, t, 1.0, false);
    rq.push(1, 1000 + t, 1.0, false);
  }
  CHECK(rq.count() == 600);
  CHECK(rq.units() == Approx(600.0));
  // Tenant 0 weighs twice tenant 1: of 150 served, 100 and 50.
  auto got = serve(rq, {2.0, 1.0, 1.0}, 150);
  CHECK(got[0] == 100);
  CHECK(got[1] == 50);
  CHECK(rq.count() == 450);
  CHECK(rq.max_count() == 600);
  // Each queue keeps its order.
  CHECK(rq.queue(0).front().ticket == 100);
  CHECK(rq.queue(1).front().ticket == 1050);
}

TEST_CASE("an idle queue earns no credit, and a returning item goes first",
          "[actors][balancer][ready]") {
  ready_queues rq{2};
  for (uint64_t t = 0; t < 100; ++t)
    rq.push(0, t, 1.0, false);
  serve(rq, {1.0, 1.0, 1.0}, 50);
  // Tenant 1 was idle all along: it starts at the virtual clock, not at 0,
  // so it does not get 50 turns in a row.
  rq.push(1, 500, 1.0, false);
  rq.push(1, 501, 1.0, false);
  rq.push(1, 502, 1.0, false);
  CHECK(rq.vtime(1) >= rq.vtime(0) - 1.0);
  auto got = serve(rq, {1.0, 1.0, 1.0}, 4);
  CHECK(got[0] == 2);
  CHECK(got[1] == 2);
  // Back from a failed placement: at the front of its queue.
  rq.push(0, 7, 1.0, true);
  CHECK(rq.queue(0).front().ticket == 7);
  std::vector<size_t> order;
  ready_queues empty{1};
  empty.order(order);
  CHECK(order.empty());
  // Leaving never drives the counts below zero.
  empty.left(5.0);
  CHECK(empty.count() == 0);
  CHECK(empty.units() == 0.0);
}

TEST_CASE("a queue goes by priority, then by arrival",
          "[actors][balancer][ready]") {
  ready_queues rq{1};
  rq.push(0, 1, 1.0, false);
  rq.push(0, 2, 1.0, false, 5);
  rq.push(0, 3, 1.0, false);
  rq.push(0, 4, 1.0, false, 5);
  rq.push(0, 5, 1.0, false, -3);
  rq.push(0, 6, 1.0, false, 9);
  // Back from a failed placement: first of its priority, behind higher.
  rq.push(0, 7, 1.0, true, 5);
  rq.push(0, 8, 1.0, true);
  std::vector<uint64_t> got;
  std::vector<int32_t> priorities;
  for (auto& e : rq.queue(0)) {
    got.push_back(e.ticket);
    priorities.push_back(e.priority);
  }
  CHECK(got == std::vector<uint64_t>{6, 7, 2, 4, 8, 1, 3, 5});
  CHECK(priorities == std::vector<int32_t>{9, 5, 5, 5, 0, 0, 0, -3});
  CHECK(rq.count() == 8);
  // The extremes of int32 order too.
  rq.push(0, 9, 1.0, false, INT32_MIN);
  rq.push(0, 10, 1.0, true, INT32_MAX);
  CHECK(rq.queue(0).front().ticket == 10);
  CHECK(rq.queue(0).back().ticket == 9);
}

TEST_CASE("a tenant's waiting items take its places by priority",
          "[actors][balancer][ready]") {
  // Tickets 1..8: tenant 0 (odd) and 1 (even); 99 keeps its place.
  std::map<uint64_t, waiting_rank> ranks{{1, {0, 0}}, {2, {1, 0}}, {3, {0, 0}},
                                         {4, {1, 7}}, {5, {0, 3}}, {6, {1, 0}},
                                         {7, {0, 3}}, {99, {}}};
  auto rank = [&](uint64_t t) { return ranks.at(t); };
  std::vector<uint64_t> tickets{1, 2, 99, 3, 4, 5, 6, 7};
  order_within_tenants(tickets, rank);
  // Tenant 0's places (0, 3, 5, 7) take 5, 7, 1, 3; tenant 1's (1, 4, 6)
  // take 4, 2, 6; 99 stays.
  CHECK(tickets == std::vector<uint64_t>{5, 4, 99, 7, 2, 1, 6, 3});
  // All alike: nothing moves.
  std::vector<uint64_t> same{3, 1, 2};
  std::map<uint64_t, waiting_rank> flat{{1, {0, 4}}, {2, {1, 4}}, {3, {0, 4}}};
  order_within_tenants(same, [&](uint64_t t) { return flat.at(t); });
  CHECK(same == std::vector<uint64_t>{3, 1, 2});
  std::deque<uint64_t> empty;
  order_within_tenants(empty, rank);
  CHECK(empty.empty());
}

TEST_CASE("a placed item goes ahead of its tenant's lower ones on a device",
          "[actors][balancer][ready]") {
  // Tenant 0: 3, 1, 5 (priority 2, 0, 0); tenant 1: 2, 4; 9 keeps its place.
  auto t = [](uint64_t ticket, int tenant, int32_t priority) {
    return ranked_ticket{ticket, waiting_rank{tenant, priority}};
  };
  std::vector<ranked_ticket> queued{t(3, 0, 2),  t(2, 1, 0), t(1, 0, 0),
                                    t(9, -1, 0), t(4, 1, 0), t(5, 0, 0)};
  auto tickets = [&] {
    std::vector<uint64_t> out;
    for (auto& q : queued)
      out.push_back(q.ticket);
    return out;
  };
  // Priority 1: behind 3 (priority 2), ahead of 1 and 5 (priority 0), which
  // move back one of tenant 0's places each; 2, 9 and 4 stay.
  insert_within_tenant(queued, t(10, 0, 1));
  CHECK(tickets() == std::vector<uint64_t>{3, 2, 10, 9, 4, 1, 5});
  // Priority 0 of tenant 1: behind its equals.
  insert_within_tenant(queued, t(11, 1, 0));
  CHECK(tickets() == std::vector<uint64_t>{3, 2, 10, 9, 4, 1, 5, 11});
  // Ahead of all of tenant 1's.
  insert_within_tenant(queued, t(12, 1, 5));
  CHECK(tickets() == std::vector<uint64_t>{3, 12, 10, 9, 2, 1, 5, 4, 11});
  // One that keeps its place goes at the back.
  insert_within_tenant(queued, t(13, -1, 9));
  CHECK(queued.back().ticket == 13);
}
