// The HIP runtime behind gpu::api (libamdhip64). Compiled only when hipcc and
// the HIP/ROCm development packages are found.
#pragma once

#include <memory>

#ifndef __HIP_PLATFORM_AMD__
#define __HIP_PLATFORM_AMD__
#endif
#include <hip/hip_runtime_api.h>

#include "devices/gpu/api.hpp"

namespace cohort::devices::hip {

/// Sorts a HIP error into what the host logic acts on.
gpu::status classify(hipError_t err);

/// The HIP runtime, shared by every HIP device of the process.
std::shared_ptr<gpu::api> make_runtime_api();

} // namespace cohort::devices::hip
