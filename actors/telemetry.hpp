// The node's telemetry sampler: every interval it reads each device's health
// counters (devices::device::telemetry: temperature, power, utilization,
// memory, ECC) and keeps them in the device's history, which `cohort health`
// and GET /v1/devices/NAME/health show, and tells the supervisor when a
// device's temperature or power crosses the config's thresholds
// (heat_watch). It runs on a thread of its own: a vendor library's call may
// block for milliseconds.
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include <caf/typed_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "actors/device_roster.hpp"
#include "actors/heat_watch.hpp"
#include "devices/device.hpp"
#include "messages/atoms.hpp"

namespace cohort::actors {

using telemetry_actor = caf::typed_actor<
    /// Internal: sample every device now.
    caf::reacts_to<tick_atom>>;

struct telemetry_state {
  std::shared_ptr<const device_roster> roster;
  std::chrono::milliseconds interval{1000};
  /// One per device, their limits, and who hears of their changes (none
  /// when no threshold is set).
  std::vector<heat_watch> heat;
  heat_limits limits;
  heat_listener listener;
  static inline const char* name = "cohort.telemetry";
};

/// Samples the devices of `roster` every `interval`, the first time at
/// once, those added later from the next time on; devices without health
/// counters (CPU workers, GPUs without their library) keep no history.
/// When `limits` sets a threshold, tells `listener` each time a device's
/// heat_level changes (device indexes are the roster's).
telemetry_actor::behavior_type
telemetry_impl(telemetry_actor::stateful_pointer<telemetry_state> self,
               std::shared_ptr<const device_roster> roster,
               std::chrono::milliseconds interval, heat_limits limits,
               heat_listener listener);

} // namespace cohort::actors
