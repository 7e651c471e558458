#include "devices/gpu/bundle_isolation.hpp"

#include <unistd.h>

#include <filesystem>

#include "devices/gpu/plugin.hpp"

namespace cohort::devices::gpu {

kernels::bundle::isolation bundle_isolation(std::chrono::milliseconds timeout) {
  kernels::bundle::isolation iso;
  iso.timeout = timeout;
  for (auto& dir : plugin_dirs()) {
    auto candidate =
        std::filesystem::path{dir} / kernels::bundle::probe_program;
    if (::access(candidate.c_str(), X_OK) == 0) {
      iso.helper = candidate.string();
      auto host = std::filesystem::path{dir} / kernels::bundle::host_program;
      if (::access(host.c_str(), X_OK) == 0)
        iso.host = host.string();
      break;
    }
    iso.searched += (iso.searched.empty() ? "" : ", ") + dir;
  }
  for (const char* vendor : {"CUDA", "HIP"})
    if (auto& p = plugin(vendor); p.entry != nullptr)
      iso.plugins[vendor] = p.path;
  return iso;
}

} // namespace cohort::devices::gpu
