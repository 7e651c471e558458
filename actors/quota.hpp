// The quota actor: the runtime's front door. It admits or rejects every item
// (default-deny grants, in-flight caps, device-memory quotas) and hands the
// admitted ones to the balancer.
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include <caf/expected.hpp>
#include <caf/typed_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "actors/balancer.hpp"
#include "messages/cohort.pb.h"
#include "messages/stats.hpp"

namespace cohort::actors {

using quota_actor = quota_listener::extend<
    /// Admits `item` for its tenant or rejects it; either way it ends at
    /// `sink`.
    caf::reacts_to<submit_atom, work_item, client_sink>,
    /// Returns admission counters.
    caf::replies_to<stats_atom>::with<quota_stats>,
    /// Sends buffered audit events on; replies when done.
    caf::replies_to<flush_atom>::with<bool>,
    /// Stops admitting: later submissions are rejected with shutting_down.
    caf::replies_to<down_atom>::with<bool>,
    /// Internal: periodic flush of buffered audit events.
    caf::reacts_to<tick_atom>>;

/// A tenant's grant, compiled against the runtime's device list.
struct tenant_policy {
  std::string tenant;
  /// Bit k set = kernel with id k granted.
  uint32_t kernel_mask = 0;
  /// Bit i set = device i granted.
  uint64_t device_mask = 0;
  uint32_t max_inflight = 1024;
  /// 0 = no limit.
  uint64_t memory_quota = 0;
};

/// Checks the grants of `cfg` against the catalog and `devices` and compiles
/// them; malformed_config names the first problem.
caf::expected<std::vector<tenant_policy>>
compile_grants(const pb::RuntimeConfig& cfg,
               const std::vector<device_info>& devices);

struct quota_state {
  struct usage {
    uint64_t inflight = 0;
    uint64_t bytes = 0;
  };
  std::unordered_map<std::string, tenant_policy> policies;
  std::unordered_map<std::string, usage> used;
  balancer_actor balancer;
  audit_buffer audit;
  quota_stats counters;
  uint64_t next_ticket = 0;
  bool closed = false;
  static inline const char* name = "cohort.quota";
};

quota_actor::behavior_type
quota_impl(quota_actor::stateful_pointer<quota_state> self,
           std::vector<tenant_policy> policies, balancer_actor balancer,
           audit_actor audit);

} // namespace cohort::actors
