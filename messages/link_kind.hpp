// How two GPUs of one machine reach each other directly. A header of its
// own, without CAF: the health libraries (devices/health/health.hpp), which
// GPU plugins build against, report it too.
#pragma once

#include <cstdint>

namespace cohort {

/// The fastest direct path between two GPUs; better paths compare greater.
enum class link_kind : uint8_t {
  /// None known: their copies go through host memory.
  none = 0,
  /// Peer-to-peer over PCIe.
  pcie = 1,
  /// A GPU fabric: NVLink on NVIDIA (directly or through NVSwitch), xGMI
  /// (Infinity Fabric) on AMD.
  fabric = 2,
};

} // namespace cohort
