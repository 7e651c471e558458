// The balancer: the runtime's front door and its placement. It admits every
// item under the terms the quota actor leased to it (grants, in-flight caps,
// rate limits, device-memory quotas), holds back or refuses what does not
// fit, and ends each admitted item exactly once. Admitted items wait in one
// queue per tenant, served by weighted fair queuing; an item is bound to a
// device only when the device has room (late binding), choosing the earliest
// expected completion from a measured run-time model. Small items of one
// kernel are merged into one launch (dynamic batching); an item that needs
// several devices (a gang) gets all of them at once or waits. An item moves
// on when a device fails under it.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>

#include <caf/typed_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "actors/audit.hpp"
#include "actors/balancer/circuit_breaker.hpp"
#include "actors/balancer/cost_model.hpp"
#include "actors/client_sink.hpp"
#include "actors/device_actor.hpp"
#include "actors/device_change.hpp"
#include "devices/memory/pool_resource.hpp"
#include "messages/errc.hpp"
#include "messages/exec.hpp"
#include "messages/jobs.hpp"
#include "messages/share.hpp"
#include "messages/simulation.hpp"
#include "messages/stats.hpp"
#include "messages/trace.hpp"
#include "quota/quota_book.hpp"

// The balancer's typed interface and settings are what the other actors and
// the runtime speak, so they stay in cohort::actors; its parts (the files
// beside this one) are in cohort::actors::balancer.
namespace cohort::actors {

/// Where clients submit: `(submit_atom, work_item, client_sink)`, or many
/// items in one message, or with a batch_sink that hears the ends coalesced.
/// Every submitted item ends at its sink exactly once.
using entry_actor = caf::typed_actor<
    /// Submits `item`; its end arrives at `sink`.
    caf::reacts_to<submit_atom, work_item, client_sink>,
    /// Submits `items` in order, as if one by one (at most
    /// max_submit_batch; each item of a larger batch ends with
    /// invalid_arguments); each one's end arrives at `sink`.
    caf::reacts_to<submit_atom, std::vector<work_item>, client_sink>,
    /// Submits `item`; its end arrives at `sink` with others.
    caf::reacts_to<submit_atom, work_item, batch_sink>,
    /// Submits `items` in order; their ends arrive at `sink` coalesced.
    caf::reacts_to<submit_atom, std::vector<work_item>, batch_sink>,
    /// Cancels the item `id` that `sink` submitted (see balancer_actor).
    caf::reacts_to<cancel_atom, uint64_t, client_sink>,
    caf::reacts_to<cancel_atom, uint64_t, batch_sink>,
    /// Cancels every item with work_item::id `id` that `sink` submitted.
    caf::reacts_to<cancel_id_atom, uint64_t, client_sink>>;

using balancer_actor = device_listener::extend<
    /// Admits `item` for its tenant under the lease, holds it back (policy
    /// QUEUE / CPU_FALLBACK) or refuses it; either way it ends at `sink`.
    /// The batched forms are entry_actor's.
    caf::reacts_to<submit_atom, work_item, client_sink>,
    caf::reacts_to<submit_atom, std::vector<work_item>, client_sink>,
    caf::reacts_to<submit_atom, work_item, batch_sink>,
    caf::reacts_to<submit_atom, std::vector<work_item>, batch_sink>,
    /// New lease terms from the quota actor (changed limits of the same
    /// tenants, in the same order; other leases are refused and audited).
    caf::reacts_to<lease_atom, quota_lease>,
    /// A device joins the fleet (a GPU a rescan found, docs/gpu.md): its
    /// facts, the lease for the fleet with it (the same tenants, their old
    /// devices unchanged: quota_book::add_device) and its pool's options.
    /// It takes the next index, which the reply gives, and takes work once
    /// the supervisor says it started. Errors: invalid_arguments (a lease
    /// that does not fit, a full fleet), shutting_down.
    caf::replies_to<add_atom, device_info, quota_lease,
                    devices::memory::pool_options>::with<uint32_t>,
    /// The supervisor's word on a device's life cycle: its new generation,
    /// status and cause (a new actor, a loss, an operator's act, health).
    caf::reacts_to<device_atom, device_change>,
    /// The audit log can (`ok`) or cannot be written, and why: while it
    /// cannot, nothing is admitted (unless the config keeps running).
    caf::reacts_to<audit_atom, bool, std::string>,
    /// Cancels the item `id` of client `sink`: one that waits ends now with
    /// cancelled, one that runs ends with cancelled when its launch ends
    /// (its result is dropped). Unknown ids are ignored.
    caf::reacts_to<cancel_atom, uint64_t, client_sink>,
    caf::reacts_to<cancel_atom, uint64_t, batch_sink>,
    /// The same for every item of client `sink` whose work_item::id is `id`
    /// (ids are the caller's: several items may share one).
    caf::reacts_to<cancel_id_atom, uint64_t, client_sink>,
    /// Stops admitting: later submissions, and items held back or waiting
    /// for memory, end with shutting_down. Replies when done.
    caf::replies_to<down_atom>::with<bool>,
    /// The runtime stopped (its devices are gone): every item still open
    /// ends now with shutting_down. The balancer stays as a closed door
    /// that refuses every later submission with shutting_down, for as long
    /// as a client holds its handle. Replies when done.
    caf::replies_to<halt_atom>::with<bool>,
    /// Returns the balancer's counters (admission included).
    caf::replies_to<stats_atom>::with<balancer_stats>,
    /// The live items `filter` takes (docs/jobs.md): held ones first, then
    /// admitted ones by job number.
    caf::replies_to<jobs_atom, list_atom,
                    item_filter>::with<std::vector<item_view>>,
    /// Item `job`, live or among the last that ended; unknown_item if
    /// neither.
    caf::replies_to<jobs_atom, get_atom, uint64_t>::with<item_view>,
    /// Cancels every live item `filter` takes (at least one of its fields
    /// set, else invalid_arguments), each audited as cancelled by `who`;
    /// returns how many. Each still ends exactly once, with cancelled.
    caf::replies_to<jobs_atom, cancel_atom, item_filter,
                    std::string>::with<uint64_t>,
    /// Starts recording a trace (docs/tracing.md) of at most `max_events`
    /// events (1 to max_trace_events, else invalid_arguments);
    /// invalid_transition while one is being recorded.
    caf::replies_to<trace_atom, start_atom, uint64_t>::with<bool>,
    /// The trace recorded so far; with `stop`, it stops and its events go
    /// with the answer. invalid_transition when none is being recorded.
    caf::replies_to<trace_atom, get_atom, bool>::with<trace_snapshot>,
    /// Returns what every tenant uses of its lease now.
    caf::replies_to<usage_atom>::with<quota_usage>,
    /// What `tenant` (every tenant when empty) may still use now, from the
    /// live quota book; unknown_tenant for a tenant without a grant.
    caf::replies_to<headroom_atom, std::string>::with<headroom_report>,
    /// A dry run of `plan` against the grants, quotas and device memory,
    /// from the live book's usage with `from_now`. Nothing runs.
    caf::replies_to<simulate_atom, allocation_plan>::with<simulation_report>,
    /// Sends buffered audit events on; replies when done.
    caf::replies_to<flush_atom>::with<bool>,
    /// Makes an object of `tenant` from `data` (docs/objects.md), kept on
    /// device `device` (any device with memory that takes it when empty;
    /// host memory only when the fleet has none), with one handle.
    caf::replies_to<object_atom, put_atom, std::string, host_buffer,
                    std::string>::with<object_info>,
    /// A host copy of object `id` for `tenant`.
    caf::replies_to<object_atom, get_atom, std::string,
                    uint64_t>::with<host_buffer>,
    /// Drops one handle of object `id`; the object is freed when no handle
    /// and no item holds it.
    caf::reacts_to<object_atom, release_atom, uint64_t>,
    /// Every live object of `tenant` (every tenant when empty).
    caf::replies_to<object_atom, list_atom,
                    std::string>::with<std::vector<object_info>>,
    /// Exports object `id` of `tenant` to other processes of the node under
    /// `grant`; returns the token they attach with (docs/objects.md,
    /// "Sharing across processes").
    caf::replies_to<object_atom, export_atom, std::string, uint64_t,
                    share_grant>::with<std::string>,
    /// Revokes an export of `tenant`: no new attaches (attached processes
    /// keep theirs). False when there is no such export.
    caf::replies_to<object_atom, unexport_atom, std::string,
                    std::string>::with<bool>,
    /// The share socket: process `peer` attaches with `token`, read-write
    /// when `write`. The attachment holds the object (and pins its copy)
    /// until it is detached.
    caf::replies_to<object_atom, attach_atom, std::string, share_peer,
                    bool>::with<attachment_info>,
    /// Ends attachment `id`; `died` when its process died (reclaimed).
    caf::reacts_to<object_atom, detach_atom, uint64_t, bool>,
    /// The exec socket: `bytes` of device memory that a program run by
    /// `cohort exec` leased for `tenant`, charged to its quota across
    /// devices (docs/exec.md). over_memory_quota when they do not fit,
    /// unknown_tenant for a tenant without a grant.
    caf::replies_to<exec_atom, charge_atom, std::string, uint64_t>::with<bool>,
    /// Such bytes given back (the program freed them, or it ended).
    caf::reacts_to<exec_atom, refund_atom, std::string, uint64_t>,
    /// Internal: periodic flush of buffered audit events.
    caf::reacts_to<tick_atom>,
    /// Internal: held-back and waiting items are due for another try.
    caf::reacts_to<retry_atom>,
    /// Internal: an open batch may be due to launch.
    caf::reacts_to<batch_atom>,
    /// Internal: ends for batch sinks are due.
    caf::reacts_to<deliver_atom>>;

/// How the balancer chooses among devices.
enum class placement_policy : uint8_t {
  /// Earliest expected completion from the measured model (the default).
  earliest_completion,
  /// Devices in turn (a baseline).
  round_robin,
  /// The device with the fewest items per stream (a baseline).
  least_loaded,
};

/// Dynamic batching of one kernel.
struct batch_rule {
  bool enabled = false;
  /// Launch when this many items wait, or when the oldest waited this long.
  uint32_t preferred = 32;
  std::chrono::microseconds max_delay{2000};
  /// Only items with at most this many output elements are batched.
  uint64_t max_item_elements = 65536;
};

/// Settings of the balancer.
struct balancer_config {
  /// Placements per item before it fails with retries_exhausted.
  uint32_t max_attempts = 4;
  /// Every device's circuit breaker.
  balancer::circuit_config circuit;
  /// Predicted run times on a degraded device are multiplied by this.
  double degraded_penalty = 4.0;
  placement_policy policy = placement_policy::earliest_completion;
  /// Recent runs per (kernel, size class, device) the model keeps.
  uint32_t model_window = balancer::run_time_model::default_window;
  /// Per kernel id.
  std::array<batch_rule, kernels::kernel_id_limit> batch{};
  /// Gangs may span NUMA nodes when no node has enough devices.
  bool gang_cross_numa = false;
  /// Refuse new items (audit_unavailable) while the audit log cannot be
  /// written.
  bool audit_fail_closed = true;
  /// Every device's pool options (by index), for dry runs.
  std::vector<devices::memory::pool_options> pools;
};

/// The balancer's state (actors/balancer/state.hpp).
struct balancer_state;

/// Spawned with the static facts of every device (indices match the device
/// actors the supervisor announces with `up`) and the quota actor's lease.
balancer_actor::behavior_type
balancer_impl(balancer_actor::stateful_pointer<balancer_state> self,
              std::vector<device_info> devices, quota_lease lease,
              audit_actor audit, balancer_config cfg);

} // namespace cohort::actors
