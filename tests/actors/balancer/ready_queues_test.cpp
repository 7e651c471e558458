// The ready queues alone: weighted fair queuing on virtual time, no actors.
#include <catch2/catch.hpp>

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
  CHECK(rq.queue(0).front() == 100);
  CHECK(rq.queue(1).front() == 1050);
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
  CHECK(rq.queue(0).front() == 7);
  std::vector<size_t> order;
  ready_queues empty{1};
  empty.order(order);
  CHECK(order.empty());
  // Leaving never drives the counts below zero.
  empty.left(5.0);
  CHECK(empty.count() == 0);
  CHECK(empty.units() == 0.0);
}
