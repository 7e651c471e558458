// The device actor: owns exactly one device (a CPU worker, a simulated GPU, and
// later a CUDA or HIP GPU) and runs what the balancer places on it.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <unordered_map>
#include <vector>

#include <caf/typed_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "devices/device.hpp"
#include "messages/atoms.hpp"
#include "messages/host.hpp"
#include "messages/memory_stats.hpp"
#include "messages/share.hpp"
#include "messages/work.hpp"

namespace cohort::actors {

/// What a device actor reports to (the balancer).
using device_listener = caf::typed_actor<
    /// Device `index` finished these launches (each `id` is a ticket).
    caf::reacts_to<done_atom, uint32_t, std::vector<work_done>>,
    /// Device `index` could not run ticket `ticket`; the item may run
    /// elsewhere.
    caf::reacts_to<failed_atom, uint32_t, uint64_t, caf::error>>;

/// Where a device actor reports warnings (the supervisor).
using health_listener = caf::typed_actor<
    /// Device `index` reported warnings that do not take it down.
    caf::reacts_to<health_atom, uint32_t, std::vector<std::string>>>;

using device_actor = caf::typed_actor<
    /// Runs each request in order. Launches that finish at once are reported
    /// together in one `done` message.
    caf::reacts_to<run_atom, std::vector<run_request>>,
    /// Internal: the modeled completion time of a ticket has come.
    caf::reacts_to<complete_atom, uint64_t>,
    /// Internal: a ticket's kernel timeout expired.
    caf::reacts_to<watchdog_atom, uint64_t>,
    /// Internal: periodic health check.
    caf::reacts_to<tick_atom>,
    /// Chaos: the actor crashes (throws) while the device stays fine.
    caf::reacts_to<crash_atom>,
    /// Returns the device's static facts.
    caf::replies_to<info_atom>::with<device_info>,
    /// Returns the device's memory (pool, limits, statistics, leaks); an
    /// empty snapshot for devices without device memory.
    caf::replies_to<memory_atom>::with<memory_snapshot>,
    /// Keeps a copy of `data` as object `id` of tenant `tenant` in device
    /// memory (docs/objects.md); returns the bytes its block takes. Errors:
    /// the memory's (out_of_memory, memory_limit, over_memory_quota),
    /// invalid_arguments, device_lost.
    caf::replies_to<store_atom, uint64_t, host_buffer,
                    std::string>::with<uint64_t>,
    /// Copies object `id` back to host memory.
    caf::replies_to<read_atom, uint64_t>::with<host_buffer>,
    /// Frees object `id` (no launch reads it any more).
    caf::reacts_to<drop_atom, uint64_t>,
    /// How another process maps object `id` (docs/objects.md).
    caf::replies_to<share_atom, uint64_t>::with<share_handle>,
    /// In a device host process: kernels registered in the node's process,
    /// to register here at the node's ids before items of them arrive
    /// (docs/device-hosts.md, "Kernels"). One that cannot be registered
    /// fails its items with unknown_kernel, saying why.
    caf::reacts_to<code_atom, std::vector<kernel_code>>>;

/// Settings of one device actor.
struct device_actor_config {
  uint32_t index = 0;
  /// A launch not finished this long after it started on its stream means
  /// the device hangs; `kernel_timeouts` (by kernel id, 0 = this default)
  /// overrides it per kernel, and a chain gets the sum of its stages'.
  std::chrono::milliseconds kernel_timeout{5000};
  std::vector<std::chrono::milliseconds> kernel_timeouts;
  /// Gets the device's warnings; may be null.
  health_listener health;
  /// How often the device's health is polled (and its pool kept up).
  std::chrono::milliseconds health_interval{50};
  /// Binds the actor's thread to the device's NUMA node (detached actors).
  bool bind_numa = false;
};

struct device_state {
  struct pending_launch {
    work_done done;
    /// Its stream, its order among launches, and its watchdog timeout.
    uint32_t stream = 0;
    uint64_t seq = 0;
    std::chrono::milliseconds timeout{0};
    /// When it got its stream (on a GPU): at launch if nothing older was
    /// pending there, else when the older launch ended. Unset while queued.
    std::chrono::steady_clock::time_point started{};
    /// Keep its output on the device as this object, for this tenant.
    uint64_t keep_as = 0;
    std::string tenant;
    /// When its request reached this actor (work_done::held_ns).
    std::chrono::steady_clock::time_point arrived{};
  };
  std::shared_ptr<devices::device> dev;
  device_listener listener;
  device_actor_config cfg;
  /// When each stream finishes its queued work (simulated devices).
  std::vector<std::chrono::steady_clock::time_point> stream_free_at;
  std::unordered_map<uint64_t, pending_launch> pending;
  uint64_t next_seq = 0;
  /// Kernels the node sent that could not be registered here, by id: why.
  std::map<uint8_t, std::string> refused_kernels;
  /// The device times copies apart (the last request asked it to).
  bool time_copies = false;
  static inline const char* name = "cohort.device";
};

/// Runs launches on `dev` and reports each end to `listener`. When the device
/// is lost or hangs, the actor terminates with that error; its supervisor
/// sees the exit reason and the balancer re-places what was on it.
device_actor::behavior_type
device_impl(device_actor::stateful_pointer<device_state> self,
            std::shared_ptr<devices::device> dev, device_listener listener,
            device_actor_config cfg);

} // namespace cohort::actors
