// reduce_sum on CUDA: CUB's device reduction with a double accumulator (the
// double initial value makes plus<double> accumulate in double); CUB rounds
// the total to float when it stores it.
#include <cub/device/device_reduce.cuh>
#include <cuda/std/functional>

#include "kernels/cuda/wrappers.hpp"

namespace cohort::kernels::cuda {

cudaError_t reduce_sum_scratch_bytes(const gpu::launch_args& a, size_t& bytes) {
  bytes = 0;
  const uint64_t n = a.in_len[0];
  if (n == 0)
    return cudaSuccess;
  return cub::DeviceReduce::Reduce(nullptr, bytes, a.in[0], a.out, n,
                                   ::cuda::std::plus<double>{}, 0.0);
}

cudaError_t reduce_sum(const gpu::launch_args& a, const stream_context& ctx) {
  const uint64_t n = a.in_len[0];
  if (n == 0)
    return cudaMemsetAsync(a.out, 0, sizeof(float), ctx.stream);
  size_t bytes = a.scratch_bytes;
  return cub::DeviceReduce::Reduce(a.scratch, bytes, a.in[0], a.out, n,
                                   ::cuda::std::plus<double>{}, 0.0,
                                   ctx.stream);
}

} // namespace cohort::kernels::cuda
