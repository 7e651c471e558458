// The balancer's statistics that need more than a counter: latency
// histograms per (device, kernel) and the price of CPU fallback per
// tenant. Plain code: the balancer records, its stats message reads.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kernels/catalog.hpp"
#include "messages/stats.hpp"

namespace cohort::actors::balancer {

/// Admission-to-end latency of completed items, one histogram per (device,
/// kernel), with the buckets of latency_bounds_s.
class latency_table {
public:
  explicit latency_table(size_t devices = 0)
      : cells_(devices * kernels::kernel_id_limit) {
    // nop
  }

  /// Appends a device (a GPU a rescan found), with no items yet.
  void add_device() { cells_.resize(cells_.size() + kernels::kernel_id_limit); }

  /// Counts one item of kernel `k` that took `seconds` on `device`. No
  /// allocation.
  void record(size_t device, kernels::kernel_id k, double seconds);

  /// The histograms with at least one item, devices named by
  /// `device_names` (one per device), by device then kernel.
  std::vector<latency_histogram>
  histograms(std::span<const std::string> device_names) const;

private:
  struct cell {
    std::array<uint64_t, latency_bounds_s.size() + 1> buckets{};
    uint64_t count = 0;
    double sum_s = 0;
  };
  std::vector<cell> cells_;
};

/// Adds one item that fell back to a CPU worker and took `took_ns` from
/// admission to end to its tenant's `fb`, whose budget per item is
/// `budget_ns` (0: none). True when it went over the budget.
bool note_fallback(fallback_stats& fb, int64_t took_ns, int64_t budget_ns);

} // namespace cohort::actors::balancer
