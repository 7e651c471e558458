// The entry point of libcohort-cuda.so: the CUDA runtime for the core that
// loads it. Health comes from the core's NVML monitor.
#include "devices/cuda/cuda_api.hpp"
#include "devices/gpu/plugin.hpp"
#include "kernels/gpu/launch.hpp"

namespace {

const cohort::devices::gpu::plugin_entry cuda_entry{
    cohort::devices::gpu::plugin_abi,
    cohort::devices::gpu::plugin_build_id(),
    sizeof(cohort::kernels::gpu::launch_args),
    "CUDA",
    &cohort::devices::cuda::make_runtime_api,
    nullptr,
};

} // namespace

extern "C" __attribute__((visibility("default")))
const cohort::devices::gpu::plugin_entry*
cohort_gpu_plugin_v1() {
  return &cuda_entry;
}
