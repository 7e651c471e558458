#include "tools/version.hpp"

#include "devices/gpu/plugin.hpp"
#include "tools/version_commit.hpp"

namespace cohort::tools {

const char* version() {
  return COHORT_VERSION;
}

const char* build_commit() {
  return COHORT_GIT_COMMIT;
}

std::string version_text() {
  std::string out =
      std::string{"cohort "} + version() + " (commit " + build_commit() + ")\n";
  out += std::string{"built by C++ "} + __VERSION__ + ", plugin ABI " +
         std::to_string(devices::gpu::plugin_abi) + "\n";
  out += "GPU plugins:\n";
  // Loading a plugin opens its vendor's libraries but no device: this
  // answers on a machine whose GPUs are busy or absent.
  for (const char* vendor : {"CUDA", "HIP"}) {
    auto& p = devices::gpu::plugin(vendor);
    out += std::string{"  "} + vendor + ": ";
    out += p.entry != nullptr ? p.path : "none (" + p.note + ")";
    out += "\n";
  }
  return out;
}

} // namespace cohort::tools
