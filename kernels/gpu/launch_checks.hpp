// Consistency checks of a launch's sizes, done by both vendors' `launch`
// before any kernel reads an input: a mismatch would read out of bounds.
// Plain C++17, no vendor header.
#pragma once

#include <cstdint>
#include <limits>

#include "kernels/gpu/launch.hpp"

namespace cohort::kernels::gpu {

/// True when the input lengths agree with the kernel's arguments, as
/// `kernels::validate` checks on the host, and the dimensions fit the 32-bit
/// sizes of BLAS and of topk_cosine's row indices.
inline bool shapes_match(const launch_args& a) {
  constexpr uint64_t max_dim = std::numeric_limits<int32_t>::max();
  const auto& g = a.args;
  const uint64_t* len = a.in_len;
  auto is_product = [](uint64_t want, uint64_t x, uint64_t y) {
    uint64_t xy = 0;
    return x <= max_dim && y <= max_dim && !__builtin_mul_overflow(x, y, &xy) &&
           xy == want;
  };
  switch (a.id) {
  case kernel_id::axpy:
  case kernel_id::dot:
    return len[0] == len[1];
  case kernel_id::nrm2:
  case kernel_id::reduce_sum:
  case kernel_id::inclusive_scan:
    return true;
  case kernel_id::gemv:
    return is_product(len[0], g.m, g.n) && len[1] == g.n;
  case kernel_id::gemm:
    return is_product(len[0], g.m, g.k) && is_product(len[1], g.k, g.n);
  case kernel_id::topk_cosine:
    return g.n > 0 && is_product(len[0], g.m, g.n) && len[1] % g.n == 0 &&
           g.top_k >= 1 && g.top_k <= g.m;
  }
  return false;
}

} // namespace cohort::kernels::gpu
