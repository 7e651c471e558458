// Device code of the vector kernels shared by CUDA and HIP: a grid-stride
// element-wise kernel (axpy) and a two-pass reduction in double (dot, nrm2).
// Every kernel is a template, so including this header in several
// translation units defines nothing twice.
#pragma once

#include <cstdint>

#include "kernels/gpu/block_sum_device.hpp"
#include "kernels/gpu/geometry.hpp"
#include "kernels/gpu/vendor_runtime.hpp"

namespace cohort::kernels::gpu {

/// Calls op(i) for every i in [0, count), striding over the grid.
template <class Op>
__global__ void __launch_bounds__(block_threads)
    for_each_index(uint64_t count, Op op) {
  const uint64_t stride = uint64_t{gridDim.x} * block_threads;
  for (uint64_t i = uint64_t{blockIdx.x} * block_threads + threadIdx.x;
       i < count; i += stride)
    op(i);
}

/// out[i] = alpha * x[i] + y[i].
struct axpy_op {
  float alpha;
  const float* x;
  const float* y;
  float* out;
  __device__ void operator()(uint64_t i) const { out[i] = alpha * x[i] + y[i]; }
};

/// First pass of a reduction: partial[b] = sum of term(i) over the items the
/// threads of block b visit, accumulated in double.
template <class Term>
__global__ void __launch_bounds__(block_threads)
    partial_sums(uint64_t count, Term term, double* partial) {
  const uint64_t stride = uint64_t{gridDim.x} * block_threads;
  double acc = 0;
  for (uint64_t i = uint64_t{blockIdx.x} * block_threads + threadIdx.x;
       i < count; i += stride)
    acc += term(i);
  const double total = block_sum(acc);
  if (threadIdx.x == 0)
    partial[blockIdx.x] = total;
}

/// Second pass, one block: *out = finish(sum of the `count` partial sums).
template <class Finish>
__global__ void __launch_bounds__(block_threads)
    finish_sum(const double* partial, unsigned count, Finish finish,
               float* out) {
  double acc = 0;
  for (unsigned i = threadIdx.x; i < count; i += block_threads)
    acc += partial[i];
  const double total = block_sum(acc);
  if (threadIdx.x == 0)
    *out = finish(total);
}

/// x[i] * y[i], exact in double.
struct dot_term {
  const float* x;
  const float* y;
  __device__ double operator()(uint64_t i) const {
    return static_cast<double>(x[i]) * y[i];
  }
};

/// x[i]^2, exact in double: no float square can overflow a double, so nrm2
/// needs no scaling pass.
struct square_term {
  const float* x;
  __device__ double operator()(uint64_t i) const {
    const double v = x[i];
    return v * v;
  }
};

/// A sum rounded once to float.
struct round_sum {
  __device__ float operator()(double sum) const {
    return static_cast<float>(sum);
  }
};

/// The square root of a sum of squares, taken in double and rounded once, so
/// nrm2 stays within an ulp or so of the exact norm.
struct root_sum {
  __device__ float operator()(double sum) const {
    return static_cast<float>(sqrt(sum));
  }
};

} // namespace cohort::kernels::gpu
