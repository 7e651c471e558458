// Per-kernel HIP launch wrappers behind `launch` and `scratch_bytes`
// (kernels/hip/launch.hip dispatches on the kernel id). Internal to
// kernels/hip: host code calls only kernels/hip/launch.hpp.
//
// Each `*_scratch_bytes` returns the scratch its kernel needs and launches
// nothing; a kernel without one needs none. Each launch wrapper may assume
// `gpu::shapes_match(a)` and a scratch of at least that size, enqueues on
// `ctx.stream` and returns the first error.
#pragma once

#include <cstddef>

#include "kernels/hip/launch.hpp"

namespace cohort::kernels::hip {

/// Element-wise, no scratch.
hipError_t axpy(const gpu::launch_args& a, const stream_context& ctx);

/// Two-pass block reduction in double; scratch: one double per block.
hipError_t dot_scratch_bytes(const gpu::launch_args& a, size_t& bytes);
hipError_t dot(const gpu::launch_args& a, const stream_context& ctx);

/// Two-pass block reduction of squares in double; scratch as dot.
hipError_t nrm2_scratch_bytes(const gpu::launch_args& a, size_t& bytes);
hipError_t nrm2(const gpu::launch_args& a, const stream_context& ctx);

/// rocPRIM device reduction in double; scratch: its temporary storage.
hipError_t reduce_sum_scratch_bytes(const gpu::launch_args& a, size_t& bytes);
hipError_t reduce_sum(const gpu::launch_args& a, const stream_context& ctx);

/// rocPRIM device scan in double; scratch: its temporary storage.
hipError_t inclusive_scan_scratch_bytes(const gpu::launch_args& a,
                                        size_t& bytes);
hipError_t inclusive_scan(const gpu::launch_args& a, const stream_context& ctx);

/// One block per row (no hipBLAS in this build).
hipError_t gemv(const gpu::launch_args& a, const stream_context& ctx);

/// Shared-memory tiled GEMM (no hipBLAS in this build).
hipError_t gemm(const gpu::launch_args& a, const stream_context& ctx);

/// Norms, tiled GEMM, radix sort; scratch: kernels/gpu/topk_cosine_plan.hpp.
hipError_t topk_cosine_scratch_bytes(const gpu::launch_args& a, size_t& bytes);
hipError_t topk_cosine(const gpu::launch_args& a, const stream_context& ctx);

} // namespace cohort::kernels::hip
