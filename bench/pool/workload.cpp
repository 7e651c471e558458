// The trace every competitor of the latency run replays, drawn once before
// any of them runs, so that no random numbers are drawn inside timed code.
#include <algorithm>
#include <cmath>

#include "bench/pool/pool.hpp"

namespace cohort::bench {

namespace {

/// Uniform in [0, 1) from the top 53 bits.
double unit(std::mt19937_64& rng) {
  return double(rng() >> 11) * 0x1p-53;
}

} // namespace

uint64_t draw_size(const size_distribution& d, std::mt19937_64& rng) {
  if (d.min_bytes >= d.max_bytes)
    return d.min_bytes;
  if (d.uniform)
    return d.min_bytes + rng() % (d.max_bytes - d.min_bytes + 1);
  auto lo = std::log(double(d.min_bytes));
  auto hi = std::log(double(d.max_bytes));
  auto x = uint64_t(std::llround(std::exp(lo + unit(rng) * (hi - lo))));
  return std::clamp(x, d.min_bytes, d.max_bytes);
}

workload make_workload(const workload_options& opts) {
  std::mt19937_64 rng{opts.seed};
  workload w;
  w.pairs = opts.pairs;
  w.repeat = std::max<uint32_t>(opts.repeat, 1);
  w.ops.reserve(2 * opts.pairs);
  struct live_block {
    uint32_t slot;
    uint64_t bytes;
  };
  std::vector<live_block> live;
  std::vector<uint32_t> free_slots;
  uint64_t live_bytes = 0;
  auto free_one = [&](size_t i) {
    auto b = live[i];
    live[i] = live.back();
    live.pop_back();
    live_bytes -= b.bytes;
    free_slots.push_back(b.slot);
    w.ops.push_back({b.bytes, b.slot, false});
  };
  for (uint64_t made = 0; made < opts.pairs;) {
    auto bytes = draw_size(opts.sizes, rng);
    bool heads = (rng() & 1) != 0;
    if (live.empty() || (heads && live_bytes + bytes <= opts.cap_bytes)) {
      uint32_t slot = w.slots;
      if (!free_slots.empty()) {
        slot = free_slots.back();
        free_slots.pop_back();
      } else {
        ++w.slots;
      }
      live.push_back({slot, bytes});
      live_bytes += bytes;
      w.peak_live_bytes = std::max(w.peak_live_bytes, live_bytes);
      w.ops.push_back({bytes, slot, true});
      ++made;
    } else {
      free_one(size_t(rng() % live.size()));
    }
  }
  while (!live.empty())
    free_one(size_t(rng() % live.size()));
  return w;
}

double percentile(std::vector<double>& samples, double p) {
  if (samples.empty())
    return 0;
  auto idx = std::min(samples.size() - 1,
                      size_t(p / 100.0 * double(samples.size() - 1) + 0.5));
  std::nth_element(samples.begin(), samples.begin() + ptrdiff_t(idx),
                   samples.end());
  return samples[idx];
}

} // namespace cohort::bench
