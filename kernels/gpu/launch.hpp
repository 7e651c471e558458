// One kernel launch on a GPU, described without any vendor header: device
// pointers, sizes and scratch. The CUDA and HIP launch wrappers take it; the
// host-side GPU device fills it in.
#pragma once

#include <cstdint>

#include "kernels/kernel_args.hpp"

namespace cohort::kernels::gpu {

/// Device pointers and sizes of one launch. Every pointer is device memory.
struct launch_args {
  kernel_id id = kernel_id::axpy;
  kernel_args args;
  /// Inputs in catalog order (`input_count(id)` of them are used).
  const float* in[2] = {nullptr, nullptr};
  /// Elements of each input.
  uint64_t in_len[2] = {0, 0};
  /// Output values: output_bytes(...) / sizeof(float) of them for every kernel
  /// but topk_cosine, whose output holds q * top_k floats.
  float* out = nullptr;
  /// topk_cosine only: q * top_k row indices.
  int64_t* out_indices = nullptr;
  /// Scratch the kernel may use, of the size its backend's
  /// `scratch_bytes` asked for (may be null when that was 0).
  void* scratch = nullptr;
  uint64_t scratch_bytes = 0;
};

/// Number of float values a launch writes to `out`.
inline uint64_t output_values(const launch_args& a) {
  switch (a.id) {
  case kernel_id::axpy:
  case kernel_id::inclusive_scan:
    return a.in_len[0];
  case kernel_id::dot:
  case kernel_id::nrm2:
  case kernel_id::reduce_sum:
    return 1;
  case kernel_id::gemv:
    return a.args.m;
  case kernel_id::gemm:
    return a.args.m * a.args.n;
  case kernel_id::topk_cosine:
    return a.args.n == 0 ? 0 : a.in_len[1] / a.args.n * a.args.top_k;
  }
  return 0;
}

} // namespace cohort::kernels::gpu
