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
#include <deque>
#include <unordered_map>
#include <vector>

#include <caf/typed_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "actors/audit.hpp"
#include "actors/batching.hpp"
#include "actors/circuit_breaker.hpp"
#include "actors/client_sink.hpp"
#include "actors/device_actor.hpp"
#include "actors/placement_model.hpp"
#include "actors/quota_book.hpp"
#include "devices/input_cache.hpp"
#include "messages/errc.hpp"
#include "messages/stats.hpp"

namespace cohort::actors {

/// Where clients submit: `(submit_atom, work_item, client_sink)`. Every
/// submitted item ends at its sink exactly once.
using entry_actor = caf::typed_actor<
    /// Submits `item`; its end arrives at `sink`.
    caf::reacts_to<submit_atom, work_item, client_sink>,
    /// Cancels the item `id` that `sink` submitted (see balancer_actor).
    caf::reacts_to<cancel_atom, uint64_t, client_sink>>;

using balancer_actor = device_listener::extend<
    /// Admits `item` for its tenant under the lease, holds it back (policy
    /// QUEUE / CPU_FALLBACK) or refuses it; either way it ends at `sink`.
    caf::reacts_to<submit_atom, work_item, client_sink>,
    /// New lease terms from the quota actor (changed limits of the same
    /// tenants, in the same order; other leases are refused and audited).
    caf::reacts_to<lease_atom, quota_lease>,
    /// Device `index` (re)joined with a new actor.
    caf::reacts_to<up_atom, uint32_t, device_actor>,
    /// Device `index` left with `reason`; `permanent` when it will not return.
    caf::reacts_to<down_atom, uint32_t, caf::error, bool>,
    /// Device `index` is now `status` (a device_status: available, degraded
    /// or draining) while its actor keeps running, because of `why`.
    caf::reacts_to<status_atom, uint32_t, uint8_t, std::string>,
    /// The audit log can (`ok`) or cannot be written, and why: while it
    /// cannot, nothing is admitted (unless the config keeps running).
    caf::reacts_to<audit_atom, bool, std::string>,
    /// Cancels the item `id` of client `sink`: one that waits ends now with
    /// cancelled, one that runs ends with cancelled when its launch ends
    /// (its result is dropped). Unknown ids are ignored.
    caf::reacts_to<cancel_atom, uint64_t, client_sink>,
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
    /// Returns what every tenant uses of its lease now.
    caf::replies_to<usage_atom>::with<quota_usage>,
    /// Sends buffered audit events on; replies when done.
    caf::replies_to<flush_atom>::with<bool>,
    /// Internal: periodic flush of buffered audit events.
    caf::reacts_to<tick_atom>,
    /// Internal: held-back and waiting items are due for another try.
    caf::reacts_to<retry_atom>,
    /// Internal: an open batch may be due to launch.
    caf::reacts_to<batch_atom>>;

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
  circuit_config circuit;
  /// Predicted run times on a degraded device are multiplied by this.
  double degraded_penalty = 4.0;
  placement_policy policy = placement_policy::earliest_completion;
  /// Recent runs per (kernel, size class, device) the model keeps.
  uint32_t model_window = run_time_model::default_window;
  /// Per kernel id.
  std::array<batch_rule, kernels::kernel_id_limit> batch{};
  /// Gangs may span NUMA nodes when no node has enough devices.
  bool gang_cross_numa = false;
  /// Refuse new items (audit_unavailable) while the audit log cannot be
  /// written.
  bool audit_fail_closed = true;
};

struct balancer_state {
  using clock = std::chrono::steady_clock;

  /// The balancer's view of one device.
  struct slot {
    device_info info;
    device_actor handle;
    device_status status = device_status::resetting;
    /// Had an actor before (a later `up` is a restart).
    bool started = false;
    /// An operator drains it: it comes back from a restart draining.
    bool draining = false;
    /// Offline because an operator took it offline (it may come back), not
    /// given up after losses.
    bool operator_offline = false;
    circuit_breaker breaker;
    bool has_memory = false;
    /// Sum of predicted run times of items placed and not yet ended, their
    /// number and their cost units.
    double backlog_ns = 0;
    uint32_t placed = 0;
    double placed_units = 0;
    /// Cost units done per ns of device time, all kernels (its measured
    /// throughput per stream; 0 = none yet).
    double units_done = 0;
    double ns_done = 0;
    /// The gang that holds it (its ticket; 0 = none).
    uint64_t gang = 0;
    /// The inputs it holds between launches, as the balancer models them
    /// (the same policy as the device's own input cache).
    devices::input_cache resident;
    /// Run requests sent to the device actor and not yet answered, and
    /// tickets placed here that wait for the device to answer some: they go
    /// out together, one message for many items, when it does.
    uint32_t sent = 0;
    std::vector<uint64_t> queued;
    /// Device memory charged to tenants for items that were on it when it
    /// was lost: its ledger holds their blocks until the device is reset,
    /// so the balancer's book keeps them too until it comes back (up) or
    /// is gone for good (its memory released).
    std::vector<std::pair<int, uint64_t>> stranded;
    device_stats stats;
  };
  /// One admitted item until it ends.
  struct record {
    work_item item;
    client_sink sink;
    /// Index of its tenant in the quota book.
    int tenant = 0;
    uint64_t device_mask = 0;
    /// Device memory it takes (item_bytes), charged to the device it is
    /// placed on while it is there.
    uint64_t bytes = 0;
    double cost_units = 0;
    /// Its cost on the device it is placed on: without the inputs that
    /// device already holds (data locality).
    double device_units = 0;
    /// Device it is placed on (-1 while parked or waiting) and the
    /// prediction made.
    int32_t device = -1;
    double predicted_ns = 0;
    uint32_t attempts = 0;
    /// Devices that failed this item (not tried again unless nothing else is
    /// left).
    uint64_t failed_on = 0;
    bool on_gpu_before = false;
    /// What made its last placement fail (none before the first failure),
    /// in words for the audit log.
    errc last_failure = errc::none;
    std::string why;
    /// Its size class in the run-time model; placed as an exploration run
    /// (no measurement for its cell on that device yet).
    uint8_t cls = 0;
    bool probe = false;
    /// Waits in its tenant's ready queue.
    bool ready = false;
    /// Dynamic batching: waits in an open batch; or the ticket of the
    /// merged launch it is part of; a merged launch lists its members.
    bool batching = false;
    uint64_t batch = 0;
    std::vector<uint64_t> members;
    /// Gangs: the slices of a gang item (tickets), the gang a slice belongs
    /// to and its position, and the outputs of slices done.
    std::vector<uint64_t> slices;
    uint64_t gang_parent = 0;
    uint32_t slice = 0;
    std::vector<kernels::kernel_output> parts;
    uint32_t parts_done = 0;
    /// Sent to a CPU worker because device memory was its limit.
    bool memory_fallback = false;
    /// Cancelled while placed or part of a launch: it ends with cancelled
    /// when that launch ends.
    bool cancelled = false;
    /// Parked (no device of its grant takes work now) until this time, its
    /// tenant's queue timeout after it first parked; reset when placed.
    clock::time_point park_deadline{};
    /// Waiting for device memory, until.
    bool waiting_memory = false;
    clock::time_point deadline{};
    /// Devices that refused its memory although the balancer's books let it
    /// through (their exact layout, fragmentation, a lost device's blocks
    /// not yet freed): skipped until `retry_at` (backoff doubling per
    /// refusal). Refusals do not count as placements; they end the item
    /// only when they go on past its tenant's queue timeout from the first.
    uint64_t memory_refused = 0;
    uint32_t memory_refusals = 0;
    clock::time_point retry_at{};
    clock::time_point first_refusal{};
    caf::error memory_why;
    clock::time_point admitted_at{};
  };
  /// An item held back before admission (in-flight cap, rate limit).
  struct held_item {
    work_item item;
    client_sink sink;
    /// Its shape (bytes, cost), worked out when it was submitted.
    item_shape shape;
    clock::time_point deadline;
    /// The limit that held it back.
    caf::error why;
  };
  std::vector<slot> devices;
  std::unordered_map<uint64_t, record> outstanding;
  /// A client's item: its sink and its work id.
  struct client_key {
    caf::actor_addr sink;
    uint64_t id;
    bool operator==(const client_key& other) const {
      return id == other.id && sink == other.sink;
    }
  };
  struct client_key_hash {
    size_t operator()(const client_key& k) const noexcept {
      return std::hash<caf::actor_addr>{}(k.sink) ^ (k.id * 0x9e3779b97f4a7c15);
    }
  };
  /// Every item held back or admitted and not yet ended, by client: its
  /// ticket (0 while held back). A second item with the same key is refused
  /// (duplicate_id); cancel finds items here.
  std::unordered_map<client_key, uint64_t, client_key_hash> by_client;
  /// Tickets waiting for a device of their mask to come back, in order.
  std::vector<uint64_t> parked;
  /// Parked items are not looked at again before this (outside of device
  /// events), however often the balancer pumps.
  clock::time_point next_parked_look{};
  /// A circuit closed: parked items get a look with the next pump.
  bool parked_due = false;
  /// Tickets waiting for device memory (FIFO).
  std::deque<uint64_t> memory_waiting;
  /// Per tenant (book index): items held back before admission (FIFO).
  std::vector<std::deque<held_item>> held;
  /// Admitted items waiting for a device, per tenant (book index), and one
  /// more queue for merged launches; served by weighted fair queuing on
  /// virtual time.
  std::vector<std::deque<uint64_t>> ready;
  std::vector<double> vtime;
  double vclock = 0;
  /// Items and cost units waiting in the ready queues.
  uint64_t ready_count = 0;
  double ready_units = 0;
  /// Gang items waiting for their devices, oldest first.
  std::deque<uint64_t> gangs_waiting;
  /// Open batches by what their members share, with their due time.
  struct open_batch {
    std::vector<uint64_t> members;
    clock::time_point due;
  };
  std::unordered_map<batching::batch_key, open_batch, batching::batch_key_hash>
      batches;
  run_time_model model;
  /// Model cells (device, kernel, class) with an exploration run in flight.
  std::unordered_map<uint32_t, uint32_t> probing;
  uint32_t round_robin = 0;
  clock::time_point started_at;
  bool pumping = false;
  bool pump_again = false;
  quota_book book;
  audit_buffer audit;
  balancer_config cfg;
  balancer_stats counters;
  /// Latency histograms, one per (device, kernel): index
  /// device * kernels + kernel; bucket counts as in latency_histogram plus
  /// the sum in seconds.
  struct latency_cell {
    std::array<uint64_t, latency_bounds_s.size() + 1> buckets{};
    uint64_t count = 0;
    double sum_s = 0;
  };
  std::vector<latency_cell> latency;
  uint64_t next_ticket = 0;
  /// The time of the message being handled (one clock read per message),
  /// and the wall clock then for the audit log: steady + `wall_offset_ns`,
  /// which each audit tick sets again.
  clock::time_point now{};
  int64_t now_wall_ns = 0;
  int64_t wall_offset_ns = 0;
  bool closed = false;
  /// The audit log cannot be written now, and why.
  bool audit_down = false;
  std::string audit_why;
  /// Set by the exit handler: nothing is admitted or placed any more.
  bool stopping = false;
  bool retry_scheduled = false;
  /// Re-entrancy guard of `wake`.
  bool waking = false;
  bool wake_again = false;
  static inline const char* name = "cohort.balancer";
};

/// Spawned with the static facts of every device (indices match the device
/// actors the supervisor announces with `up`) and the quota actor's lease.
balancer_actor::behavior_type
balancer_impl(balancer_actor::stateful_pointer<balancer_state> self,
              std::vector<device_info> devices, quota_lease lease,
              audit_actor audit, balancer_config cfg);

} // namespace cohort::actors
