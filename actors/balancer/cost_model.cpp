#include "actors/balancer/cost_model.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>

namespace cohort::actors::balancer {

uint8_t size_class(double cost_units) {
  if (!(cost_units >= 1))
    return 0;
  return uint8_t(std::min(63, std::ilogb(cost_units)));
}

run_time_model::run_time_model(uint32_t window)
    : window_(std::max(1u, window)) {
  // nop
}

void run_time_model::record(size_t device, kernels::kernel_id kernel,
                            uint8_t cls, double units, double ns) {
  if (!(units > 0) || !(ns > 0))
    return;
  auto& c = cells_[key(device, kernel, cls)];
  auto per_unit = float(ns / units);
  if (c.ring.empty())
    measured_[key(device, kernel, 0)] |= uint64_t{1} << cls;
  if (c.ring.size() < window_) {
    c.ring.push_back(per_unit);
  } else {
    c.ring[c.next] = per_unit;
    c.next = (c.next + 1) % window_;
    // A full window moves slowly: the median is taken again every fourth
    // run (the hot path records every completion).
    if (++c.since_median < 4)
      return;
  }
  c.since_median = 0;
  // The median of the window: a straggler is one sample among many, not a
  // weight on every later prediction as in a moving average.
  std::array<float, 64> tmp{};
  auto n = std::min(c.ring.size(), tmp.size());
  std::copy_n(c.ring.begin(), n, tmp.begin());
  auto mid = tmp.begin() + std::ptrdiff_t(n / 2);
  std::nth_element(tmp.begin(), mid, tmp.begin() + std::ptrdiff_t(n));
  c.median = *mid;
}

const run_time_model::cell* run_time_model::find(size_t device,
                                                 kernels::kernel_id kernel,
                                                 uint8_t cls) const {
  auto i = cells_.find(key(device, kernel, cls));
  return i == cells_.end() ? nullptr : &i->second;
}

double run_time_model::rate(size_t device, kernels::kernel_id kernel,
                            uint8_t cls) const {
  auto* c = find(device, kernel, cls);
  return c ? c->median : 0;
}

uint32_t run_time_model::samples(size_t device, kernels::kernel_id kernel,
                                 uint8_t cls) const {
  auto* c = find(device, kernel, cls);
  return c ? uint32_t(c->ring.size()) : 0;
}

double run_time_model::nearest_rate(size_t device, kernels::kernel_id kernel,
                                    uint8_t cls) const {
  auto i = measured_.find(key(device, kernel, 0));
  if (i == measured_.end() || i->second == 0)
    return 0;
  int best = -1;
  for (int c = 0; c < 64; ++c)
    if ((i->second >> c & 1) &&
        (best < 0 || std::abs(c - cls) < std::abs(best - cls)))
      best = c;
  return rate(device, kernel, uint8_t(best));
}

bool crossing_model::add(samples& s, float x) {
  if (s.values.size() < window) {
    s.values.push_back(x);
    return true;
  }
  s.values[s.next] = x;
  s.next = (s.next + 1) % window;
  if (++s.since < 4)
    return false;
  s.since = 0;
  return true;
}

double crossing_model::lower_quartile(const samples& s) {
  std::array<float, window> tmp{};
  auto n = std::min(s.values.size(), tmp.size());
  std::copy_n(s.values.begin(), n, tmp.begin());
  auto at = tmp.begin() + std::ptrdiff_t(n / 4);
  std::nth_element(tmp.begin(), at, tmp.begin() + std::ptrdiff_t(n));
  return *at;
}

void crossing_model::record(double ns, uint64_t bytes) {
  if (!(ns >= 0))
    ns = 0;
  if (bytes < large_bytes) {
    large_since_small_ = 0;
    if (add(small_, float(ns)))
      fixed_ns_ = lower_quartile(small_);
    return;
  }
  if (++large_since_small_ > window && !small_.values.empty()) {
    small_ = {};
    fixed_ns_ = 0;
  }
  // What the bytes added over the fixed cost known now (all of it before
  // a small item was measured).
  auto per_byte = std::max(0.0, ns - fixed_ns_) / double(bytes);
  if (add(large_, float(per_byte)))
    ns_per_byte_ = lower_quartile(large_);
}

} // namespace cohort::actors::balancer
