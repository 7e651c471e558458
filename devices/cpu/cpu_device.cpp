#include "devices/cpu/cpu_device.hpp"

namespace cohort::devices::cpu {

namespace {

device_info make_info(uint32_t index, int32_t numa_node, std::string model) {
  device_info info;
  info.name = "cpu" + std::to_string(index);
  info.kind = device_kind::cpu;
  info.simulated = false;
  info.model = std::move(model);
  info.streams = 1;
  info.speed = 1.0;
  info.cores = 1;
  info.numa_node = numa_node;
  return info;
}

} // namespace

cpu_device::cpu_device(uint32_t index, int32_t numa_node, std::string model)
    : device(make_info(index, numa_node, std::move(model))) {
  // nop
}

caf::expected<launch_result>
cpu_device::do_launch(uint32_t, uint64_t, kernels::kernel_id id,
                      const kernels::kernel_args& args,
                      kernels::typed_inputs inputs, const memory::owner_tag&) {
  auto start = std::chrono::steady_clock::now();
  launch_result res;
  res.output = kernels::run_cpu(id, args, inputs, kernel_timeout(id));
  res.device_time = std::chrono::steady_clock::now() - start;
  return res;
}

caf::error cpu_device::do_health() {
  return caf::none;
}

caf::error cpu_device::do_reset() {
  return caf::none;
}

std::shared_ptr<cpu_device> make_cpu_device(uint32_t index, int32_t numa_node,
                                            std::string model) {
  return std::make_shared<cpu_device>(index, numa_node, std::move(model));
}

} // namespace cohort::devices::cpu
