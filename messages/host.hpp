// What a node's supervisor tells a device host process when it reaches it
// (docs/device-hosts.md): the settings of the device actor the host runs.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <caf/meta/type_name.hpp>

namespace cohort {

/// The device actor's settings that the node compiled (its watchdog and its
/// health poll), in milliseconds.
struct host_hello {
  /// The device's index in the node's fleet: its messages carry it.
  uint32_t index = 0;
  /// Which of the host's devices (its index there; a host process has one),
  /// and its name as the node knows it: a gate whose device at that index
  /// has another name (a remote host restarted with another config)
  /// refuses the hello. Empty: not checked.
  uint32_t device = 0;
  std::string name;
  int64_t kernel_timeout_ms = 5000;
  /// Per kernel id (0 = the default).
  std::vector<int64_t> kernel_timeouts_ms;
  int64_t health_interval_ms = 50;
  /// The node's Xid policy: the codes that have a rule and their actions
  /// (devices::xid_action), pairwise.
  std::vector<uint32_t> xid_codes;
  std::vector<uint8_t> xid_actions;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, host_hello& x) {
  return f(caf::meta::type_name("host_hello"), x.index, x.device, x.name,
           x.kernel_timeout_ms, x.kernel_timeouts_ms, x.health_interval_ms,
           x.xid_codes, x.xid_actions);
}

/// A kernel registered in the node's process (by the application or from a
/// bundle) with GPU code for a host's GPU: what the host process needs to
/// run it there (docs/device-hosts.md, "Kernels"). The node sends it to the
/// device actor in the host before the first item of the kernel placed
/// there. The host has no CPU code for it and cannot evaluate its rules:
/// each launch brings its sizes (run_request::sizes).
struct kernel_code {
  /// Its id in the node's registry, which the host takes over.
  uint8_t id = 0;
  std::string name;
  /// Where it came from in the node ("application", "bundle ...").
  std::string origin;
  /// Element type (kernels::dtype) of each input, and of the output.
  std::vector<uint8_t> inputs;
  uint8_t output = 0;
  /// The GPU code for the host's backend: kernels::gpu_code::format, the
  /// module image, the entry point and the threads per block.
  uint8_t format = 0;
  std::vector<uint8_t> image;
  std::string function;
  uint32_t block = 256;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, kernel_code& x) {
  return f(caf::meta::type_name("kernel_code"), x.id, x.name, x.origin,
           x.inputs, x.output, x.format, x.image, x.function, x.block);
}

/// A fault injected into a simulated device (docs/supervision.md, "Chaos"),
/// sent to the gate of the host process it runs in. `kind` is a
/// cohort.pb.FaultKind of a simulated device's own faults (LOSE to THERMAL,
/// not the operator's actions nor the host's).
struct sim_fault {
  int32_t kind = 0;
  uint32_t xid = 0;
  uint32_t allocations = 1;
  double factor = 1.0;
  uint32_t stream = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, sim_fault& x) {
  return f(caf::meta::type_name("sim_fault"), x.kind, x.xid, x.allocations,
           x.factor, x.stream);
}

} // namespace cohort
