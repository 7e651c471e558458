#include "actors/balancer/stats.hpp"

#include <algorithm>

namespace cohort::actors::balancer {

void latency_table::record(size_t device, kernels::kernel_id k,
                           double seconds) {
  auto i = device * kernels::kernel_id_limit + static_cast<size_t>(k);
  if (i >= cells_.size())
    return;
  auto& c = cells_[i];
  size_t b = 0;
  while (b < latency_bounds_s.size() && seconds > latency_bounds_s[b])
    ++b;
  ++c.buckets[b];
  ++c.count;
  c.sum_s += seconds;
}

std::vector<latency_histogram>
latency_table::histograms(std::span<const std::string> device_names) const {
  std::vector<latency_histogram> out;
  auto devices = std::min(device_names.size(),
                          cells_.size() / kernels::kernel_id_limit);
  for (size_t d = 0; d < devices; ++d)
    for (size_t k = 0; k < kernels::kernel_id_limit; ++k) {
      auto& c = cells_[d * kernels::kernel_id_limit + k];
      if (c.count == 0)
        continue;
      latency_histogram h;
      h.kernel = std::string{kernels::name(static_cast<kernels::kernel_id>(k))};
      h.device = device_names[d];
      h.buckets.assign(c.buckets.begin(), c.buckets.end());
      h.count = c.count;
      h.sum_s = c.sum_s;
      out.push_back(std::move(h));
    }
  return out;
}

bool note_fallback(fallback_stats& fb, int64_t took_ns, int64_t budget_ns) {
  fb.budget_ns = budget_ns;
  ++fb.items;
  fb.total_ns += took_ns;
  fb.max_ns = std::max(fb.max_ns, took_ns);
  if (budget_ns <= 0 || took_ns <= budget_ns)
    return false;
  ++fb.over_budget;
  return true;
}

} // namespace cohort::actors::balancer
