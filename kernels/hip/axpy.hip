// axpy on HIP: out = alpha * x + y in one grid-stride pass.
#include "kernels/gpu/blas1_device.hpp"
#include "kernels/hip/wrappers.hpp"

namespace cohort::kernels::hip {

hipError_t axpy(const gpu::launch_args& a, const stream_context& ctx) {
  const uint64_t n = a.in_len[0];
  if (n == 0)
    return hipSuccess;
  gpu::for_each_index<<<gpu::elementwise_blocks(n), gpu::block_threads, 0,
                        ctx.stream>>>(
      n, gpu::axpy_op{a.args.alpha, a.in[0], a.in[1], a.out});
  return hipGetLastError();
}

} // namespace cohort::kernels::hip
