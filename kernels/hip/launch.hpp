// Launch wrappers of the HIP kernels (kernels/hip/*.hip). Host code calls only
// these; each returns the HIP error of its launch and never synchronizes.
#pragma once

#include <cstddef>

#ifndef __HIP_PLATFORM_AMD__
#define __HIP_PLATFORM_AMD__
#endif
#include <hip/hip_runtime_api.h>

#include "kernels/gpu/launch.hpp"

namespace cohort::kernels::hip {

/// Per-stream handles the wrappers may use.
struct stream_context {
  hipStream_t stream = nullptr;
};

/// Device scratch bytes `launch` needs for `a` (its pointers may be null).
hipError_t scratch_bytes(const gpu::launch_args& a, size_t& bytes);

/// Enqueues the kernel on `ctx.stream`.
hipError_t launch(const gpu::launch_args& a, const stream_context& ctx);

} // namespace cohort::kernels::hip
