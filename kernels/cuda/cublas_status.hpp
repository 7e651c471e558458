// cuBLAS statuses as CUDA errors, so the wrappers report one error type.
// Internal to kernels/cuda.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

namespace cohort::kernels::cuda {

/// Maps a cuBLAS status onto the closest CUDA error.
inline cudaError_t from_cublas(cublasStatus_t st) {
  switch (st) {
  case CUBLAS_STATUS_SUCCESS:
    return cudaSuccess;
  case CUBLAS_STATUS_ALLOC_FAILED:
    return cudaErrorMemoryAllocation;
  case CUBLAS_STATUS_EXECUTION_FAILED:
    return cudaErrorLaunchFailure;
  case CUBLAS_STATUS_NOT_INITIALIZED:
    return cudaErrorInitializationError;
  case CUBLAS_STATUS_INVALID_VALUE:
    return cudaErrorInvalidValue;
  default:
    return cudaErrorUnknown;
  }
}

} // namespace cohort::kernels::cuda
