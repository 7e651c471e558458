// What the quota actor leases to the balancer (each tenant's grant and
// limits, compiled against the runtime's devices), what the balancer reports
// back (usage), and the headroom answer. Plain C++ message types, registered
// in system_config.cpp.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/kernel_args.hpp"

#include <caf/meta/load_callback.hpp>
#include <caf/meta/type_name.hpp>

namespace cohort {

/// What happens to an item that hits one of its tenant's limits (soft OOM);
/// values match `cohort.pb.LimitPolicy`.
enum class limit_policy : uint8_t {
  /// Refused (before admission) or failed (after) with the limit's error.
  reject = 0,
  /// Held until it fits, up to the tenant's queue limit and timeout.
  queue = 1,
  /// Device memory: run on a CPU worker of the grant; other limits: held as
  /// with `queue`.
  cpu_fallback = 2,
};

/// Returns "reject", "queue" or "cpu_fallback".
const char* to_string(limit_policy x);

/// What a fallback to a CPU worker predicted to end past the tenant's
/// fallback budget does; values match `cohort.pb.FallbackPolicy`.
enum class fallback_policy : uint8_t {
  /// Falls back all the same (counted and audited past the budget).
  allow = 0,
  /// Waits for a GPU, at most the tenant's queue timeout.
  wait = 1,
  /// Ends at once with over_fallback_budget.
  fail = 2,
};

/// Returns "allow", "wait" or "fail".
const char* to_string(fallback_policy x);

/// One device as quotas see it.
struct device_budget {
  std::string name;
  /// False for CPU workers (host memory is not metered).
  bool has_memory = false;
  uint64_t capacity = 0;
  /// What the runtime hands out at most (capacity times the memory fraction).
  uint64_t limit = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, device_budget& x) {
  return f(caf::meta::type_name("device_budget"), x.name, x.has_memory,
           x.capacity, x.limit);
}

/// The kernels a tenant is granted: every kernel of the registry (`"*"`,
/// also those registered later), or a set of ids.
struct kernel_grant {
  bool all = false;
  /// Bit k set = the kernel with id k.
  std::array<uint64_t, 4> bits{};

  void add(kernels::kernel_id k) {
    auto i = static_cast<uint8_t>(k);
    bits[i / 64] |= uint64_t{1} << (i % 64);
  }
  bool allows(kernels::kernel_id k) const {
    auto i = static_cast<uint8_t>(k);
    return all || (bits[i / 64] >> (i % 64) & 1) != 0;
  }
  bool empty() const { return !all && bits == std::array<uint64_t, 4>{}; }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, kernel_grant& x) {
  return f(caf::meta::type_name("kernel_grant"), x.all, x.bits[0], x.bits[1],
           x.bits[2], x.bits[3]);
}

/// A tenant's grant and limits, compiled against the runtime's device list
/// (vectors are indexed by device).
struct tenant_policy {
  std::string tenant;
  /// The kernels granted.
  kernel_grant kernels;
  /// Bit i set = device i granted.
  uint64_t device_mask = 0;
  uint32_t max_inflight = 1024;
  /// Device memory across devices; 0 = no limit.
  uint64_t memory_quota = 0;
  /// Per device: quota (0 = none) and reserved bytes.
  std::vector<uint64_t> device_quota;
  std::vector<uint64_t> device_reserve;
  /// Most device memory one item may take; 0 = no limit.
  uint64_t max_item_bytes = 0;
  /// Items per second and burst; rate 0 = no rate limit.
  double rate = 0;
  uint32_t burst = 0;
  limit_policy on_limit = limit_policy::reject;
  uint32_t queue_limit = 1024;
  uint32_t queue_timeout_ms = 10000;
  /// Latency budget of one CPU fallback item (admission to end); 0: none.
  uint32_t fallback_budget_ms = 0;
  /// What a fallback predicted past the budget does.
  fallback_policy on_over_budget = fallback_policy::allow;
  /// Share of the devices when work waits (weighted fair queuing).
  double weight = 1.0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, tenant_policy& x) {
  auto policy = static_cast<uint8_t>(x.on_limit);
  auto over_budget = static_cast<uint8_t>(x.on_over_budget);
  auto load = caf::meta::load_callback([&]() -> caf::error {
    x.on_limit = static_cast<limit_policy>(policy);
    x.on_over_budget = static_cast<fallback_policy>(over_budget);
    return caf::none;
  });
  return f(caf::meta::type_name("tenant_policy"), x.tenant, x.kernels,
           x.device_mask, x.max_inflight, x.memory_quota, x.device_quota,
           x.device_reserve, x.max_item_bytes, x.rate, x.burst, policy,
           x.queue_limit, x.queue_timeout_ms, x.fallback_budget_ms, over_budget,
           x.weight, load);
}

/// The terms under which the balancer admits on its own: every tenant's
/// policy, the devices, and the limits across tenants. One admission point
/// holds the whole of each tenant's credit.
struct quota_lease {
  std::vector<tenant_policy> policies;
  std::vector<device_budget> devices;
  /// Most items in flight across tenants; 0 = no limit.
  uint64_t max_inflight = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, quota_lease& x) {
  return f(caf::meta::type_name("quota_lease"), x.policies, x.devices,
           x.max_inflight);
}

/// One tenant's use of its limits at one moment.
struct tenant_usage {
  std::string tenant;
  uint64_t inflight = 0;
  /// Items held back by a limit (QUEUE / CPU_FALLBACK) and not yet admitted
  /// or placed.
  uint64_t waiting = 0;
  /// Device memory held across devices, and per device.
  uint64_t memory = 0;
  std::vector<uint64_t> on_device;
  /// Of `memory`, what programs run by `cohort exec` hold (docs/exec.md).
  uint64_t outside = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, tenant_usage& x) {
  return f(caf::meta::type_name("tenant_usage"), x.tenant, x.inflight,
           x.waiting, x.memory, x.on_device, x.outside);
}

/// Every tenant's usage and every device's placed bytes.
struct quota_usage {
  std::vector<tenant_usage> tenants;
  std::vector<uint64_t> device_placed;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, quota_usage& x) {
  return f(caf::meta::type_name("quota_usage"), x.tenants, x.device_placed);
}

/// What one tenant may still place on one device now.
struct device_headroom {
  std::string device;
  /// The tenant's bytes there, its quota there (0 = none) and its
  /// reservation.
  uint64_t used = 0;
  uint64_t quota = 0;
  uint64_t reserved = 0;
  /// The largest item (in device memory) the tenant could place there now,
  /// and with everything else idle.
  uint64_t headroom = 0;
  uint64_t ceiling = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, device_headroom& x) {
  return f(caf::meta::type_name("device_headroom"), x.device, x.used, x.quota,
           x.reserved, x.headroom, x.ceiling);
}

/// How much a tenant may still use.
struct tenant_headroom {
  std::string tenant;
  uint64_t inflight = 0;
  uint64_t max_inflight = 0;
  uint64_t waiting = 0;
  /// Device memory across devices and its quota (0 = none).
  uint64_t memory = 0;
  uint64_t memory_quota = 0;
  /// Granted CPU workers (they take items of any size).
  uint32_t cpu_workers = 0;
  /// Granted devices with device memory.
  std::vector<device_headroom> devices;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, tenant_headroom& x) {
  return f(caf::meta::type_name("tenant_headroom"), x.tenant, x.inflight,
           x.max_inflight, x.waiting, x.memory, x.memory_quota, x.cpu_workers,
           x.devices);
}

/// The answer to a headroom query.
struct headroom_report {
  std::vector<tenant_headroom> tenants;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, headroom_report& x) {
  return f(caf::meta::type_name("headroom_report"), x.tenants);
}

} // namespace cohort
