// Device code of topk_cosine shared by CUDA and HIP. The similarities of a
// batch of queries are written as 64-bit sort keys, (query << 32) | a 32-bit
// code that orders similarities descending, next to their row index; one
// stable radix sort of the whole batch then groups the keys by query and
// ranks each query's rows best first, equal similarities in row order.
#pragma once

#include <cstdint>

#include "kernels/gpu/vendor_runtime.hpp"

namespace cohort::kernels::gpu {

/// A code of `s` whose unsigned order is the descending order of the floats;
/// -0 is coded as +0 so that the two tie, as they compare equal.
__device__ inline uint32_t descending_code(float s) {
  const uint32_t u = __float_as_uint(s == 0.0f ? 0.0f : s);
  // Ascending order: flip every bit of negatives, only the sign of positives.
  const uint32_t ascending = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  return ~ascending;
}

/// Inverse of descending_code.
__device__ inline float code_value(uint32_t code) {
  const uint32_t ascending = ~code;
  const uint32_t u =
      (ascending & 0x80000000u) ? (ascending & 0x7fffffffu) : ~ascending;
  return __uint_as_float(u);
}

/// GEMM epilogue: turns dot(query q of the batch, row r) into the cosine
/// similarity (0 when a norm is 0, like the CPU) and writes its sort key and
/// row index at q * rows + r.
struct cosine_keys {
  /// Norms of the batch's queries.
  const float* query_norm;
  const float* row_norm;
  uint64_t rows;
  uint64_t* keys;
  int32_t* index;
  __device__ void operator()(uint64_t q, uint64_t r, float dot) const {
    // The same float operations as the CPU kernel, in the same order.
    const float denom = row_norm[r] * query_norm[q];
    const float sim = denom > 0.0f ? dot / denom : 0.0f;
    const uint64_t at = q * rows + r;
    keys[at] = (q << 32) | descending_code(sim);
    index[at] = static_cast<int32_t>(r);
  }
};

/// Copies output t = q * top_k + i from the sorted batch: the i-th best of
/// query q, at q * rows + i.
struct take_top {
  uint64_t rows;
  uint32_t top_k;
  const uint64_t* keys;
  const int32_t* index;
  float* values;
  int64_t* indices;
  __device__ void operator()(uint64_t t) const {
    const uint64_t from = t / top_k * rows + t % top_k;
    values[t] = code_value(static_cast<uint32_t>(keys[from]));
    indices[t] = index[from];
  }
};

} // namespace cohort::kernels::gpu
