// nrm2 on CUDA: the sum of squares as a two-pass block reduction in double,
// its square root in double, rounded once to float.
#include "kernels/cuda/wrappers.hpp"
#include "kernels/gpu/blas1_device.hpp"

namespace cohort::kernels::cuda {

cudaError_t nrm2_scratch_bytes(const gpu::launch_args& a, size_t& bytes) {
  bytes = gpu::reduction_scratch_bytes(a.in_len[0]);
  return cudaSuccess;
}

cudaError_t nrm2(const gpu::launch_args& a, const stream_context& ctx) {
  const uint64_t n = a.in_len[0];
  const unsigned blocks = gpu::reduction_blocks(n);
  auto* partial = static_cast<double*>(a.scratch);
  gpu::partial_sums<<<blocks, gpu::block_threads, 0, ctx.stream>>>(
      n, gpu::square_term{a.in[0]}, partial);
  if (auto err = cudaGetLastError(); err != cudaSuccess)
    return err;
  gpu::finish_sum<<<1, gpu::block_threads, 0, ctx.stream>>>(
      partial, blocks, gpu::root_sum{}, a.out);
  return cudaGetLastError();
}

} // namespace cohort::kernels::cuda
