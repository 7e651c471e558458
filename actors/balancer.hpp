// The balancer: places every admitted item on the device with the earliest
// expected completion, re-places it when a device fails under it, and ends it
// exactly once.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include <caf/typed_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "actors/audit.hpp"
#include "actors/client_sink.hpp"
#include "actors/device_actor.hpp"
#include "messages/stats.hpp"

namespace cohort::actors {

/// What the balancer reports back to the quota actor.
using quota_listener = caf::typed_actor<
    /// An item of `tenant` holding `bytes` of quota ended.
    caf::reacts_to<release_atom, std::string, uint64_t>>;

using balancer_actor = device_listener::extend<
    /// Places admitted `item` under `ticket`; `device_mask` holds the devices
    /// its tenant may use (bit i = device i) and `bytes` its device memory
    /// need.
    caf::reacts_to<admit_atom, uint64_t, work_item, client_sink, uint64_t,
                   uint64_t>,
    /// Sets the quota actor that hears about every ended item.
    caf::reacts_to<start_atom, quota_listener>,
    /// Device `index` (re)joined with a new actor.
    caf::reacts_to<up_atom, uint32_t, device_actor>,
    /// Device `index` left with `reason`; `permanent` when it will not return.
    caf::reacts_to<down_atom, uint32_t, caf::error, bool>,
    /// Returns the balancer's counters.
    caf::replies_to<stats_atom>::with<balancer_stats>,
    /// Sends buffered audit events on; replies when done.
    caf::replies_to<flush_atom>::with<bool>,
    /// Internal: periodic flush of buffered audit events.
    caf::reacts_to<tick_atom>>;

/// Settings of the balancer.
struct balancer_config {
  /// Placements per item before it fails with retries_exhausted.
  uint32_t max_attempts = 4;
};

struct balancer_state {
  /// The balancer's view of one device.
  struct slot {
    device_info info;
    device_actor handle;
    device_status status = device_status::offline;
    /// Sum of predicted run times of items placed and not yet ended.
    double backlog_ns = 0;
    /// Learned device time per unit of cost, per kernel (EWMA); 0 = no data.
    std::array<double, 9> ns_per_unit{};
    /// Run requests sent to the device actor and not yet answered, and
    /// tickets placed here that wait for the device to answer some: they go
    /// out together, one message for many items, when it does.
    uint32_t sent = 0;
    std::vector<uint64_t> queued;
    device_stats stats;
  };
  /// One admitted item until it ends.
  struct record {
    work_item item;
    client_sink sink;
    uint64_t device_mask = 0;
    uint64_t bytes = 0;
    double cost_units = 0;
    /// Device it is placed on (-1 while parked) and the prediction made.
    int32_t device = -1;
    double predicted_ns = 0;
    uint32_t attempts = 0;
    /// Devices that failed this item (not tried again unless nothing else is
    /// left).
    uint64_t failed_on = 0;
    bool on_gpu_before = false;
  };
  std::vector<slot> devices;
  std::unordered_map<uint64_t, record> outstanding;
  /// Tickets waiting for a device of their mask to come back.
  std::vector<uint64_t> parked;
  quota_listener quota;
  audit_buffer audit;
  balancer_config cfg;
  balancer_stats counters;
  static inline const char* name = "cohort.balancer";
};

/// Spawned with the static facts of every device (indices match the device
/// actors the supervisor announces with `up`).
balancer_actor::behavior_type
balancer_impl(balancer_actor::stateful_pointer<balancer_state> self,
              std::vector<device_info> devices, quota_listener quota,
              audit_actor audit, balancer_config cfg);

} // namespace cohort::actors
