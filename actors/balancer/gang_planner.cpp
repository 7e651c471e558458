#include "actors/balancer/gang_planner.hpp"

#include <algorithm>
#include <map>
#include <utility>

#include "devices/memory/memory_resource.hpp"

namespace cohort::actors::balancer {

std::vector<size_t> pick_gang(std::span<const gang_candidate> free, uint32_t k,
                              bool cross_numa) {
  std::vector<size_t> out;
  if (k == 0 || free.size() < k)
    return out;
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

gang_capacity capacity_of(std::span<const int32_t> numa_nodes) {
  gang_capacity out;
  std::map<int32_t, uint32_t> per_node;
  for (auto node : numa_nodes) {
    ++out.total;
    out.one_node = std::max(out.one_node, ++per_node[node]);
  }
  return out;
}

std::string gang_impossible(const gang_capacity& cap, uint32_t k,
                            const std::string& tenant, bool cross_numa) {
  if (cap.total < k)
    return "the gang needs " + std::to_string(k) + " GPUs at once; tenant '" +
           tenant + "' has " + std::to_string(cap.total) +
           " granted and in service";
  if (!cross_numa && cap.one_node < k)
    return "the gang needs " + std::to_string(k) +
           " GPUs on one NUMA node; the most on one node is " +
           std::to_string(cap.one_node) +
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
