// Launch wrappers of the CUDA kernels (kernels/cuda/*.cu). Host code calls
// only these; each returns the CUDA error of its launch (cuBLAS statuses are
// mapped onto CUDA errors) and never synchronizes.
#pragma once

#include <cstddef>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "kernels/gpu/launch.hpp"

namespace cohort::kernels::cuda {

/// Per-stream handles the wrappers may use.
struct stream_context {
  cudaStream_t stream = nullptr;
  /// A cuBLAS handle bound to `stream` (gemm, gemv).
  cublasHandle_t blas = nullptr;
};

/// Device scratch bytes `launch` needs for `a` (its pointers may be null).
cudaError_t scratch_bytes(const gpu::launch_args& a, size_t& bytes);

/// Enqueues the kernel on `ctx.stream`.
cudaError_t launch(const gpu::launch_args& a, const stream_context& ctx);

} // namespace cohort::kernels::cuda
