// gemm on CUDA through cuBLAS. Row-major C = A B is column-major
// C^T = B^T A^T, and a row-major matrix is its column-major transpose, so
// C = A B is cublasSgemm(N, N, n, m, k, B, ldb = n, A, lda = k, C, ldc = n).
#include <climits>

#include "kernels/cuda/cublas_status.hpp"
#include "kernels/cuda/wrappers.hpp"

namespace cohort::kernels::cuda {

cudaError_t gemm(const gpu::launch_args& a, const stream_context& ctx) {
  const uint64_t m = a.args.m;
  const uint64_t n = a.args.n;
  const uint64_t k = a.args.k;
  if (m == 0 || n == 0)
    return cudaSuccess;
  // An empty inner dimension: C is 0 (and cuBLAS rejects lda = k = 0).
  if (k == 0)
    return cudaMemsetAsync(a.out, 0, m * n * sizeof(float), ctx.stream);
  if (ctx.blas == nullptr)
    return cudaErrorInitializationError;
  if (m > INT_MAX || n > INT_MAX || k > INT_MAX)
    return cudaErrorInvalidValue;
  // alpha and beta live on the host.
  if (auto st = cublasSetPointerMode(ctx.blas, CUBLAS_POINTER_MODE_HOST);
      st != CUBLAS_STATUS_SUCCESS)
    return from_cublas(st);
  const float one = 1.0f;
  const float zero = 0.0f;
  const int rows = static_cast<int>(m);
  const int cols = static_cast<int>(n);
  const int inner = static_cast<int>(k);
  return from_cublas(cublasSgemm(ctx.blas, CUBLAS_OP_N, CUBLAS_OP_N, cols, rows,
                                 inner, &one, a.in[1], cols, a.in[0], inner,
                                 &zero, a.out, cols));
}

} // namespace cohort::kernels::cuda
