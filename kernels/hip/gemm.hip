// gemm on HIP (no hipBLAS in this build): the shared-memory tiled GEMM,
// accumulating in float like BLAS. With k = 0 it writes zeros.
#include "kernels/gpu/dense_device.hpp"
#include "kernels/hip/wrappers.hpp"

namespace cohort::kernels::hip {

hipError_t gemm(const gpu::launch_args& a, const stream_context& ctx) {
  const uint64_t m = a.args.m;
  const uint64_t n = a.args.n;
  const uint64_t k = a.args.k;
  if (m == 0 || n == 0)
    return hipSuccess;
  const dim3 grid{gpu::gemm_blocks(n), gpu::gemm_blocks(m)};
  const dim3 block{gpu::gemm_side, gpu::gemm_side};
  gpu::gemm_tiles<false><<<grid, block, 0, ctx.stream>>>(
      m, n, k, a.in[0], a.in[1], gpu::store_matrix{a.out, n});
  return hipGetLastError();
}

} // namespace cohort::kernels::hip
