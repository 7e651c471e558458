// Counters the actors report to the runtime facade, the CLI and tests.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <caf/error.hpp>
#include <caf/meta/load_callback.hpp>
#include <caf/meta/type_name.hpp>

namespace cohort {

/// Where a device stands, as the balancer sees it.
enum class device_status : uint8_t {
  /// Accepting work.
  online = 1,
  /// Lost; the supervisor is trying to restart it.
  restarting = 2,
  /// Out of service for good (restart limit reached or reset failed).
  offline = 3,
};

/// Returns "online", "restarting" or "offline".
const char* to_string(device_status x);

/// What one device did, as the balancer counted it.
struct device_stats {
  std::string name;
  std::string kind;
  bool simulated = false;
  device_status status = device_status::online;
  /// Items that ended on this device with their result.
  uint64_t completed = 0;
  /// Placements that failed on this device (OOM, fault, loss) and moved on.
  uint64_t failed_placements = 0;
  /// Device time spent on completed items (modeled on simulated devices).
  int64_t busy_ns = 0;
  /// Times this device was lost and times it came back.
  uint32_t losses = 0;
  uint32_t restarts = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, device_stats& x) {
  auto status = static_cast<uint8_t>(x.status);
  auto load = caf::meta::load_callback([&]() -> caf::error {
    x.status = static_cast<device_status>(status);
    return caf::none;
  });
  return f(caf::meta::type_name("device_stats"), x.name, x.kind, x.simulated,
           status, x.completed, x.failed_placements, x.busy_ns, x.losses,
           x.restarts, load);
}

/// Admission counters (the balancer admits under the quota actor's lease).
struct quota_stats {
  uint64_t admitted = 0;
  uint64_t rejected = 0;
  /// Rejections by errc name ("over_memory_quota", ...).
  std::map<std::string, uint64_t> rejected_by_reason;
  /// Items in flight per tenant.
  std::map<std::string, uint64_t> inflight;
  /// Items held back at admission by an in-flight cap or a rate limit
  /// (policy QUEUE / CPU_FALLBACK), and admitted items that waited for
  /// device memory.
  uint64_t held = 0;
  uint64_t memory_waits = 0;
  /// Items run on a CPU worker because device memory was the limit (policy
  /// CPU_FALLBACK).
  uint64_t memory_fallbacks = 0;
  /// Held or waiting items that ran out of time and ended with the limit's
  /// error.
  uint64_t timeouts = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, quota_stats& x) {
  return f(caf::meta::type_name("quota_stats"), x.admitted, x.rejected,
           x.rejected_by_reason, x.inflight, x.held, x.memory_waits,
           x.memory_fallbacks, x.timeouts);
}

/// Balancer-wide counters.
struct balancer_stats {
  std::vector<device_stats> devices;
  /// Items moved from a GPU to a CPU worker after a GPU placement failed.
  uint64_t fallbacks = 0;
  /// Items re-placed after any failure (fallbacks included).
  uint64_t retries = 0;
  /// Items that ended with a definitive error after admission.
  uint64_t failed = 0;
  /// Completions that arrived for items already ended (dropped, never
  /// delivered).
  uint64_t duplicates_dropped = 0;
  /// Items admitted and not yet ended.
  uint64_t outstanding = 0;
  /// Admission under the lease.
  quota_stats admission;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, balancer_stats& x) {
  return f(caf::meta::type_name("balancer_stats"), x.devices, x.fallbacks,
           x.retries, x.failed, x.duplicates_dropped, x.outstanding,
           x.admission);
}

} // namespace cohort
