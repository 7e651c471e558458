// inclusive_scan on HIP: rocPRIM's device scan over the input widened to
// double (rocPRIM accumulates in the input's type), so the running sums are
// carried in double; each prefix is rounded once to float when stored.
// rocPRIM 5.3's headers (Debian) use std::cout without including <iostream>.
#include <iostream>

#include <rocprim/device/device_scan.hpp>
#include <rocprim/functional.hpp>
#include <rocprim/iterator/transform_iterator.hpp>

#include "kernels/hip/wrappers.hpp"

namespace cohort::kernels::hip {

namespace {

using widened = rocprim::transform_iterator<const float*,
                                            rocprim::identity<double>, double>;

hipError_t scan(void* temp, size_t& temp_bytes, const gpu::launch_args& a,
                hipStream_t stream) {
  return rocprim::inclusive_scan(temp, temp_bytes, widened{a.in[0], {}}, a.out,
                                 a.in_len[0], rocprim::plus<double>{}, stream);
}

} // namespace

hipError_t inclusive_scan_scratch_bytes(const gpu::launch_args& a,
                                        size_t& bytes) {
  bytes = 0;
  if (a.in_len[0] == 0)
    return hipSuccess;
  return scan(nullptr, bytes, a, nullptr);
}

hipError_t inclusive_scan(const gpu::launch_args& a,
                          const stream_context& ctx) {
  if (a.in_len[0] == 0)
    return hipSuccess;
  size_t bytes = a.scratch_bytes;
  return scan(a.scratch, bytes, a, ctx.stream);
}

} // namespace cohort::kernels::hip
