// The supervisor: owns the device actors, notices when one dies, re-routes
// its work through the balancer and restarts it within limits.
#pragma once

#include <chrono>
#include <deque>
#include <memory>
#include <vector>

#include <caf/typed_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "actors/audit.hpp"
#include "actors/balancer.hpp"
#include "actors/device_actor.hpp"

namespace cohort::actors {

using supervisor_actor = caf::typed_actor<
    /// Spawns every device actor and announces it to the balancer; replies once
    /// all are announced.
    caf::replies_to<start_atom>::with<bool>,
    /// Internal: try to bring device `index` back.
    caf::reacts_to<restart_atom, uint32_t>,
    /// Returns every device's memory, by index (asked of live device actors,
    /// read directly from devices that have none).
    caf::replies_to<memory_atom>::with<std::vector<memory_snapshot>>>;

/// Restart policy, in the manner of OTP supervisors.
struct supervisor_config {
  /// At most this many restarts of one device within `restart_period`;
  /// one more loss takes it offline for good.
  uint32_t max_restarts = 3;
  std::chrono::milliseconds restart_period{10000};
  /// Pause between a loss and the restart attempt.
  std::chrono::milliseconds restart_delay{20};
  std::chrono::milliseconds kernel_timeout{5000};
};

struct supervisor_state {
  struct entry {
    std::shared_ptr<devices::device> dev;
    device_actor handle;
    caf::actor_addr addr;
    std::deque<std::chrono::steady_clock::time_point> restarts;
    bool offline = false;
  };
  std::vector<entry> devices;
  balancer_actor balancer;
  audit_actor audit;
  supervisor_config cfg;
  static inline const char* name = "cohort.supervisor";
};

/// Supervises one device actor per entry of `devices` (index = position).
supervisor_actor::behavior_type
supervisor_impl(supervisor_actor::stateful_pointer<supervisor_state> self,
                std::vector<std::shared_ptr<devices::device>> devices,
                balancer_actor balancer, audit_actor audit,
                supervisor_config cfg);

} // namespace cohort::actors
