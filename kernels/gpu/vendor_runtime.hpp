// The vendor runtime that device code shared by the CUDA and HIP kernels
// needs (__global__, __shared__, threadIdx, __syncthreads, ...): HIP when
// hipcc compiles, CUDA otherwise.
#pragma once

#if defined(__HIPCC__)
#include <hip/hip_runtime.h>
#else
#include <cuda_runtime.h>
#endif
