// inclusive_scan on CUDA: CUB's device scan with a double accumulator (the
// double initial value 0 makes plus<double> carry the running sums in
// double); each prefix is rounded once to float when stored.
#include <cub/device/device_scan.cuh>
#include <cuda/std/functional>

#include "kernels/cuda/wrappers.hpp"

namespace cohort::kernels::cuda {

cudaError_t inclusive_scan_scratch_bytes(const gpu::launch_args& a,
                                         size_t& bytes) {
  bytes = 0;
  const uint64_t n = a.in_len[0];
  if (n == 0)
    return cudaSuccess;
  return cub::DeviceScan::InclusiveScanInit(
      nullptr, bytes, a.in[0], a.out, ::cuda::std::plus<double>{}, 0.0, n);
}

cudaError_t inclusive_scan(const gpu::launch_args& a,
                           const stream_context& ctx) {
  const uint64_t n = a.in_len[0];
  if (n == 0)
    return cudaSuccess;
  size_t bytes = a.scratch_bytes;
  return cub::DeviceScan::InclusiveScanInit(a.scratch, bytes, a.in[0], a.out,
                                            ::cuda::std::plus<double>{}, 0.0, n,
                                            ctx.stream);
}

} // namespace cohort::kernels::cuda
