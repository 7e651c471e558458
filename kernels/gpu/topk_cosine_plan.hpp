// How topk_cosine splits its work and its scratch, the same for CUDA and HIP.
// Queries go in batches of about topk_batch_items similarities, which bounds
// the scratch whatever the number of queries.
//
// Scratch layout (byte offsets, each buffer aligned to scratch_align):
//   row_norm    float[m]            ‖row‖ of every row
//   query_norm  float[q]            ‖query‖ of every query
//   keys[0..1]  uint64[batch * m]   sort keys and the sort's other buffer
//   index[0..1] int32[batch * m]    row indices and the sort's other buffer
//   sort_temp   the radix sort's temporary storage (the vendor's size query)
// Plain C++17, no vendor header.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kernels/gpu/geometry.hpp"
#include "kernels/gpu/launch.hpp"

namespace cohort::kernels::gpu {

/// Target similarities per batch: 4 Mi keys, ~100 MB of scratch with the sort
/// buffers, and still enough to keep a GPU's radix sort busy.
inline constexpr uint64_t topk_batch_items = uint64_t{1} << 22;

/// Shapes, batching and scratch offsets of one topk_cosine launch.
struct topk_cosine_plan {
  uint64_t rows = 0;
  uint64_t dim = 0;
  uint64_t queries = 0;
  uint32_t top_k = 0;
  /// Queries per batch (the last batch may have fewer).
  uint64_t batch = 0;
  size_t row_norm = 0;
  size_t query_norm = 0;
  size_t keys[2] = {0, 0};
  size_t index[2] = {0, 0};
  /// Offset of the sort's temporary storage: the scratch ends there plus the
  /// storage size the vendor's sort asks for.
  size_t sort_temp = 0;

  /// True when the launch writes nothing.
  bool empty() const { return batch == 0; }

  /// Queries in the batch starting at query `first`.
  uint64_t batch_queries(uint64_t first) const {
    return std::min(batch, queries - first);
  }

  /// Queries in the last batch (the only one that may be short).
  uint64_t last_batch_queries() const {
    return queries - (queries - 1) / batch * batch;
  }
};

/// Key bits the sort must look at for a batch of `queries` queries: the 32
/// bits of the similarity code and enough bits for the query number.
inline unsigned topk_key_bits(uint64_t queries) {
  unsigned bits = 32;
  for (uint64_t last = queries - 1; last > 0; last >>= 1)
    ++bits;
  return bits;
}

/// Plans a launch whose shapes passed `shapes_match`.
inline topk_cosine_plan plan_topk_cosine(const launch_args& a) {
  topk_cosine_plan p;
  p.rows = a.args.m;
  p.dim = a.args.n;
  p.queries = p.dim == 0 ? 0 : a.in_len[1] / p.dim;
  p.top_k = a.args.top_k;
  if (p.rows == 0 || p.queries == 0 || p.top_k == 0)
    return p;
  p.batch = std::clamp<uint64_t>(topk_batch_items / p.rows, 1, p.queries);
  const uint64_t items = p.batch * p.rows;
  size_t at = 0;
  auto take = [&at](size_t bytes) {
    const size_t offset = at;
    at = align_scratch(at + bytes);
    return offset;
  };
  p.row_norm = take(p.rows * sizeof(float));
  p.query_norm = take(p.queries * sizeof(float));
  for (auto& k : p.keys)
    k = take(items * sizeof(uint64_t));
  for (auto& i : p.index)
    i = take(items * sizeof(int32_t));
  p.sort_temp = at;
  return p;
}

} // namespace cohort::kernels::gpu
