// The vendor runtime that device code shared by the CUDA and HIP kernels
// needs (__global__, __shared__, threadIdx, __syncthreads, ...): HIP when
// hipcc compiles, CUDA otherwise. COHORT_GPU_EMULATION means the includer
// already provides them: tests/kernels/emulated_gpu.hpp, a CPU emulation that
// only the tests use.
#pragma once

#if defined(COHORT_GPU_EMULATION)
#elif defined(__HIPCC__)
#include <hip/hip_runtime.h>
#else
#include <cuda_runtime.h>
#endif
