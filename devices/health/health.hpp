// GPU health from the vendor's management library: NVML for NVIDIA (loaded
// with dlopen, so a machine without the driver still runs) and ROCm SMI for
// AMD. A monitor whose library is absent reports health as unavailable; that
// is not an error.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "messages/link_kind.hpp"

namespace cohort::devices::health {

/// One reading of a GPU's health counters.
struct gpu_sample {
  /// False when the library or the device cannot be read; then only
  /// `unavailable_reason` is meaningful.
  bool available = false;
  std::string unavailable_reason;
  /// False when the library does not report utilization (NVML on a GPU in
  /// MIG mode and its instances); the two percentages are then 0.
  bool utilization_known = true;
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
  /// The MIG GPU instance it concerns (NVML's gpuInstanceId), or
  /// `whole_gpu`: the whole GPU, or the library cannot say.
  static constexpr uint32_t whole_gpu = 0xFFFFFFFF;
  uint32_t gpu_instance = whole_gpu;
};

/// Whether `ev` concerns a device on GPU instance `gpu_instance` of its GPU
/// (gpu_event::whole_gpu: the whole GPU, which every event concerns): an
/// event of the whole GPU concerns all its instances, one of an instance
/// only that instance.
inline bool concerns(const gpu_event& ev, uint32_t gpu_instance) {
  return ev.gpu_instance == gpu_event::whole_gpu ||
         gpu_instance == gpu_event::whole_gpu ||
         ev.gpu_instance == gpu_instance;
}

/// One MIG instance of a GPU in MIG mode (a GPU instance and the compute
/// instance in it), as NVML reports it. CUDA runs on it in a process whose
/// CUDA_VISIBLE_DEVICES names its UUID.
struct mig_instance {
  /// Its index on its GPU (nvidia-smi's "MIG Device N").
  uint32_t index = 0;
  /// "MIG-" and a UUID.
  std::string uuid;
  /// The library's name for it, with its profile ("NVIDIA A100-SXM4-40GB
  /// MIG 1c.3g.20gb"); empty when it cannot say.
  std::string name;
  uint32_t gpu_instance_id = 0;
  uint32_t compute_instance_id = 0;
  /// Its GPU instance's memory, shared with the other compute instances of
  /// that GPU instance.
  uint64_t memory_bytes = 0;
  uint32_t multiprocessors = 0;
  /// Its share of the GPU: GPU instance slices (of 7 on A100 and H100),
  /// and compute instance slices.
  uint32_t gpu_slices = 0;
  uint32_t compute_slices = 0;
};

/// A GPU in MIG mode, with its instances.
struct mig_gpu {
  /// The library's index of the GPU (nvidia-smi's "GPU N").
  uint32_t index = 0;
  /// "0000:3b:00.0"; empty when it could not be read (then `problems`
  /// says why and `instances` is empty).
  std::string pci_bus_id;
  /// "GPU-" and a UUID; empty when unknown.
  std::string uuid;
  std::string model;
  /// "sm_90"; empty when the library cannot say.
  std::string arch;
  std::vector<mig_instance> instances;
  /// Why an instance of it was left out, one line each ("MIG device 2:
  /// nvmlDeviceGetAttributes_v2 failed: ...").
  std::vector<std::string> problems;
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

  /// The GPUs in MIG mode and their instances: empty when none is, or when
  /// the library cannot tell (it has no MIG, or lacks the calls).
  virtual std::vector<mig_gpu> mig_gpus() { return {}; }

  /// Reads a device's counters: the GPU at `pci_bus_id`, or when `uuid`
  /// names a MIG instance of it ("MIG-..."), that instance: its own memory,
  /// its GPU's temperature, power and ECC counts.
  virtual gpu_sample sample_device(const std::string& pci_bus_id,
                                   const std::string& uuid) {
    (void)uuid;
    return sample(pci_bus_id);
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
