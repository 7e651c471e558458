#include "actors/balancer/gang_planner.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <map>
#include <utility>

#include "devices/memory/memory_resource.hpp"

namespace cohort::actors::balancer {

namespace {

/// Steps one search for linked sets may take: far more than a real
/// topology needs (a switch's clique is found in K steps, bridged pairs
/// fail at once), a bound on a contrived one.
constexpr size_t search_budget = 100'000;

/// Device masks (bit i: device i) by device.
using peer_table = std::array<uint64_t, 64>;

/// Whether the devices of `cand` hold `k` linked to each other (by
/// `peers`, which are both ways), appending them to `out`. Stops, false,
/// when `budget` steps are spent.
bool find_linked(uint64_t cand, uint32_t k, const peer_table& peers,
                 std::vector<size_t>& out, size_t& budget) {
  if (k == 0)
    return true;
  while (std::popcount(cand) >= int(k) && budget > 0) {
    --budget;
    auto v = size_t(std::countr_zero(cand));
    cand &= cand - 1;
    out.push_back(v);
    if (find_linked(cand & peers[v], k - 1, peers, out, budget))
      return true;
    out.pop_back();
  }
  return false;
}

/// The `k` devices of `free` linked to each other by `peers` whose slowest
/// finishes first: with `free` by finish, the first device that completes
/// a set with earlier ones. Device indices; empty when there is none.
template <class Peers>
std::vector<size_t> linked_set(std::span<const gang_candidate> free, uint32_t k,
                               Peers peers) {
  peer_table table{};
  std::vector<const gang_candidate*> order;
  for (auto& c : free)
    if (c.device < 64) {
      table[c.device] = peers(c);
      order.push_back(&c);
    }
  std::stable_sort(order.begin(), order.end(), [](auto* a, auto* b) {
    return a->finish_ns < b->finish_ns;
  });
  uint64_t earlier = 0;
  size_t budget = search_budget;
  for (auto* c : order) {
    std::vector<size_t> out{c->device};
    if (find_linked(earlier & table[c->device], k - 1, table, out, budget))
      return out;
    earlier |= uint64_t{1} << c->device;
  }
  return {};
}

} // namespace

std::vector<size_t> pick_gang(std::span<const gang_candidate> free, uint32_t k,
                              bool cross_numa) {
  std::vector<size_t> out;
  if (k == 0 || free.size() < k)
    return out;
  // Linked sets first: a fabric, then any direct path.
  for (auto peers : {+[](const gang_candidate& c) { return c.fabric; },
                     +[](const gang_candidate& c) { return c.direct; }}) {
    if (k < 2)
      break;
    out = linked_set(free, k, peers);
    if (out.empty())
      continue;
    std::sort(out.begin(), out.end());
    return out;
  }
  using timed = std::pair<double, size_t>;
  std::map<int32_t, std::vector<timed>> by_node;
  std::vector<timed> all;
  for (auto& c : free) {
    by_node[c.numa_node].push_back({c.finish_ns, c.device});
    all.push_back({c.finish_ns, c.device});
  }
  // The k earliest of `v`, and when the last of them finishes.
  auto best_of = [k](std::vector<timed>& v) {
    std::sort(v.begin(), v.end());
    v.resize(k);
    return v.back().first;
  };
  std::vector<timed> pick;
  double pick_t = 0;
  for (auto& [node, v] : by_node) {
    if (v.size() < k)
      continue;
    double t = best_of(v);
    if (pick.empty() || t < pick_t) {
      pick = v;
      pick_t = t;
    }
  }
  if (pick.empty() && cross_numa) {
    best_of(all);
    pick = std::move(all);
  }
  for (auto& [t, i] : pick)
    out.push_back(i);
  std::sort(out.begin(), out.end());
  return out;
}

gang_capacity capacity_of(std::span<const gang_candidate> gpus) {
  gang_capacity out;
  std::map<int32_t, uint32_t> per_node;
  for (auto& g : gpus) {
    ++out.total;
    out.one_node = std::max(out.one_node, ++per_node[g.numa_node]);
  }
  // The largest set linked to each other. A search that runs out of steps
  // (a contrived topology) counts every GPU: a gang then waits for its
  // devices rather than being refused for want of a set that may exist.
  peer_table table{};
  uint64_t all = 0;
  for (auto& g : gpus)
    if (g.device < 64) {
      table[g.device] = g.direct;
      all |= uint64_t{1} << g.device;
    }
  size_t budget = search_budget;
  for (auto k = uint32_t(std::popcount(all)); k >= 2; --k) {
    std::vector<size_t> set;
    if (find_linked(all, k, table, set, budget)) {
      out.linked = k;
      break;
    }
    if (budget == 0) {
      out.linked = out.total;
      break;
    }
  }
  return out;
}

std::string gang_impossible(const gang_capacity& cap, uint32_t k,
                            const std::string& tenant, bool cross_numa) {
  if (cap.total < k)
    return "the gang needs " + std::to_string(k) + " GPUs at once; tenant '" +
           tenant + "' has " + std::to_string(cap.total) +
           " granted and in service";
  if (!cross_numa && cap.one_node < k && cap.linked < k)
    return "the gang needs " + std::to_string(k) +
           " GPUs on one NUMA node or linked to each other directly; the "
           "most on one node is " +
           std::to_string(cap.one_node) + ", the most linked " +
           std::to_string(cap.linked) +
           " (placement.gang_cross_numa allows spanning nodes)";
  return {};
}

uint64_t gang_slice_bytes(const work_item& item, uint32_t k) {
  using devices::memory::align_up;
  auto rows = (item.args.m + k - 1) / k;
  return align_up(rows * item.args.k * sizeof(float), item_alignment) +
         align_up(item.inputs[1].bytes(), item_alignment) +
         align_up(rows * item.args.n * sizeof(float), item_alignment);
}

} // namespace cohort::actors::balancer
