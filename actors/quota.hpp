// The quota actor: the authority on grants and limits. It compiles them from
// the config (failing fast on a config that cannot hold) and leases them to
// the balancer, which admits under them without a message per item and
// keeps the one live quota book. Headroom and dry runs of allocation plans
// depend on what is in use now: the quota actor passes them on to the
// balancer (its interface stays the place to ask).
#pragma once

#include <string>
#include <vector>

#include <caf/expected.hpp>
#include <caf/typed_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "actors/balancer/balancer.hpp"
#include "devices/memory/pool_resource.hpp"
#include "messages/cohort.pb.h"
#include "messages/quota.hpp"
#include "messages/simulation.hpp"

namespace cohort::actors {

using quota_actor = caf::typed_actor<
    /// What `tenant` (every tenant when empty) may still use now, from the
    /// balancer's live book; unknown_tenant for a tenant without a grant.
    caf::replies_to<headroom_atom, std::string>::with<headroom_report>,
    /// A dry run of `plan` against the grants, quotas and device memory
    /// (starting from the current usage with `from_now`). Nothing runs.
    caf::replies_to<simulate_atom, allocation_plan>::with<simulation_report>,
    /// The terms the balancer admits under.
    caf::replies_to<lease_atom>::with<quota_lease>,
    /// New terms for the same tenants and devices (changed limits): kept
    /// here and passed on to the balancer, where use so far carries over.
    caf::replies_to<lease_atom, quota_lease>::with<bool>,
    /// A device joins (a GPU a rescan found): `lease` covers the fleet with
    /// it. Passed on to the balancer, which replies the device's index;
    /// kept here once the balancer took it.
    caf::replies_to<add_atom, device_info, quota_lease,
                    devices::memory::pool_options>::with<uint32_t>>;

struct quota_state {
  quota_lease lease;
  balancer_actor balancer;
  static inline const char* name = "cohort.quota";
};

/// `lease` is what the balancer was spawned with.
quota_actor::behavior_type
quota_impl(quota_actor::stateful_pointer<quota_state> self, quota_lease lease,
           balancer_actor balancer);

} // namespace cohort::actors
