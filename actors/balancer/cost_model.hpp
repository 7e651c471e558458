// The cost model: what the balancer knows about how long work takes where: a
// history of measured run times per (kernel, size class, device), summarized by
// a median so that a few stragglers do not move placement.
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "kernels/kernel_args.hpp"

namespace cohort::actors::balancer {

/// Size class of an item of `cost_units` (flops + bytes): its power of two.
/// Items of one class cost within a factor of two of each other.
uint8_t size_class(double cost_units);

/// Per-(kernel, size class, device) run-time history, updated online.
class run_time_model {
public:
  static constexpr uint32_t default_window = 15;

  explicit run_time_model(uint32_t window = default_window);

  /// Records a measured run: `ns` of device time for `units` of cost.
  void record(size_t device, kernels::kernel_id kernel, uint8_t cls,
              double units, double ns);

  /// Median device time per cost unit over the last `window` runs; 0 when
  /// this (kernel, class, device) has not run yet.
  double rate(size_t device, kernels::kernel_id kernel, uint8_t cls) const;

  /// Runs recorded for the cell, up to the window.
  uint32_t samples(size_t device, kernels::kernel_id kernel, uint8_t cls) const;

  /// The nearest size class of `kernel` measured on `device` (same kernel,
  /// another size); 0 when none.
  double nearest_rate(size_t device, kernels::kernel_id kernel,
                      uint8_t cls) const;

private:
  struct cell {
    std::vector<float> ring;
    uint32_t next = 0;
    uint32_t since_median = 0;
    double median = 0;
  };
  static uint32_t key(size_t device, kernels::kernel_id kernel, uint8_t cls) {
    return uint32_t(device) << 16 | uint32_t(kernel) << 8 | cls;
  }
  const cell* find(size_t device, kernels::kernel_id kernel, uint8_t cls) const;

  uint32_t window_;
  std::unordered_map<uint32_t, cell> cells_;
  /// Per (device, kernel): bit c set = class c measured (classes < 64).
  std::unordered_map<uint32_t, uint64_t> measured_;
};

} // namespace cohort::actors::balancer
