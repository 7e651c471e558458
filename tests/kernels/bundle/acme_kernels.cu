// GPU kernels of the test bundles, against include/cohort/kernel_abi.h: what
// a bundle's author compiles to PTX (nvcc -ptx) or a HIP code object
// (hipcc --genco -x hip). One thread per element; each checks its index.
#include <stdint.h>

#ifdef __HIPCC__
#include <hip/hip_runtime.h>
#endif

#include "cohort/kernel_abi.h"

// z = alpha * x + y, in double precision.
extern "C" __global__ void acme_scale_add_gpu(cohort_gpu_call call) {
  uint64_t i = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= call.output_length)
    return;
  const double* x = static_cast<const double*>(call.inputs[0]);
  const double* y = static_cast<const double*>(call.inputs[1]);
  static_cast<double*>(call.output)[i] = call.alpha * x[i] + y[i];
}

// Counts of each byte value: 256 int64 bins (zeroed by Cohort).
extern "C" __global__ void acme_histogram_gpu(cohort_gpu_call call) {
  uint64_t i = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= call.lengths[0])
    return;
  const uint8_t* in = static_cast<const uint8_t*>(call.inputs[0]);
  auto* bins = static_cast<unsigned long long*>(call.output);
  atomicAdd(&bins[in[i]], 1ull);
}
