// gemv on CUDA through cuBLAS. Row-major A (m x n) is column-major A^T
// (n x m, leading dimension n), so y = A x is cublasSgemv with CUBLAS_OP_T.
#include <climits>

#include "kernels/cuda/cublas_status.hpp"
#include "kernels/cuda/wrappers.hpp"

namespace cohort::kernels::cuda {

cudaError_t gemv(const gpu::launch_args& a, const stream_context& ctx) {
  const uint64_t m = a.args.m;
  const uint64_t n = a.args.n;
  if (m == 0)
    return cudaSuccess;
  // BLAS returns without touching y when n is 0; the sums are 0.
  if (n == 0)
    return cudaMemsetAsync(a.out, 0, m * sizeof(float), ctx.stream);
  if (ctx.blas == nullptr)
    return cudaErrorInitializationError;
  if (m > INT_MAX || n > INT_MAX)
    return cudaErrorInvalidValue;
  // alpha and beta live on the host.
  if (auto st = cublasSetPointerMode(ctx.blas, CUBLAS_POINTER_MODE_HOST);
      st != CUBLAS_STATUS_SUCCESS)
    return from_cublas(st);
  const float one = 1.0f;
  const float zero = 0.0f;
  return from_cublas(cublasSgemv(
      ctx.blas, CUBLAS_OP_T, static_cast<int>(n), static_cast<int>(m), &one,
      a.in[0], static_cast<int>(n), a.in[1], 1, &zero, a.out, 1));
}

} // namespace cohort::kernels::cuda
