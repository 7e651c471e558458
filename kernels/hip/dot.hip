// dot on HIP: a two-pass block reduction in double (partial sums per block,
// then one block adds them up and rounds once to float).
#include "kernels/gpu/blas1_device.hpp"
#include "kernels/hip/wrappers.hpp"

namespace cohort::kernels::hip {

hipError_t dot_scratch_bytes(const gpu::launch_args& a, size_t& bytes) {
  bytes = gpu::reduction_scratch_bytes(a.in_len[0]);
  return hipSuccess;
}

hipError_t dot(const gpu::launch_args& a, const stream_context& ctx) {
  const uint64_t n = a.in_len[0];
  const unsigned blocks = gpu::reduction_blocks(n);
  auto* partial = static_cast<double*>(a.scratch);
  gpu::partial_sums<<<blocks, gpu::block_threads, 0, ctx.stream>>>(
      n, gpu::dot_term{a.in[0], a.in[1]}, partial);
  if (auto err = hipGetLastError(); err != hipSuccess)
    return err;
  gpu::finish_sum<<<1, gpu::block_threads, 0, ctx.stream>>>(
      partial, blocks, gpu::round_sum{}, a.out);
  return hipGetLastError();
}

} // namespace cohort::kernels::hip
