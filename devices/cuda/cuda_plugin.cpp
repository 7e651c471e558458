// The entry point of libcohort-cuda.so: the CUDA runtime for the core that
// loads it. Health comes from the core's NVML monitor.
#include "devices/cuda/cuda_api.hpp"
#include "devices/gpu/plugin.hpp"

namespace {

const auto cuda_entry = cohort::devices::gpu::make_plugin_entry(
    "CUDA", &cohort::devices::cuda::make_runtime_api, nullptr);

} // namespace

extern "C" __attribute__((visibility("default")))
const cohort::devices::gpu::plugin_entry*
cohort_gpu_plugin_v1() {
  return &cuda_entry;
}
