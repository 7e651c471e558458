// gemv on HIP (no hipBLAS in this build): one block per row adds the row's
// products in double and rounds once to float.
#include "kernels/gpu/dense_device.hpp"
#include "kernels/hip/wrappers.hpp"

namespace cohort::kernels::hip {

hipError_t gemv(const gpu::launch_args& a, const stream_context& ctx) {
  const uint64_t m = a.args.m;
  const uint64_t n = a.args.n;
  if (m == 0)
    return hipSuccess;
  gpu::row_sums<<<gpu::row_blocks(m), gpu::block_threads, 0, ctx.stream>>>(
      m, n, gpu::gemv_term{a.in[0], a.in[1], n}, gpu::store_sum{a.out});
  return hipGetLastError();
}

} // namespace cohort::kernels::hip
