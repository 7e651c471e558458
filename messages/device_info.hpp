// What a device is: the plain C++ form of `cohort.pb.DeviceInfo`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <caf/error.hpp>
#include <caf/meta/load_callback.hpp>
#include <caf/meta/type_name.hpp>
#include <caf/sec.hpp>

#include "messages/link_kind.hpp"

namespace cohort {

/// The kind of backend behind a device.
enum class device_kind : uint8_t {
  /// A CPU worker running the optimized CPU kernels.
  cpu = 1,
  /// A simulated GPU (CPU kernels, modeled time, injectable faults).
  sim_gpu = 2,
  /// An NVIDIA GPU through CUDA.
  cuda_gpu = 3,
  /// An AMD GPU through HIP.
  hip_gpu = 4,
};

/// Returns "cpu", "sim", "cuda" or "hip".
const char* to_string(device_kind kind);

/// Returns "NVLink" or "xGMI" for a fabric (by the GPUs' vendor: xGMI on
/// HIP GPUs), "PCIe P2P", or "none".
const char* to_string(link_kind kind, device_kind of);

/// Another GPU of the same machine that a GPU reaches directly
/// (docs/placement.md, "Links between GPUs").
struct device_link {
  /// The other GPU's device name.
  std::string peer;
  link_kind kind = link_kind::none;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, device_link& x) {
  auto kind = static_cast<uint8_t>(x.kind);
  auto load = caf::meta::load_callback([&]() -> caf::error {
    if (kind > static_cast<uint8_t>(link_kind::fabric))
      return caf::make_error(caf::sec::invalid_argument, "bad link kind");
    x.kind = static_cast<link_kind>(kind);
    return caf::none;
  });
  return f(caf::meta::type_name("device_link"), x.peer, kind, load);
}

/// Static facts about a device.
struct device_info {
  std::string name;
  device_kind kind = device_kind::cpu;
  /// True for simulated devices; every output says so.
  bool simulated = false;
  std::string model;
  uint64_t memory_bytes = 0;
  uint32_t streams = 1;
  /// Relative speed (simulated devices: the modeled speed factor).
  double speed = 1.0;
  uint32_t cores = 0;
  int32_t numa_node = -1;
  /// GPUs: PCI bus id ("0000:3b:00.0"), UUID, architecture ("sm_90",
  /// "gfx90a") and multiprocessors (SMs on NVIDIA, CUs on AMD).
  std::string pci_bus_id;
  std::string uuid;
  std::string arch;
  uint32_t multiprocessors = 0;
  /// Bytes of inputs it keeps between launches by identity (an input
  /// cache, least recently used out; 0: it copies every input every time).
  uint64_t input_cache_bytes = 0;
  /// Runs in a host process of its own, not in the node's process
  /// (docs/device-hosts.md).
  bool host_process = false;
  /// Runs on a remote device host, another machine's `cohort device-host
  /// --listen`: its HOST:PORT (docs/device-hosts.md). Empty: on this
  /// machine.
  std::string remote;
  /// GPUs: the other GPUs of its machine it reaches directly, by NVML or
  /// ROCm SMI (simulated GPUs: as configured). Gang placement prefers sets
  /// linked by a fabric (docs/placement.md). Set before its actor starts.
  std::vector<device_link> links;

  /// How it reaches `peer`: `link_kind::none` when not directly.
  link_kind link_to(const std::string& peer) const {
    for (auto& l : links)
      if (l.peer == peer)
        return l.kind;
    return link_kind::none;
  }

  /// Runs outside the node's process (a host process or a remote host):
  /// its memory cannot be mapped here.
  bool elsewhere() const { return host_process || !remote.empty(); }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, device_info& x) {
  auto kind = static_cast<uint8_t>(x.kind);
  auto load = caf::meta::load_callback([&]() -> caf::error {
    x.kind = static_cast<device_kind>(kind);
    return caf::none;
  });
  return f(caf::meta::type_name("device_info"), x.name, kind, x.simulated,
           x.model, x.memory_bytes, x.streams, x.speed, x.cores, x.numa_node,
           x.pci_bus_id, x.uuid, x.arch, x.multiprocessors, x.input_cache_bytes,
           x.host_process, x.remote, x.links, load);
}

} // namespace cohort
