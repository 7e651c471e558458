// The entry point of libcohort-hip.so: the HIP runtime and the ROCm SMI
// health monitor for the core that loads it.
#include "devices/gpu/plugin.hpp"
#include "devices/hip/hip_api.hpp"

namespace {

const auto hip_entry = cohort::devices::gpu::make_plugin_entry(
    "HIP", &cohort::devices::hip::make_runtime_api,
    &cohort::devices::health::open_rocm_smi);

} // namespace

extern "C" __attribute__((visibility("default")))
const cohort::devices::gpu::plugin_entry*
cohort_gpu_plugin_v1() {
  return &hip_entry;
}
