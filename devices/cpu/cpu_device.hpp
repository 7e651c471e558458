// A CPU worker: one core running the optimized CPU kernels.
#pragma once

#include <memory>

#include "devices/device.hpp"

namespace cohort::devices::cpu {

/// One CPU worker. Launches run synchronously on the calling thread and report
/// measured wall time. Host memory is not device memory: it is not pooled or
/// metered here (tenants' in-flight caps bound it).
class cpu_device final : public device {
public:
  /// `index` names it ("cpu0"); `numa_node` comes from the hwloc topology.
  cpu_device(uint32_t index, int32_t numa_node, std::string model);

private:
  caf::expected<launch_result> do_launch(uint32_t stream, uint64_t ticket,
                                         kernels::kernel_id id,
                                         const kernels::kernel_args& args,
                                         kernels::typed_inputs inputs,
                                         const memory::owner_tag&) override;
  caf::error do_health() override;
  caf::error do_reset() override;
};

/// Makes CPU worker `index`.
std::shared_ptr<cpu_device> make_cpu_device(uint32_t index, int32_t numa_node,
                                            std::string model);

} // namespace cohort::devices::cpu
