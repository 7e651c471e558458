// Counters the actors report to the runtime facade, the CLI and tests.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <caf/error.hpp>
#include <caf/meta/load_callback.hpp>
#include <caf/meta/type_name.hpp>

#include "messages/objects.hpp"

namespace cohort {

/// Where a device stands in its life cycle. The supervisor drives it (health
/// events, launch errors, losses, operators); the balancer places work by it.
enum class device_status : uint8_t {
  /// Healthy and accepting work.
  available = 1,
  /// Accepting work, but reported warnings (application-level Xids,
  /// corrected ECC errors, thermal throttling): placed on only when it is
  /// still the best choice at a penalty. Back to available after a quiet
  /// period.
  degraded = 2,
  /// An operator asked it to drain: what runs there finishes, nothing new is
  /// placed on it.
  draining = 3,
  /// Lost; the supervisor is resetting and restarting it. Work waits for it
  /// or moves elsewhere.
  resetting = 4,
  /// Out of service: restart limit reached, reset failed, or taken offline
  /// by an operator (who may bring it online again).
  offline = 5,
};

/// Returns "available", "degraded", "draining", "resetting" or "offline".
const char* to_string(device_status x);

/// A device's circuit breaker, kept by the balancer.
enum class circuit_state : uint8_t {
  /// Work flows.
  closed = 0,
  /// Too many failures in the window: nothing is placed there until the
  /// open period ends.
  open = 1,
  /// The open period ended: a few probe items go there; if they pass the
  /// circuit closes, if one fails it opens again.
  half_open = 2,
};

/// Returns "closed", "open" or "half-open".
const char* to_string(circuit_state x);

/// What one device did, as the balancer counted it.
struct device_stats {
  std::string name;
  std::string kind;
  bool simulated = false;
  device_status status = device_status::available;
  circuit_state circuit = circuit_state::closed;
  /// Times its circuit opened.
  uint32_t circuit_opens = 0;
  /// Items that ended on this device with their result.
  uint64_t completed = 0;
  /// Placements that failed on this device (OOM, fault, loss) and moved on.
  uint64_t failed_placements = 0;
  /// Device time spent on completed items (modeled on simulated devices).
  int64_t busy_ns = 0;
  /// Times this device was lost and times it came back.
  uint32_t losses = 0;
  uint32_t restarts = 0;
  /// Items placed on it that have not ended yet (running or queued).
  uint64_t queued = 0;
  /// Share of its streams' time spent on completed items since the runtime
  /// started (busy time / (wall time x streams)).
  double utilization = 0;
  /// Launches it ran: merged launches count once, gang slices each.
  uint64_t launches = 0;
  /// Placements it refused for memory although the balancer's books let
  /// them through (the item waited and was placed again).
  uint64_t memory_refusals = 0;
  /// Most items placed on it at once (its queue depth at the peak).
  uint64_t max_queued = 0;
  /// A device outside the node's process (host process, remote host): the
  /// measured cost of reaching it, fixed per item and per byte an item
  /// carries (docs/placement.md). 0 in this process, and until measured.
  double crossing_ns = 0;
  double crossing_ns_per_byte = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, device_stats& x) {
  auto status = static_cast<uint8_t>(x.status);
  auto circuit = static_cast<uint8_t>(x.circuit);
  auto load = caf::meta::load_callback([&]() -> caf::error {
    x.status = static_cast<device_status>(status);
    x.circuit = static_cast<circuit_state>(circuit);
    return caf::none;
  });
  return f(caf::meta::type_name("device_stats"), x.name, x.kind, x.simulated,
           status, circuit, x.circuit_opens, x.completed, x.failed_placements,
           x.busy_ns, x.losses, x.restarts, x.queued, x.utilization, x.launches,
           x.memory_refusals, x.max_queued, x.crossing_ns,
           x.crossing_ns_per_byte, load);
}

/// Upper bounds (seconds) of the latency histogram buckets; a last bucket
/// above them all is implied (+Inf).
inline constexpr std::array<double, 16> latency_bounds_s{
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
    0.05,   0.1,     0.25,   0.5,   1,      2.5,   5,    10};

/// Latency from admission to result of the items one kernel completed on
/// one device.
struct latency_histogram {
  std::string kernel;
  std::string device;
  /// Items per bucket (not cumulative): bucket i counts latencies at most
  /// latency_bounds_s[i] and above the bound before; the last one the rest.
  std::vector<uint64_t> buckets;
  uint64_t count = 0;
  double sum_s = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, latency_histogram& x) {
  return f(caf::meta::type_name("latency_histogram"), x.kernel, x.device,
           x.buckets, x.count, x.sum_s);
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

/// One tenant's items that ran on a CPU worker in place of a GPU (after a GPU
/// failed under them, or for device memory), against its latency budget.
struct fallback_stats {
  uint64_t items = 0;
  /// Admission to end, summed and at most.
  int64_t total_ns = 0;
  int64_t max_ns = 0;
  /// The tenant's budget per fallback item (0: none) and items past it.
  int64_t budget_ns = 0;
  uint64_t over_budget = 0;
  /// Items the budget kept off the CPU workers (their predicted end there
  /// was past it, under FALLBACK_WAIT or FALLBACK_FAIL), each once.
  uint64_t held_back = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, fallback_stats& x) {
  return f(caf::meta::type_name("fallback_stats"), x.items, x.total_ns,
           x.max_ns, x.budget_ns, x.over_budget, x.held_back);
}

/// Balancer-wide counters.
struct balancer_stats {
  std::vector<device_stats> devices;
  /// Items moved from a GPU to a CPU worker after a GPU placement failed
  /// or because device memory was the limit.
  uint64_t fallbacks = 0;
  /// The same by reason: the error that moved the item ("device_lost",
  /// "kernel_fault", ...) or "device_memory".
  std::map<std::string, uint64_t> fallbacks_by_reason;
  /// Items that ended with their result.
  uint64_t completed = 0;
  /// Items re-placed after any failure (fallbacks included).
  uint64_t retries = 0;
  /// Items that ended with a definitive error after admission.
  uint64_t failed = 0;
  /// Items cancelled (held back, waiting or running), each once however
  /// often asked (docs/jobs.md).
  uint64_t cancelled = 0;
  /// Completions that arrived for items already ended (dropped, never
  /// delivered).
  uint64_t duplicates_dropped = 0;
  /// Items admitted and not yet ended.
  uint64_t outstanding = 0;
  /// CPU fallbacks per tenant, with their latency against the budget.
  std::map<std::string, fallback_stats> fallback_by_tenant;
  /// Admission under the lease.
  quota_stats admission;
  /// Per (kernel, device) with at least one completed item.
  std::vector<latency_histogram> latency;
  /// Admitted items waiting for a device (ready queues, open batches,
  /// gangs waiting for their devices).
  uint64_t waiting = 0;
  /// Most items waiting in the ready queues at once.
  uint64_t max_waiting = 0;
  /// Merged launches and the items they carried.
  uint64_t batches = 0;
  uint64_t batched_items = 0;
  /// Gang items placed (all their devices at once) and placements that
  /// had to wait for devices first.
  uint64_t gangs = 0;
  uint64_t gang_waits = 0;
  /// Exploration runs: an item sent to a device with no measurement for
  /// its kernel and size class yet.
  uint64_t explored = 0;
  /// Device-resident objects (docs/objects.md).
  object_counters objects;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, balancer_stats& x) {
  return f(caf::meta::type_name("balancer_stats"), x.devices, x.fallbacks,
           x.fallbacks_by_reason, x.completed, x.retries, x.failed,
           x.duplicates_dropped, x.outstanding, x.fallback_by_tenant,
           x.admission, x.latency, x.waiting, x.max_waiting, x.batches,
           x.batched_items, x.gangs, x.gang_waits, x.explored, x.cancelled,
           x.objects);
}

} // namespace cohort
