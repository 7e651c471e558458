// The CUDA runtime behind gpu::api: cudart (linked statically) and cuBLAS,
// one cuBLAS handle per stream. Compiled only when nvcc and the CUDA
// libraries are found.
#pragma once

#include <memory>

#include <cuda_runtime_api.h>

#include "devices/gpu/api.hpp"

namespace cohort::devices::cuda {

/// Sorts a CUDA error into what the host logic acts on.
gpu::status classify(cudaError_t err);

/// The CUDA runtime, shared by every CUDA device of the process.
std::shared_ptr<gpu::api> make_runtime_api();

} // namespace cohort::devices::cuda
