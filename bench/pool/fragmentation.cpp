// The fragmentation run: Cohort's pool over address space of a fixed
// capacity, filled with random blocks to an occupancy, then churned (a
// random live block freed, new random blocks allocated until live is back at
// the occupancy). The pool's shape is sampled after every churn step.
#include <algorithm>
#include <random>
#include <vector>

#include "bench/pool/pool.hpp"
#include "devices/memory/pool_resource.hpp"
#include "devices/memory/stream_ordering.hpp"
#include "devices/memory/virtual_resource.hpp"
#include "messages/errc.hpp"

namespace cohort::bench {

fragmentation_figures run_fragmentation(const fragmentation_options& o) {
  using namespace devices::memory;
  fragmentation_figures out;
  auto opts = sized_pool_options(o.capacity);
  // Address space cannot be written; the figures are the same either way.
  opts.zero_on_free = false;
  if (o.slab_bytes != 0)
    opts.slab_bytes = o.slab_bytes;
  out.slab_bytes = opts.slab_bytes;
  if (auto err = validate(opts)) {
    out.error = describe(err);
    return out;
  }
  virtual_resource upstream{"bench-frag", o.capacity};
  host_stream_ordering streams{1, false};
  pool_resource pool{upstream, streams, opts};
  const owner_tag owner{"bench", 1, "bench/pool fragmentation"};
  std::mt19937_64 rng{o.seed};
  struct block {
    void* p;
    uint64_t bytes;
  };
  std::vector<block> live;
  auto target = uint64_t(o.occupancy * double(o.capacity));
  // False when the allocation was refused (counted) or failed otherwise
  // (out.error set).
  auto allocate_one = [&] {
    auto bytes = draw_size(o.sizes, rng);
    ++out.attempts;
    auto p = pool.allocate(bytes, stream_ref{0}, owner);
    if (p) {
      live.push_back({*p, bytes});
      return true;
    }
    if (code_of(p.error()) != errc::out_of_memory) {
      out.error = describe(p.error());
      return false;
    }
    ++out.refused;
    auto s = pool.stats();
    auto need = pool.rounded_size(bytes);
    if (o.capacity - s.live_bytes >= need)
      ++out.refused_with_room;
    // A refusal must be the address space's: no free block fits, and the
    // device has no room left for a slab of the request's size.
    if (s.largest_free >= need || o.capacity - s.held_bytes >= need)
      out.error = "refused " + std::to_string(bytes) +
                  " bytes although the pool's largest free block holds " +
                  std::to_string(s.largest_free) + " and the device " +
                  std::to_string(o.capacity - s.held_bytes) + " more";
    return false;
  };
  auto free_one = [&] {
    auto i = size_t(rng() % live.size());
    if (auto err = pool.deallocate(live[i].p, live[i].bytes, stream_ref{0})) {
      out.error = describe(err);
      return false;
    }
    live[i] = live.back();
    live.pop_back();
    return true;
  };
  // Fill. Refusals this early would be a finding, not a reason to spin.
  for (uint64_t refusals = 0;
       pool.stats().live_bytes < target && refusals < 1000;)
    if (!allocate_one()) {
      if (!out.error.empty())
        return out;
      ++refusals;
    }
  if (auto bad = pool.check_invariants(); !bad.empty()) {
    out.error = "pool invariants after the fill: " + bad;
    return out;
  }
  double occupancy = 0, frag = 0, largest = 0, overhead = 0, rounding = 0;
  for (uint64_t step = 0; step < o.steps; ++step) {
    if (!live.empty() && !free_one())
      return out;
    while (pool.stats().live_bytes < target && allocate_one()) {
      // refill
    }
    if (!out.error.empty())
      return out;
    auto s = pool.stats();
    auto f = s.fragmentation();
    auto h = s.held_bytes > 0
                 ? 1.0 - double(s.live_bytes) / double(s.held_bytes)
                 : 0.0;
    occupancy += double(s.live_bytes) / double(o.capacity);
    frag += f;
    largest += double(s.largest_free);
    overhead += h;
    rounding += s.live_bytes > 0
                    ? 1.0 - double(s.requested_bytes) / double(s.live_bytes)
                    : 0.0;
    out.fragmentation_max = std::max(out.fragmentation_max, f);
    out.overhead_max = std::max(out.overhead_max, h);
    out.slabs_max = std::max(out.slabs_max, s.slabs);
    if (o.maintain_every != 0 && (step + 1) % o.maintain_every == 0)
      pool.maintain();
  }
  auto n = double(std::max<uint64_t>(o.steps, 1));
  out.occupancy_mean = occupancy / n;
  out.fragmentation_mean = frag / n;
  out.largest_free_mean = largest / n;
  out.overhead_mean = overhead / n;
  out.rounding_mean = rounding / n;
  if (auto bad = pool.check_invariants(); !bad.empty()) {
    out.error = "pool invariants after the churn: " + bad;
    return out;
  }
  while (!live.empty())
    if (!free_one())
      return out;
  if (auto bad = pool.check_invariants(); !bad.empty())
    out.error = "pool invariants after freeing everything: " + bad;
  else if (pool.stats().live_bytes != 0)
    out.error = "live bytes left after freeing everything";
  return out;
}

} // namespace cohort::bench
