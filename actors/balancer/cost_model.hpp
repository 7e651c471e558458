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

/// What reaching a device outside the node's process costs (a device in a
/// host process or on a remote host, docs/placement.md): per item, its round
/// trip as the balancer sees it (request sent, report back) less the time the
/// device's actor held it. Summarized as a fixed cost, from items that carry
/// little, and a cost per byte of the inputs an item carries, from items that
/// carry much (the return of their outputs included, at the mix of kernels
/// the device runs). Each is the lower quartile of its window of recent
/// items: a sample is the link's cost plus whatever else held that message
/// up (the balancer's own mailbox under load), and the latter is not the
/// link's.
class crossing_model {
public:
  static constexpr uint32_t window = 32;

  /// Items carrying at least this many bytes measure the cost per byte.
  static constexpr uint64_t large_bytes = 64 * 1024;

  /// Records one item's crossing: `ns` for an item carrying `bytes`.
  void record(double ns, uint64_t bytes);

  /// Whether any item was recorded since the model was made (or reset).
  bool measured() const {
    return !small_.values.empty() || !large_.values.empty();
  }

  double fixed_ns() const { return fixed_ns_; }
  double ns_per_byte() const { return ns_per_byte_; }

  /// The crossing predicted for an item carrying `bytes`.
  double predict(uint64_t bytes) const {
    return fixed_ns_ + ns_per_byte_ * double(bytes);
  }

private:
  struct samples {
    std::vector<float> values;
    uint32_t next = 0;
    uint32_t since = 0;
  };

  // Adds `x`; whether the summary should be taken again (every sample until
  // the window is full, then every fourth).
  static bool add(samples& s, float x);
  static double lower_quartile(const samples& s);

  samples small_;
  samples large_;
  /// Large samples since the last small one: a window of them retires the
  /// fixed cost (kept busy with large messages, a device's fixed cost from
  /// its first few would otherwise stay for good).
  uint32_t large_since_small_ = 0;
  double fixed_ns_ = 0;
  double ns_per_byte_ = 0;
};

} // namespace cohort::actors::balancer
