// A GPU plugin for tests: libcohort-cuda.so over the fake runtime
// (tests/devices/fake_gpu.hpp), two fake GPUs. Built twice: as it should be
// (tests/plugins/fake_cuda/) and with the wrong ABI (tests/plugins/bad_abi/),
// so the loader's whole path runs on machines without a GPU.
#include "devices/gpu/plugin.hpp"
#include "tests/devices/fake_gpu.hpp"

#ifndef FAKE_PLUGIN_ABI
#define FAKE_PLUGIN_ABI cohort::devices::gpu::plugin_abi
#endif

namespace {

std::shared_ptr<cohort::devices::gpu::api> make_fake() {
  cohort::testing::fake_device_spec a;
  a.name = "Fake GPU (test plugin)";
  a.pci_bus_id = "0000:98:00.0";
  auto b = a;
  b.pci_bus_id = "0000:99:00.0";
  return std::make_shared<cohort::testing::fake_gpu_api>(
      std::vector<cohort::testing::fake_device_spec>{a, b});
}

cohort::devices::gpu::plugin_entry make_entry() {
  auto e = cohort::devices::gpu::make_plugin_entry("CUDA", &make_fake, nullptr);
  e.abi = FAKE_PLUGIN_ABI;
  return e;
}

const auto fake_entry = make_entry();

} // namespace

extern "C" __attribute__((visibility("default")))
const cohort::devices::gpu::plugin_entry*
cohort_gpu_plugin_v1() {
  return &fake_entry;
}
