// Per-kernel CUDA launch wrappers behind `launch` and `scratch_bytes`
// (kernels/cuda/launch.cu dispatches on the kernel id). Internal to
// kernels/cuda: host code calls only kernels/cuda/launch.hpp.
//
// Each `*_scratch_bytes` returns the scratch its kernel needs and launches
// nothing; a kernel without one needs none. Each launch wrapper may assume
// `gpu::shapes_match(a)` and a scratch of at least that size, enqueues on
// `ctx.stream` and returns the first error.
#pragma once

#include <cstddef>

#include "kernels/cuda/launch.hpp"

namespace cohort::kernels::cuda {

/// Element-wise, no scratch.
cudaError_t axpy(const gpu::launch_args& a, const stream_context& ctx);

/// Two-pass block reduction in double; scratch: one double per block.
cudaError_t dot_scratch_bytes(const gpu::launch_args& a, size_t& bytes);
cudaError_t dot(const gpu::launch_args& a, const stream_context& ctx);

/// Two-pass block reduction of squares in double; scratch as dot.
cudaError_t nrm2_scratch_bytes(const gpu::launch_args& a, size_t& bytes);
cudaError_t nrm2(const gpu::launch_args& a, const stream_context& ctx);

/// CUB device reduction in double; scratch: its temporary storage.
cudaError_t reduce_sum_scratch_bytes(const gpu::launch_args& a, size_t& bytes);
cudaError_t reduce_sum(const gpu::launch_args& a, const stream_context& ctx);

/// CUB device scan in double; scratch: its temporary storage.
cudaError_t inclusive_scan_scratch_bytes(const gpu::launch_args& a,
                                         size_t& bytes);
cudaError_t inclusive_scan(const gpu::launch_args& a,
                           const stream_context& ctx);

/// Through cuBLAS (`ctx.blas`).
cudaError_t gemv(const gpu::launch_args& a, const stream_context& ctx);

/// Through cuBLAS (`ctx.blas`).
cudaError_t gemm(const gpu::launch_args& a, const stream_context& ctx);

/// Norms, tiled GEMM, radix sort; scratch: kernels/gpu/topk_cosine_plan.hpp.
cudaError_t topk_cosine_scratch_bytes(const gpu::launch_args& a, size_t& bytes);
cudaError_t topk_cosine(const gpu::launch_args& a, const stream_context& ctx);

} // namespace cohort::kernels::cuda
