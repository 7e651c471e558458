// The CUDA entry points: size the scratch and launch by kernel id.
#include "kernels/cuda/launch.hpp"

#include "kernels/cuda/wrappers.hpp"
#include "kernels/gpu/launch_checks.hpp"

namespace cohort::kernels::cuda {

cudaError_t scratch_bytes(const gpu::launch_args& a, size_t& bytes) {
  bytes = 0;
  if (!gpu::shapes_match(a))
    return cudaErrorInvalidValue;
  switch (a.id) {
  case kernel_id::axpy:
  case kernel_id::gemv:
  case kernel_id::gemm:
    return cudaSuccess;
  case kernel_id::dot:
    return dot_scratch_bytes(a, bytes);
  case kernel_id::nrm2:
    return nrm2_scratch_bytes(a, bytes);
  case kernel_id::reduce_sum:
    return reduce_sum_scratch_bytes(a, bytes);
  case kernel_id::inclusive_scan:
    return inclusive_scan_scratch_bytes(a, bytes);
  case kernel_id::topk_cosine:
    return topk_cosine_scratch_bytes(a, bytes);
  }
  return cudaErrorInvalidValue;
}

cudaError_t launch(const gpu::launch_args& a, const stream_context& ctx) {
  size_t need = 0;
  if (auto err = scratch_bytes(a, need); err != cudaSuccess)
    return err;
  if (need > 0 && (a.scratch == nullptr || a.scratch_bytes < need))
    return cudaErrorInvalidValue;
  switch (a.id) {
  case kernel_id::axpy:
    return axpy(a, ctx);
  case kernel_id::dot:
    return dot(a, ctx);
  case kernel_id::nrm2:
    return nrm2(a, ctx);
  case kernel_id::reduce_sum:
    return reduce_sum(a, ctx);
  case kernel_id::inclusive_scan:
    return inclusive_scan(a, ctx);
  case kernel_id::gemv:
    return gemv(a, ctx);
  case kernel_id::gemm:
    return gemm(a, ctx);
  case kernel_id::topk_cosine:
    return topk_cosine(a, ctx);
  }
  return cudaErrorInvalidValue;
}

} // namespace cohort::kernels::cuda
