// The balancer's state: what it knows of every device, every admitted item
// until it ends, the held-back and waiting items, and its books. Internal to
// the balancer (and the runtime, which spawns it).
#pragma once

#include <array>
#include <bitset>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <memory_resource>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "actors/audit.hpp"
#include "actors/balancer/accounting.hpp"
#include "actors/balancer/balancer.hpp"
#include "actors/balancer/batching.hpp"
#include "actors/balancer/circuit_breaker.hpp"
#include "actors/balancer/cost_model.hpp"
#include "actors/balancer/fleet_index.hpp"
#include "actors/balancer/ready_queues.hpp"
#include "actors/balancer/stats.hpp"
#include "actors/balancer/trace.hpp"
#include "devices/input_cache.hpp"
#include "messages/jobs.hpp"
#include "objects/object_directory.hpp"
#include "objects/share_table.hpp"

namespace cohort::actors {

struct balancer_state {
  using clock = std::chrono::steady_clock;

  /// A question to a device's actor without its answer yet (ask_device):
  /// what runs with the answer (a std::function<void(R&)> for the answer's
  /// type R) or with an error.
  struct ask {
    std::shared_ptr<void> ok;
    std::function<void(caf::error&)> fail;
  };
  /// The balancer's view of one device.
  struct slot {
    device_info info;
    device_actor handle;
    device_status status = device_status::resetting;
    /// Had an actor before (a later `up` is a restart).
    bool started = false;
    /// The generation of its actor the supervisor last told of.
    uint32_t generation = 0;
    /// Offline because an operator took it offline (it may come back), not
    /// given up after losses.
    bool operator_offline = false;
    balancer::circuit_breaker breaker;
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
    std::vector<balancer::ranked_ticket> queued;
    /// No ticket in `queued` has a lower priority (work_item::priority):
    /// the lowest pushed since it was last empty.
    int32_t queued_low = 0;
    /// What reaching it costs, measured when it runs outside the node's
    /// process (a host process or a remote host).
    balancer::crossing_model crossing;
    /// When its crossing was last measured.
    clock::time_point crossing_at{};
    /// In a host process: the kernels of this process whose code its actor
    /// was sent (balancer::code_to_send), and those its process could not
    /// register (their items go elsewhere). A new actor has neither.
    std::bitset<256> code_sent;
    std::bitset<256> code_refused;
    device_stats stats;
    /// What it adds to the drain horizon's sums (while it takes work): its
    /// placed units and its units per ns.
    double drain_units = 0;
    double drain_rate = 0;
    /// What the balancer asked its actor (read, store, share) and has no
    /// answer to yet: how each fails. A lost device fails them at once (the
    /// answer of a device in a host process that died never comes).
    std::unordered_map<uint64_t, ask> asks;
  };
  /// One admitted item until it ends.
  struct record {
    work_item item;
    end_sink sink;
    /// Its number in the node (item_view::job) from its submission; 0 for
    /// the balancer's own records (a merged launch, a gang's slices, the
    /// re-run of an object's item).
    uint64_t job = 0;
    /// Its run request went to its device (placed and no longer in the
    /// device's queue here): it runs.
    bool sent = false;
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
    /// When its run request went to a device outside the node's process
    /// (its crossing is measured from it; unset otherwise), and the input
    /// bytes of the message it went in (its batch).
    clock::time_point sent_at{};
    uint64_t sent_bytes = 0;
    uint32_t attempts = 0;
    /// Devices that failed this item (not tried again unless nothing else is
    /// left).
    uint64_t failed_on = 0;
    bool on_gpu_before = false;
    /// Its tenant's fallback budget kept it off the CPU workers (counted
    /// and audited once).
    bool budget_held = false;
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
    /// when that launch ends; by whom (for its end's message).
    bool cancelled = false;
    std::string cancelled_by;
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
    /// When it was submitted (before admitted_at when it was held back).
    clock::time_point submitted{};
    /// The objects its inputs name (docs/objects.md), each once; it holds
    /// them until it ends. Devices without a copy of one that has no host
    /// copy are left out of its mask.
    std::vector<uint64_t> objects;
    /// Its output becomes this object (keep_on_device; 0 otherwise).
    uint64_t keep_as = 0;
    /// Not a client's item: a re-run of the item that made object
    /// `rebuild_of` (its `keep_as` too), whose every copy was lost. It ends
    /// in the object, not at a sink.
    uint64_t rebuild_of = 0;
    /// Waits for this object's rebuild before it may be placed.
    uint64_t waiting_rebuild = 0;
    /// Device memory charged where it is placed: `bytes` less the copies
    /// of its objects there (read in place, not allocated).
    uint64_t charged = 0;
  };
  /// An item held back before admission (in-flight cap, rate limit).
  struct held_item {
    work_item item;
    end_sink sink;
    uint64_t job = 0;
    /// When it was submitted.
    clock::time_point submitted{};
    /// Its shape (bytes, cost), worked out when it was submitted.
    item_shape shape;
    clock::time_point deadline;
    /// Why it is held back, in words for its listing and its end.
    caf::error why;
    /// The limit that held it back, or that held back its tenant's items
    /// when it came (the next one's): what a later item is told.
    caf::error limit;
  };
  std::vector<slot> devices;
  /// The nodes of the item tables below come from this pool: once it has
  /// grown to the items in flight, an item costs no heap allocation there.
  /// Declared before the tables, so that it outlives them.
  std::unique_ptr<std::pmr::unsynchronized_pool_resource> table_pool =
      std::make_unique<std::pmr::unsynchronized_pool_resource>();
  std::pmr::unordered_map<uint64_t, record> outstanding{table_pool.get()};
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
  std::pmr::unordered_map<client_key, uint64_t, client_key_hash> by_client{
      table_pool.get()};
  /// Ends waiting to go to a batch_sink, each sink's in the order they
  /// happened; delivered together when the balancer reads its deliver
  /// message (sent to itself with the first of them), or at once when a
  /// sink has max_end_batch of them.
  struct pending_ends {
    caf::actor sink;
    std::vector<work_end> ends;
  };
  std::vector<pending_ends> pending;
  std::unordered_map<caf::actor_addr, size_t> pending_index;
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
  /// more queue for merged launches.
  balancer::ready_queues ready;
  /// Gang items waiting for their devices, oldest first.
  std::deque<uint64_t> gangs_waiting;
  /// Open batches by what their members share, with their due time.
  struct open_batch {
    std::vector<uint64_t> members;
    clock::time_point due;
  };
  std::unordered_map<balancer::batching::batch_key, open_batch,
                     balancer::batching::batch_key_hash>
      batches;
  balancer::run_time_model model;
  /// Placement's view of the fleet, so that an item's device is chosen
  /// without a scan (fleet_index), and the devices whose view is out of
  /// date: refreshed before the next placement.
  balancer::fleet_index fleet;
  uint64_t fleet_dirty = 0;
  /// Devices that take work and have room (whatever their circuit), and
  /// devices that take work behind a circuit that is not closed.
  uint64_t takes_room = 0;
  uint64_t circuit_not_closed = 0;
  /// Devices whose key in the index counts a measured crossing (until it
  /// grows old).
  uint64_t crossing_in_index = 0;
  /// Which devices hold each input (by identity) in their modeled input
  /// caches: placement weighs the few devices that hold an item's inputs.
  std::unordered_map<const void*, uint64_t> holders;
  /// Device-resident objects: where their copies are and who holds them
  /// (docs/objects.md).
  objects::object_directory objects;
  /// How objects kept from an item's output (with no host copy) are made
  /// again should every copy be lost: the item that made them, as it was
  /// submitted. Its input objects are held (dependents) until the object
  /// gets a host copy, is written in place or is freed.
  struct lineage_entry {
    work_item item;
    int tenant = -1;
    uint64_t bytes = 0;
    double cost_units = 0;
    uint8_t cls = 0;
    std::vector<uint64_t> inputs;
  };
  std::unordered_map<uint64_t, lineage_entry> lineage;
  /// Objects being rebuilt (their producing item re-runs) and the tickets
  /// of the items that wait for them.
  std::unordered_map<uint64_t, std::vector<uint64_t>> rebuild_waiting;
  /// What else waits for an object being made again (gets), run when it is
  /// or is lost after all.
  std::unordered_map<uint64_t, std::vector<std::function<void()>>>
      after_rebuild;
  /// Objects shared with other processes: exports and attachments.
  objects::share_table shares;
  /// The runtime's user: an export's default grantee.
  uint32_t own_uid = 0;
  /// Objects whose only copy is being read back to host memory before it
  /// is evicted (a spill), and what waits for a spill to end.
  std::unordered_set<uint64_t> spilling;
  std::vector<std::function<void()>> after_spill;
  /// Objects without a host copy being copied from one device to another
  /// (read back to host memory, then stored there): one copy at a time.
  struct device_copy {
    size_t from = 0;
    size_t to = 0;
    /// Tells this copy from a later one between the same devices.
    uint64_t seq = 0;
  };
  std::unordered_map<uint64_t, device_copy> copying;
  uint64_t next_copy = 0;
  /// Keys of slot::asks.
  uint64_t next_ask = 0;
  /// Objects whose last copy failed (the device refused it, or the read
  /// failed), and when one may be tried again.
  std::unordered_map<uint64_t, clock::time_point> copy_after;
  /// The drain horizon's sums over devices that take work: placed units
  /// and units per ns (see drain_ns); updates since they were summed anew.
  double drain_units = 0;
  double drain_rate = 0;
  uint32_t drain_updates = 0;
  /// Model cells (device, kernel, class) with an exploration run in flight.
  std::unordered_map<uint32_t, uint32_t> probing;
  uint32_t round_robin = 0;
  clock::time_point started_at;
  bool pumping = false;
  /// Tenants' queues in the order pump serves them (kept: no allocation
  /// per pump).
  std::vector<size_t> pump_order;
  bool pump_again = false;
  /// The terms leased by the quota actor and the live book under them:
  /// the one record of what tenants use (headroom and dry runs read it),
  /// with the charges of devices lost holding items.
  balancer::accounting acct;
  audit_buffer audit;
  balancer_config cfg;
  balancer_stats counters;
  /// The trace being recorded (docs/tracing.md); none when null.
  std::unique_ptr<balancer::trace_recorder> trace;
  /// Latency histograms, one per (device, kernel).
  balancer::latency_table latency;
  uint64_t next_ticket = 0;
  /// The last job number given (record::job).
  uint64_t next_job = 0;
  /// The last items that ended, at most ended_kept of them in a ring
  /// (`cohort jobs describe` of an item that ended lately): compact, so
  /// that an end costs no allocation (but for a failure's error).
  struct ended_item {
    uint64_t job = 0;
    uint64_t id = 0;
    uint64_t client = 0;
    /// Its tenant (book index) and device (-1: none).
    int tenant = 0;
    int32_t device = -1;
    kernel_id kernel = kernel_id::axpy;
    uint32_t attempts = 0;
    int32_t priority = 0;
    int64_t age_ns = 0;
    /// None: done.
    caf::error err;
  };
  static constexpr size_t ended_kept = 1024;
  std::vector<ended_item> ended;
  size_t ended_next = 0;
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

} // namespace cohort::actors
