// Finds the real GPUs of this machine through every backend plugin that
// loads (CUDA, HIP; devices/gpu/plugin.hpp) and opens them as devices.
#pragma once

#include <functional>
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
  /// Its GPUs were listed: the plugin loaded and the runtime answered how
  /// many it has (none counts; a missing driver or another error does not),
  /// and its MIG instances too: its health library answered (MIG instances
  /// are listed through it). A rescan trusts a missing GPU only then.
  bool listed = false;
  bool mig_listed = false;
  /// Its health library (NVML, ROCm SMI); null without one. A GPU added
  /// later (a rescan) is watched through it.
  std::shared_ptr<health::gpu_monitor> monitor;
};

/// A GPU found and left unopened: a device host process opens it.
struct probed_gpu {
  device_info info;
  /// "CUDA" or "HIP", and its ordinal in that runtime.
  std::string vendor;
  int ordinal = 0;
  /// What the host process's CUDA_VISIBLE_DEVICES must be for `ordinal` to
  /// be this GPU: a MIG instance's UUID. Empty: the node's own.
  std::string visible;
  /// The backend's health library (NVML, ROCm SMI; null when the backend
  /// has none): the node reads the GPU's health and counts its Xids here
  /// while its host process watches it too.
  std::shared_ptr<health::gpu_monitor> monitor;
  /// A MIG instance's GPU instance on its GPU (the events of that GPU
  /// instance are its); gpu_event::whole_gpu for a GPU.
  uint32_t gpu_instance = health::gpu_event::whole_gpu;
};

struct discovery {
  /// GPUs opened in this process, and those only probed, in the order
  /// found (by backend, then ordinal) within each list.
  std::vector<std::shared_ptr<gpu_device>> devices;
  std::vector<probed_gpu> probed;
  /// Every GPU found (opened or probed) by name, in order.
  std::vector<std::string> order;
  std::vector<backend_status> backends;
  /// The direct paths between GPUs of one backend that its health library
  /// reports (NVML, ROCm SMI), one entry per pair.
  struct link {
    std::string a;
    std::string b;
    link_kind kind = link_kind::none;
  };
  std::vector<link> links;
};

/// The CUDA plugin's runtime, or null when the plugin did not load.
std::shared_ptr<api> cuda_runtime();

/// Whether `cuda_runtime` was called in this process: from then on
/// CUDA_VISIBLE_DEVICES no longer changes what CUDA shows.
bool cuda_runtime_made();

/// The HIP plugin's runtime, or null when the plugin did not load.
std::shared_ptr<api> hip_runtime();

/// Opens every GPU of every loaded plugin, named cuda0.., hip0... A machine
/// without GPUs, drivers or plugins yields none, with a note per backend.
/// With `open_here`, a GPU for which it says false (by name) is only probed
/// (its properties read: no stream, memory or context made here).
discovery
discover(const gpu_options& opts,
         const std::function<bool(const std::string&)>& open_here = nullptr);

/// Opens GPU `ordinal` of the `vendor` ("CUDA" or "HIP") plugin's runtime
/// as device `name`, with the backend's health library as discover does:
/// what a device host process does with the GPU its node named.
caf::expected<std::shared_ptr<gpu_device>> open_gpu(const std::string& vendor,
                                                    int ordinal,
                                                    const std::string& name,
                                                    gpu_options opts);

} // namespace cohort::devices::gpu
