// Sum over the threads of a block, through shared memory and __syncthreads
// only: no warp shuffles, so the same code is right for 32-wide NVIDIA warps
// and 64-wide AMD wavefronts.
#pragma once

#include "kernels/gpu/geometry.hpp"
#include "kernels/gpu/vendor_runtime.hpp"

namespace cohort::kernels::gpu {

/// Returns the sum of `v` over the block's threads, to every thread. Every
/// thread of a block of `block_threads` threads must call it; it may be
/// called again right away (its trailing barrier protects the shared array).
__device__ inline double block_sum(double v) {
  static_assert((block_threads & (block_threads - 1)) == 0,
                "the tree reduction needs a power-of-two block");
  __shared__ double lane[block_threads];
  lane[threadIdx.x] = v;
  __syncthreads();
  for (unsigned half = block_threads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half)
      lane[threadIdx.x] += lane[threadIdx.x + half];
    __syncthreads();
  }
  const double total = lane[0];
  __syncthreads();
  return total;
}

} // namespace cohort::kernels::gpu
