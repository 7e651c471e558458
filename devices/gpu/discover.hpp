// Finds the real GPUs of this machine through every backend that was built
// (CUDA, HIP) and opens them as devices.
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
  /// False when its toolchain was missing at build time.
  bool built = false;
  /// GPUs opened.
  int count = 0;
  /// Why there are none, or what the health library said.
  std::string note;
};

struct discovery {
  std::vector<std::shared_ptr<gpu_device>> devices;
  std::vector<backend_status> backends;
};

/// The CUDA runtime, or null when the CUDA backend was not built.
std::shared_ptr<api> cuda_runtime();

/// The HIP runtime, or null when the HIP backend was not built.
std::shared_ptr<api> hip_runtime();

/// Opens every GPU of every built backend, named cuda0.., hip0... A machine
/// without GPUs (or without drivers) yields none, with a note per backend.
discovery discover(const gpu_options& opts);

} // namespace cohort::devices::gpu
