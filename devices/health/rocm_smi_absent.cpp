// open_rocm_smi() when the HIP backend is not built (no hipcc or no ROCm
// SMI at configure time): the monitor says so instead of failing.
#include "devices/health/health.hpp"
#include "devices/health/unavailable.hpp"

namespace cohort::devices::health {

std::shared_ptr<gpu_monitor> open_rocm_smi() {
  return std::make_shared<unavailable_monitor>(
      "ROCm SMI", "ROCm SMI: the HIP backend was not built");
}

} // namespace cohort::devices::health
