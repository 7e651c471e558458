// What a node's supervisor tells a device host process when it reaches it
// (docs/device-hosts.md): the settings of the device actor the host runs.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include <caf/meta/type_name.hpp>

namespace cohort {

/// The device actor's settings that the node compiled (its watchdog and its
/// health poll), in milliseconds.
struct host_hello {
  /// The device's index in the node's fleet: its messages carry it.
  uint32_t index = 0;
  int64_t kernel_timeout_ms = 5000;
  /// Per kernel id (0 = the default).
  std::vector<int64_t> kernel_timeouts_ms;
  int64_t health_interval_ms = 50;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, host_hello& x) {
  return f(caf::meta::type_name("host_hello"), x.index, x.kernel_timeout_ms,
           x.kernel_timeouts_ms, x.health_interval_ms);
}

} // namespace cohort
