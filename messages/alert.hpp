// Alerts the runtime raises in-process: what fires, about what, since when.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <caf/meta/type_name.hpp>

namespace cohort {

/// One firing alert.
struct alert {
  /// The rule: "vram_high", "allocation_failures", "device_unavailable",
  /// "circuit_open", "fallback_rate_high", "tenant_near_quota".
  std::string name;
  /// What it is about: a device or a tenant name.
  std::string subject;
  /// "warning" or "critical".
  std::string severity;
  /// Wall-clock time it started firing (ns since the epoch).
  int64_t since_ns = 0;
  /// The measurement that made it fire, in words.
  std::string detail;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, alert& x) {
  return f(caf::meta::type_name("alert"), x.name, x.subject, x.severity,
           x.since_ns, x.detail);
}

} // namespace cohort
