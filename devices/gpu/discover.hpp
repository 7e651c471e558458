// Finds the real GPUs of this machine through every backend plugin that
// loads (CUDA, HIP; devices/gpu/plugin.hpp) and opens them as devices.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "devices/gpu/gpu_device.hpp"

namespace cohort::devices::gpu {

/// What one backend found.
struct backend_status {
  /// "CUDA" or "HIP".
  std::string vendor;
  /// True when its plugin loaded and made a runtime.
  bool loaded = false;
  /// The plugin's path when loaded, its file name otherwise.
  std::string plugin;
  /// GPUs opened.
  int count = 0;
  /// Why there are none (the plugin's load error, the driver's answer), or
  /// what the health library said.
  std::string note;
};

struct discovery {
  std::vector<std::shared_ptr<gpu_device>> devices;
  std::vector<backend_status> backends;
};

/// The CUDA plugin's runtime, or null when the plugin did not load.
std::shared_ptr<api> cuda_runtime();

/// The HIP plugin's runtime, or null when the plugin did not load.
std::shared_ptr<api> hip_runtime();

/// Opens every GPU of every loaded plugin, named cuda0.., hip0... A machine
/// without GPUs, drivers or plugins yields none, with a note per backend.
discovery discover(const gpu_options& opts);

} // namespace cohort::devices::gpu
