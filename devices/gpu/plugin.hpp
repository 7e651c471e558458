// GPU backends as plugins: the CUDA and HIP backends are shared objects
// (libcohort-cuda.so, libcohort-hip.so) loaded with dlopen when a process
// first looks for GPUs, so the core library links no vendor library and a
// machine without CUDA or ROCm runs everything else. A plugin exports one C
// function, `cohort_gpu_plugin_v1`, returning a `plugin_entry`.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "devices/gpu/api.hpp"
#include "devices/health/health.hpp"

namespace cohort::devices::gpu {

/// Bumped whenever `api`, `launch_args`, `properties`, `plugin_entry` or
/// `health::gpu_monitor` change shape: a plugin built against another value
/// is refused.
inline constexpr uint32_t plugin_abi = 6;

/// The build a plugin and the core must share: the C++ types cross the
/// boundary (std::string, std::shared_ptr), so the compiler must match.
inline const char* plugin_build_id() {
  return "cohort gpu plugin abi 6, C++ " __VERSION__;
}

/// The name of the function a plugin exports.
inline constexpr const char* plugin_symbol = "cohort_gpu_plugin_v1";

/// What a plugin hands the core. Static storage in the plugin.
struct plugin_entry {
  /// `plugin_abi` of the plugin's build.
  uint32_t abi = 0;
  /// `plugin_build_id()` of the plugin's build.
  const char* build_id = nullptr;
  /// sizeof(kernels::gpu::launch_args) in the plugin's build.
  uint32_t launch_args_size = 0;
  /// "CUDA" or "HIP".
  const char* vendor = nullptr;
  /// The vendor runtime. Called once per process.
  std::shared_ptr<api> (*make_runtime)() = nullptr;
  /// The vendor's health library; null when the core's own serves (NVML,
  /// which the core loads with dlopen itself).
  std::shared_ptr<health::gpu_monitor> (*make_monitor)() = nullptr;
};

/// The entry of a plugin of this build: the fields the core checks are
/// filled in here, from the same header the core checks them against.
inline plugin_entry
make_plugin_entry(const char* vendor, std::shared_ptr<api> (*make_runtime)(),
                  std::shared_ptr<health::gpu_monitor> (*make_monitor)()) {
  return {plugin_abi, plugin_build_id(), sizeof(kernels::gpu::launch_args),
          vendor,     make_runtime,      make_monitor};
}

/// The outcome of looking for one vendor's plugin.
struct plugin_load {
  /// "CUDA" or "HIP".
  std::string vendor;
  /// "libcohort-cuda.so".
  std::string file;
  /// Where it was loaded from; empty when it was not.
  std::string path;
  /// Null when the plugin was not found, did not load or was refused.
  const plugin_entry* entry = nullptr;
  /// Why not (the folders searched, dlerror's text, the mismatch).
  std::string note;
};

/// "libcohort-cuda.so" for "CUDA".
std::string plugin_file(const std::string& vendor);

/// Where plugins are looked for, in order: the folders of
/// COHORT_PLUGIN_PATH (colon-separated), then `cohort/` next to the library
/// holding the core (libdir/cohort once installed) or the same folder
/// reached from a program in bindir, then, for a core inside its build tree,
/// that tree's devices/ folder, then the folder this build installs them to
/// and the Debian packages' (/usr/lib/MULTIARCH/cohort).
std::vector<std::string> plugin_dirs();

/// Looks for `vendor`'s plugin in `dirs` (first file found wins), loads it
/// and checks its ABI. Never throws; a plugin that is not loaded says why.
/// A loaded plugin stays loaded for the life of the process.
plugin_load load_plugin(const std::string& vendor,
                        const std::vector<std::string>& dirs);

/// `load_plugin(vendor, plugin_dirs())`, done once per process.
const plugin_load& plugin(const std::string& vendor);

} // namespace cohort::devices::gpu
