// GPU health from the vendor's management library: NVML for NVIDIA (loaded
// with dlopen, so a machine without the driver still runs) and ROCm SMI for
// AMD. A monitor whose library is absent reports health as unavailable; that
// is not an error.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "messages/link_kind.hpp"

namespace cohort::devices::health {

/// One reading of a GPU's health counters.
struct gpu_sample {
  /// False when the library or the device cannot be read; then only
  /// `unavailable_reason` is meaningful.
  bool available = false;
  std::string unavailable_reason;
  uint32_t gpu_util_percent = 0;
  uint32_t memory_util_percent = 0;
  uint64_t memory_used_bytes = 0;
  uint64_t memory_total_bytes = 0;
  /// Degrees Celsius; -1 when unknown.
  int32_t temperature_c = -1;
  /// Volatile ECC error counts (since the last driver load).
  uint64_t ecc_corrected = 0;
  uint64_t ecc_uncorrected = 0;
  /// Board power draw and the limit the board enforces, watts; -1 when
  /// unknown.
  double power_w = -1;
  double power_limit_w = -1;
  /// Where it comes from: "NVML", "ROCm SMI", or "simulated" (a simulated
  /// GPU's model, never a real reading).
  std::string source;
};

/// A sample as the node keeps it, with the wall-clock time it was taken.
struct timed_sample {
  int64_t wall_ns = 0;
  gpu_sample sample;
};

/// An Xid error a device reported, with the wall-clock time it was seen.
struct timed_xid {
  int64_t wall_ns = 0;
  uint32_t xid = 0;
};

/// A critical event the management library reported for a GPU.
struct gpu_event {
  enum class kind : uint8_t {
    /// An Xid error; `xid` holds the code.
    xid,
    /// A double-bit (uncorrectable) ECC error.
    ecc_uncorrectable,
    /// A single-bit (corrected) ECC error.
    ecc_corrected,
    /// The GPU fell off the bus or stopped answering.
    lost,
  };
  kind what = kind::xid;
  uint32_t xid = 0;
  std::string detail;
};

/// Health of the GPUs of one vendor. Thread-safe.
class gpu_monitor {
public:
  virtual ~gpu_monitor() = default;

  /// "NVML" or "ROCm SMI".
  virtual const char* library() const = 0;

  /// False when the library could not be loaded or initialized.
  virtual bool available() const = 0;

  /// Why `available()` is false (empty otherwise).
  virtual std::string unavailable_reason() const = 0;

  /// Reads the counters of the GPU at `pci_bus_id` ("0000:3b:00.0").
  virtual gpu_sample sample(const std::string& pci_bus_id) = 0;

  /// Calls `on_event` (from the monitor's own thread) for every critical
  /// event of the GPU at `pci_bus_id` until `unwatch` or destruction.
  /// Returns false when events cannot be watched for that GPU.
  virtual bool watch(const std::string& pci_bus_id,
                     std::function<void(gpu_event)> on_event) = 0;

  /// Stops delivering events of the GPU at `pci_bus_id`.
  virtual void unwatch(const std::string& pci_bus_id) = 0;

  /// The fastest direct path between the GPUs at bus ids `a` and `b`:
  /// `link_kind::none` when there is none, or when the library cannot say.
  virtual link_kind link_between(const std::string& a, const std::string& b) {
    (void)a;
    (void)b;
    return link_kind::none;
  }
};

/// Opens NVML with dlopen(`library`). Never fails: without the library the
/// monitor is unavailable and says why.
std::shared_ptr<gpu_monitor>
open_nvml(const std::string& library = "libnvidia-ml.so.1");

/// Opens ROCm SMI. Never fails; without an AMD driver it is unavailable.
/// Defined in the HIP plugin only (libcohort-hip.so, the plugin entry's
/// `make_monitor`): the core does not link ROCm SMI.
std::shared_ptr<gpu_monitor> open_rocm_smi();

} // namespace cohort::devices::health
