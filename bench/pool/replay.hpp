// Replays a workload against one allocator: a checking pass (untimed, and
// the warm-up), then `repeat` passes timed as a whole (the mean per pair,
// free of clock reads) and `repeat` passes timing every call (the per-pair
// percentiles). Every competitor goes through the same loop.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "bench/pool/pool.hpp"

namespace cohort::bench {

/// What the checking pass verifies of every block.
struct replay_checks {
  /// Every block must be aligned to this.
  uint64_t alignment = 1;
  /// The memory is host memory: stamp each block's first and last 8 bytes
  /// when it is handed out and check the stamps when it is freed, so that a
  /// block overlapping another live block is caught.
  bool stamp = false;
  /// With `stamp`: a block handed out must read zero where earlier blocks
  /// were stamped (zero-on-free).
  bool expect_zero = false;
};

/// Nanoseconds one steady_clock read costs here (what each per-call timing
/// carries on top of the call).
inline double clock_read_ns() {
  using clock = std::chrono::steady_clock;
  constexpr int n = 10000;
  double best = 0;
  for (int batch = 0; batch < 20; ++batch) {
    auto start = clock::now();
    auto sink = start;
    for (int i = 0; i < n; ++i)
      sink = std::max(sink, clock::now());
    auto ns = std::chrono::duration<double, std::nano>(sink - start).count();
    best = batch == 0 ? ns / n : std::min(best, ns / n);
  }
  return best;
}

/// Replays `w`: `allocate(bytes)` returns the block or null (the competitor
/// keeps why); `deallocate(p, bytes)` returns false on an error. Fills the
/// timings of `out`, or sets `out.error` and returns false at the first
/// failed call or check (blocks still live then are left to the
/// competitor).
template <class Allocate, class Deallocate>
bool replay(const workload& w, const replay_checks& checks, Allocate&& allocate,
            Deallocate&& deallocate, latency_figures& out) {
  using clock = std::chrono::steady_clock;
  std::vector<void*> ptr(w.slots);
  out.pairs = w.pairs;
  auto fail = [&](const char* pass, size_t call, const pool_op& op,
                  const char* what) {
    out.error = std::string{pass} + " pass, call " + std::to_string(call) +
                ": " + what + " of " + std::to_string(op.bytes) + " bytes";
    return false;
  };
  // 1. Checks, untimed.
  std::vector<uint64_t> stamps(w.slots);
  uint64_t head = 0, tail = 0;
  for (size_t k = 0; k < w.ops.size(); ++k) {
    auto& op = w.ops[k];
    bool stamped = checks.stamp && op.bytes >= 2 * sizeof(uint64_t);
    if (op.allocate) {
      auto* p = static_cast<char*>(allocate(op.bytes));
      if (p == nullptr)
        return fail("check", k, op, "allocate");
      if (reinterpret_cast<uintptr_t>(p) % checks.alignment != 0)
        return fail("check", k, op, "misaligned block");
      if (stamped) {
        std::memcpy(&head, p, 8);
        std::memcpy(&tail, p + op.bytes - 8, 8);
        if (checks.expect_zero && (head != 0 || tail != 0))
          return fail("check", k, op, "block not zeroed (zero-on-free)");
        stamps[op.slot] = 0x9e3779b97f4a7c15ull ^ (uint64_t(k) << 1);
        std::memcpy(p, &stamps[op.slot], 8);
        auto inv = ~stamps[op.slot];
        std::memcpy(p + op.bytes - 8, &inv, 8);
      }
      ptr[op.slot] = p;
    } else {
      auto* p = static_cast<char*>(ptr[op.slot]);
      if (stamped) {
        std::memcpy(&head, p, 8);
        std::memcpy(&tail, p + op.bytes - 8, 8);
        if (head != stamps[op.slot] || tail != ~stamps[op.slot])
          return fail("check", k, op, "stamp overwritten (overlapping blocks)");
      }
      if (!deallocate(p, op.bytes))
        return fail("check", k, op, "deallocate");
    }
  }
  // 2. The mean: no clock inside the loop; the fastest pass is kept (the
  // trace is the same each time, so passes differ only by interference).
  out.mean_ns = 0;
  for (uint32_t r = 0; r < w.repeat; ++r) {
    auto start = clock::now();
    for (size_t k = 0; k < w.ops.size(); ++k) {
      auto& op = w.ops[k];
      if (op.allocate) {
        if ((ptr[op.slot] = allocate(op.bytes)) == nullptr)
          return fail("mean", k, op, "allocate");
      } else if (!deallocate(ptr[op.slot], op.bytes)) {
        return fail("mean", k, op, "deallocate");
      }
    }
    auto ns =
        std::chrono::duration<double, std::nano>(clock::now() - start).count() /
        double(w.pairs);
    out.mean_ns = r == 0 ? ns : std::min(out.mean_ns, ns);
  }
  // 3. Every call timed: a pair is a block's allocate plus its deallocate.
  // The pass with the lowest median is kept, all its figures together.
  std::vector<double> allocated_in(w.slots);
  std::vector<double> pairs;
  pairs.reserve(w.pairs);
  for (uint32_t r = 0; r < w.repeat; ++r) {
    pairs.clear();
    double allocating = 0, deallocating = 0;
    for (size_t k = 0; k < w.ops.size(); ++k) {
      auto& op = w.ops[k];
      auto t0 = clock::now();
      if (op.allocate) {
        auto* p = allocate(op.bytes);
        auto t1 = clock::now();
        if (p == nullptr)
          return fail("timed", k, op, "allocate");
        ptr[op.slot] = p;
        allocated_in[op.slot] =
            std::chrono::duration<double, std::nano>(t1 - t0).count();
        allocating += allocated_in[op.slot];
      } else {
        bool ok = deallocate(ptr[op.slot], op.bytes);
        auto t1 = clock::now();
        if (!ok)
          return fail("timed", k, op, "deallocate");
        auto ns = std::chrono::duration<double, std::nano>(t1 - t0).count();
        deallocating += ns;
        pairs.push_back(allocated_in[op.slot] + ns);
      }
    }
    auto p50 = percentile(pairs, 50);
    if (r > 0 && p50 >= out.p50_ns)
      continue;
    out.p50_ns = p50;
    out.p99_ns = percentile(pairs, 99);
    out.allocate_ns = allocating / double(w.pairs);
    out.deallocate_ns = deallocating / double(w.pairs);
  }
  return true;
}

} // namespace cohort::bench
