#include "actors/balancer/gang_planner.hpp"

#include <algorithm>
#include <map>
#include <utility>

#include "devices/memory/memory_resource.hpp"

namespace cohort::actors::balancer {

namespace {

/// A set of `k` of `free` in which every pair is linked (`peers` of each
/// names the others), greedily: from each device in turn, the earliest
/// devices linked to all picked so far. The set whose slowest pick
/// finishes first, as indices into `free`; empty when there is none.
template <class Peers>
std::vector<size_t> linked_set(std::span<const gang_candidate> free, uint32_t k,
                               Peers peers) {
  std::vector<size_t> order(free.size());
  for (size_t i = 0; i < order.size(); ++i)
    order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return free[a].finish_ns < free[b].finish_ns;
  });
  std::vector<size_t> best;
  double best_t = 0;
  for (auto seed : order) {
    std::vector<size_t> set{seed};
    uint64_t common = peers(free[seed]);
    double t = free[seed].finish_ns;
    for (auto c : order) {
      if (set.size() == k)
        break;
      if (c == seed || free[c].device >= 64 ||
          !(common & (uint64_t{1} << free[c].device)))
        continue;
      set.push_back(c);
      common &= peers(free[c]);
      t = std::max(t, free[c].finish_ns);
    }
    if (set.size() == k && (best.empty() || t < best_t)) {
      best = std::move(set);
      best_t = t;
    }
  }
  return best;
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
    auto set = linked_set(free, k, peers);
    if (set.empty())
      continue;
    for (auto i : set)
      out.push_back(free[i].device);
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
  // The largest linked set, greedily from each GPU in turn.
  for (auto& seed : gpus) {
    uint64_t common = seed.direct;
    uint32_t size = 1;
    for (auto& c : gpus)
      if (&c != &seed && c.device < 64 &&
          (common & (uint64_t{1} << c.device))) {
        ++size;
        common &= c.direct;
      }
    if (size >= 2)
      out.linked = std::max(out.linked, size);
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
