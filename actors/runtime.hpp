// The runtime facade: what an embedding application holds. It builds the
// device set from a config, spawns the actors and offers typed submission.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/expected.hpp>

#include "actors/alerts.hpp"
#include "actors/audit.hpp"
#include "actors/balancer/balancer.hpp"
#include "actors/client_hub.hpp"
#include "actors/device_rescan.hpp"
#include "actors/device_roster.hpp"
#include "actors/quota.hpp"
#include "actors/supervisor.hpp"
#include "actors/telemetry.hpp"
#include "devices/sim/sim_device.hpp"
#include "exec/session_server.hpp"
#include "messages/cohort.pb.h"
#include "messages/host.hpp"

namespace cohort::kernels::bundle {
struct trust_store;
struct isolation;
} // namespace cohort::kernels::bundle

namespace cohort::devices::gpu {
struct discovery;
} // namespace cohort::devices::gpu

namespace cohort::devices::health {
class gpu_monitor;
} // namespace cohort::devices::health

namespace cohort::objects {
class share_server;
} // namespace cohort::objects

namespace cohort::actors {

/// The kernel bundles a runtime loaded and refused since it started.
struct bundle_counts {
  uint64_t loaded = 0;
  /// Refusals by reason ("unsigned", "unknown_key", "tampered_blob", ...).
  std::map<std::string, uint64_t> refused;
  /// Bundle directories whose last load was refused, by that refusal's
  /// reason (one that loaded since is not counted).
  std::map<std::string, uint64_t> refused_now;
  /// The reason of each directory's last load ("" when it loaded).
  std::map<std::string, std::string> last_reason;
  /// Kernel host processes of this process's bundles (every runtime's:
  /// kernels are the process's): started, and calls that crashed, aborted
  /// or exited theirs or ran past their time.
  uint64_t hosts_started = 0;
  uint64_t host_crashes = 0;
  uint64_t host_timeouts = 0;
};

/// A device's health as the node kept it (runtime::device_health).
struct device_health_view {
  std::string device;
  bool simulated = false;
  /// The newest sample kept and when it was taken (`now_ns`); for a
  /// device that never had one, why (unavailable_reason, now_ns 0).
  devices::health::gpu_sample now;
  int64_t now_ns = 0;
  /// The samples kept, oldest first, one per `interval`.
  std::vector<devices::health::timed_sample> samples;
  std::chrono::milliseconds interval{0};
  /// Its Xids so far and the last code (0: none), and the last ones with
  /// when each was seen (oldest first).
  uint64_t xid_errors = 0;
  uint32_t last_xid = 0;
  std::vector<devices::health::timed_xid> xids;
};

/// A config that works with no file: one CPU worker per core (hwloc), no
/// simulated GPUs, and tenant "default" granted every kernel on every device.
pb::RuntimeConfig default_config();

/// Adds `n` simulated GPUs named sim0..sim{n-1} with 16 GiB, 4 streams and
/// speeds cycling through 1, 1, 2, 4.
void add_sim_gpus(pb::RuntimeConfig& cfg, uint32_t n);

/// The simulated device a config entry describes; malformed_config names
/// the first problem.
caf::expected<devices::sim::sim_params> sim_params_of(const pb::SimGpu& g);

/// The `cohort` program device host processes run: devices.host_binary,
/// else the one beside the running program, else the installed one;
/// malformed_config when none can be run.
caf::expected<std::string> host_binary(const pb::RuntimeConfig& cfg);

/// Whether the node can start device host processes for its real GPUs.
struct gpu_hosting {
  /// Its actor system has CAF's middleman and a `cohort` program is found
  /// (a remote device host: never, its GPUs run in it).
  bool can_host = true;
  /// Why not, for the audit.
  std::string why_not;
};

/// Where real GPU `name` runs (devices.gpu_host_processes and
/// devices.gpu_host_process, docs/device-hosts.md): true for a host process
/// of its own. When a GPU that runs in a host process by default does not,
/// `why` (if given) says why; it stays empty otherwise.
bool gpu_in_host(const pb::RuntimeConfig& cfg, const std::string& name,
                 const gpu_hosting& hosting, std::string* why = nullptr);

/// The name a GPU that a rescan found joins the fleet under: the one it
/// was listed as (`listed`, "cuda1", "mig0.1") when no device has it, else
/// its prefix (the letters it starts with) and the lowest number above
/// every name of that prefix in `taken` ("cuda2").
std::string fresh_gpu_name(const std::string& listed,
                           const std::vector<std::string>& taken);

/// Builds the devices a config describes (CPU workers first, then real
/// GPUs, then simulated GPUs; those in host processes as their node-side
/// stand-ins, hosted_device); malformed_config names the first problem.
/// None is refused unless the config joins remote hosts (network.join),
/// whose devices runtime::start adds. `found`, if given, gets what each GPU
/// backend found.
caf::expected<std::vector<std::shared_ptr<devices::device>>>
make_devices(const pb::RuntimeConfig& cfg, const gpu_hosting& hosting = {},
             devices::gpu::discovery* found = nullptr);

/// What configure_memory set up: every device's pool by index, and the
/// ledger that holds every tenant's quota across devices.
struct memory_setup {
  std::vector<devices::memory::pool_options> pools;
  std::shared_ptr<devices::memory::tenant_ledger> ledger;
};

/// Configures each device's memory for `lease` (compiled from `cfg` for
/// `devs`): the runtime's share of it, the pool sized for it, its tenants'
/// quotas and reservations, and one ledger for every tenant's quota.
/// malformed_config names the first problem.
caf::expected<memory_setup> configure_memory(
    const std::vector<std::shared_ptr<devices::device>>& devs,
    const pb::RuntimeConfig& cfg, const quota_lease& lease,
    std::shared_ptr<devices::memory::memory_observer> observer = nullptr);

/// A running Cohort instance inside `sys`. Thread-safe: any thread may submit.
/// Destroying it stops the actors after writing out the audit log.
class runtime {
public:
  ~runtime();

  /// Checks `cfg`, opens the audit log and starts every actor; `extra`
  /// devices join after the config's, and `observer` (may be null) sees
  /// every device allocation (the chaos harness checks quotas with it).
  static caf::expected<std::unique_ptr<runtime>>
  start(caf::actor_system& sys, const pb::RuntimeConfig& cfg,
        std::vector<std::shared_ptr<devices::device>> extra = {},
        std::shared_ptr<devices::memory::memory_observer> observer = nullptr);

  /// Submits one item as its tenant and returns at once; the future gets
  /// its end (its result or a definitive error) exactly once. Nothing waits
  /// per item: the end fills the future from the runtime's own thread, and
  /// `get()` spins a few microseconds before it sleeps. Ids are the
  /// caller's to choose (two items in flight may share one). After `stop()`
  /// the future is already filled with shutting_down.
  work_future submit(work_item item);

  /// Submits one item; `done` is called once with its end, on the runtime's
  /// callback thread, one callback at a time in the order items end. A
  /// callback may submit more work, and may block (delaying the callbacks
  /// after it); an exception it throws is dropped. After `stop()` `done` is
  /// called at once, on the calling thread, with shutting_down.
  /// The ticket cancels the item (cancel(ticket)); empty after stop().
  work_ticket submit(work_item item, work_callback done);

  /// Submits `items` as their tenants, in order, in one message to the
  /// runtime (one per 65,536 items) instead of one per item: each is
  /// admitted as if submitted alone, and its end fills its future (same
  /// order as `items`). After `stop()` every future is filled with
  /// shutting_down.
  std::vector<work_future> submit(std::vector<work_item> items);

  /// Submits `items` in order in one message; `done` is called once per
  /// item with the item's id and its end, on the callback thread as
  /// `submit(item, done)` does. After `stop()` it is called for each item
  /// at once, on the calling thread, with shutting_down.
  void submit(std::vector<work_item> items, batch_callback done);

  /// Cancels the item of `f`: one still waiting ends with cancelled and
  /// never runs; one running finishes on its device and ends with
  /// cancelled, its result dropped. Exactly one end either way; nothing
  /// when it already ended.
  void cancel(const work_future& f);

  /// Cancels the item of `t` (submitted with a callback), by the same rules.
  void cancel(const work_ticket& t);

  /// Cancels every item submitted through this runtime's C++ API (submit,
  /// run) whose id is `id`, by the same rules; ids are the caller's, so
  /// several items may share one.
  void cancel(uint64_t id);

  /// Submits one item as its tenant and waits for its end (`submit` and
  /// `get`). After `stop()` it ends at once with shutting_down.
  caf::expected<work_result> run(work_item item);

  /// As `run(item)`, waiting at most `timeout` (positive). When the time is
  /// up the item is cancelled and the call ends with timed_out: an item
  /// still waiting never runs; one already running finishes on its device
  /// and its result is dropped. Either way the audit log records its one
  /// end. A timeout that is not positive is invalid_arguments.
  caf::expected<work_result> run(work_item item,
                                 std::chrono::milliseconds timeout);

  /// The front door for asynchronous clients: send it
  /// `(submit_atom, work_item, client_sink)`; the end arrives at the sink.
  /// It is the balancer, which admits under the quota actor's lease. Work
  /// ids must be unique among a client's items in flight (a second one is
  /// refused with duplicate_id); a null sink is refused (audited and
  /// counted, as no one could hear the end). After `stop()` it stays open
  /// as long as a handle to it is held, and refuses every submission with
  /// shutting_down.
  entry_actor entry() const { return balancer_; }

  /// The quota actor (headroom, dry runs, the lease).
  const quota_actor& quota() const { return quota_; }

  /// Static facts of every device, by index (a copy: a rescan may add a
  /// GPU meanwhile, docs/gpu.md).
  std::vector<device_info> devices() const { return roster_->infos(); }

  /// The simulated GPU named `name` (for fault injection), or nullptr
  /// (also for one in a host process: its device is in that process).
  std::shared_ptr<devices::sim::sim_device>
  sim_device(const std::string& name) const;

  /// Injects fault `f` (a simulated device's own kind: LOSE to THERMAL)
  /// into simulated device `name`, in this process or in the host process
  /// it runs in (docs/device-hosts.md). Errors: unknown_device;
  /// invalid_fault (not a simulated device, or a fault it does not take);
  /// invalid_transition (its host process is not up now); device_lost (its
  /// host did not answer within 5 s).
  caf::error inject_sim_fault(const std::string& name, const sim_fault& f);

  /// The pid of the host process device `name` runs in now; 0 when it runs
  /// in this process, has no host process at the moment, or is unknown.
  int host_pid(const std::string& name) const;

  /// Chaos: shuts down this node's TCP connection to the host device
  /// `name` runs on, its host process or the remote host it joined, in
  /// both directions, as a failed network would (docs/device-hosts.md).
  /// CAF's middleman sees the connection drop: every device of that host
  /// is lost. A host process is replaced. A remote host is rejoined once
  /// `hold` passed: until then the node's attempts fail as if the network
  /// were still down. Errors: unknown_device; invalid_fault for a device
  /// of the node's process; invalid_transition when it has no connection
  /// now.
  caf::error cut_connection(const std::string& name,
                            std::chrono::milliseconds hold = {});

  /// Counters of the balancer (per device) and of admission.
  caf::expected<balancer_stats> placement_stats();
  caf::expected<quota_stats> admission_stats();

  /// What `tenant` (every tenant when empty) may still use now.
  caf::expected<headroom_report> headroom(const std::string& tenant = {});

  /// A dry run of `plan` against this runtime's grants, quotas and devices.
  caf::expected<simulation_report> simulate(allocation_plan plan);

  /// Every device's memory (pool, limits, statistics, leaks), by index.
  caf::expected<std::vector<memory_snapshot>> memory_stats();

  /// Operators: drain a device (what runs there finishes, nothing new goes
  /// there), take it offline now (its work moves), bring it online again.
  /// Errors: unknown_device; invalid_transition (draining an offline device,
  /// bringing online one that is being reset).
  caf::error drain(const std::string& device);
  caf::error set_offline(const std::string& device);
  caf::error set_online(const std::string& device);

  /// Operators: changes a tenant's in-flight cap, device-memory quota or
  /// rate (the fields set in `limits`). Errors: unknown_tenant;
  /// malformed_config when the new limits do not fit the devices (a quota
  /// above the memory of its devices, a bad rate).
  caf::error set_tenant_limits(const std::string& tenant,
                               const pb::TenantLimits& limits);

  /// Appends an operator's action to the audit log (kind ADMIN).
  void audit_admin(std::string detail);

  /// The alerts firing now (in-process rules, see `cohort.pb.AlertRules`).
  caf::expected<std::vector<cohort::alert>> alerts();

  /// Loads the signed kernel bundle in `dir` under this runtime's trust
  /// settings (`kernel_bundles` in its config) and returns its kernels'
  /// names. Audited either way; a refusal is also counted, alerted
  /// (kernel_bundle_refused, until the same directory loads) and returned
  /// as bundle_refused ("REASON: what was wrong").
  caf::expected<std::vector<std::string>>
  load_kernel_bundle(const std::string& dir);

  /// Device-resident objects (docs/objects.md). `put_object` makes one of
  /// `tenant` from `data`, kept on device `device` (empty: the granted
  /// device with memory that has the least work), with one handle that the
  /// caller owns; `release_object` drops a handle (and every result with
  /// an object, work_result::object, brings one). `get_object` copies one
  /// to the host; `objects` lists the live ones of `tenant` (every tenant
  /// when empty).
  caf::expected<object_info> put_object(const std::string& tenant,
                                        host_buffer data,
                                        const std::string& device = {});
  caf::expected<host_buffer> get_object(const std::string& tenant, uint64_t id);
  void release_object(uint64_t id);
  caf::expected<std::vector<object_info>>
  objects(const std::string& tenant = {});

  /// Job control (docs/jobs.md). `items` lists the live items `f` takes
  /// (an empty filter: all of them); `item` gives one by job number, live
  /// or among the last that ended (unknown_item otherwise);
  /// `cancel_items` cancels every live item `f` takes (at least one field
  /// set, else invalid_arguments), each audited as cancelled by `who`, and
  /// returns how many. `client` is the number this runtime's own items
  /// carry (item_view::client).
  caf::expected<std::vector<item_view>> items(const item_filter& f = {});
  caf::expected<item_view> item(uint64_t job);
  caf::expected<uint64_t> cancel_items(const item_filter& f,
                                       const std::string& who);
  uint64_t client() const;

  /// Tracing (docs/tracing.md): `start_trace` starts recording a trace of
  /// at most `max_events` events (1 to max_trace_events, else
  /// invalid_arguments; invalid_transition while one is being recorded);
  /// `trace` returns what it holds so far and, with `stop`, stops it
  /// (invalid_transition when none is being recorded). Write it with
  /// chrome_trace_json.
  caf::error start_trace(uint64_t max_events = default_trace_events);
  caf::expected<trace_snapshot> trace(bool stop);

  /// Sharing objects with other processes of the node (docs/objects.md,
  /// "Sharing across processes"). `export_object` exports object `id` of
  /// `tenant` under `grant` and returns the token a process attaches with
  /// through `share_socket()`; `unexport_object` revokes one (`tenant`
  /// empty: of any tenant). Errors: invalid_arguments (no such object or
  /// token, no share socket), not_granted (another tenant's),
  /// shutting_down.
  caf::expected<std::string> export_object(const std::string& tenant,
                                           uint64_t id, share_grant grant);
  caf::error unexport_object(const std::string& tenant,
                             const std::string& token);
  /// The share socket's path; empty when this runtime does not share.
  const std::string& share_socket() const { return share_socket_; }

  /// `cohort exec`'s sessions on the exec socket (docs/exec.md): what they
  /// hold and what happened since start; nullopt when the config names no
  /// exec socket.
  std::optional<exec::session_stats> exec_sessions() const;
  /// The exec socket's path; empty without one.
  std::string exec_socket() const;

  /// Lists the machine's GPUs afresh, in a child process, and acts on what
  /// changed (docs/gpu.md, "Rescanning at run time"): a GPU missing from
  /// enough scans in a row is removed, one that came back is restarted (in
  /// a host process), one that appeared is added (add_device, in a host
  /// process of its own) or, when it cannot be, reported with why. One
  /// scan at a time.
  /// invalid_transition when the node runs no GPUs of this machine
  /// (devices.gpus: false), shutting_down after stop, the scan's error
  /// (io_error, timed_out) when it failed.
  caf::expected<rescan_report> rescan();
  /// Adds `dev` to the running fleet at the next index, which it returns
  /// (how a rescan adds a GPU that appeared, docs/gpu.md; an embedder may
  /// add a simulated GPU the same way). The grants whose device patterns
  /// match its name cover it, its memory is set up as the config says
  /// (pool, quotas and reservations of those patterns), the audit log
  /// names it, and its actor starts (in its host process when it runs in
  /// one): it takes work once it is up. Errors: invalid_arguments (no
  /// device, a name that is empty or taken, a full fleet of 64 devices),
  /// malformed_config (the config's quotas do not fit it), shutting_down.
  caf::expected<size_t> add_device(std::shared_ptr<devices::device> dev);

  /// Rescans so far; nullopt when the node does not rescan.
  std::optional<rescan_counts> rescans() const;
  /// The devices removed from the machine now, by name, with why.
  std::map<std::string, std::string> removed_devices() const;
  /// devices.rescan_interval_ms in force (0: only when asked).
  std::chrono::milliseconds rescan_interval() const;

  /// Bundles loaded and refused since start.
  bundle_counts kernel_bundles() const;

  /// Xid errors per device, by index: how many, and the last code (0: none).
  std::vector<std::pair<uint64_t, uint32_t>> xid_errors() const;

  /// The Xid policy it started with (supervision { xid }).
  const devices::xid_policy& xid_policy() const { return xid_policy_; }

  /// Device `name`'s health as the node kept it: its newest sample (or
  /// why there is none), the samples its sampler kept every
  /// `supervision { telemetry_interval_ms }` (the last
  /// devices::device::telemetry_kept, oldest first) and its recent Xids;
  /// unknown_device for a name the node does not have.
  caf::expected<device_health_view>
  device_health(const std::string& name) const;

  /// Chaos: crashes the device's actor (the device is fine); the supervisor
  /// restarts it.
  caf::error crash_device_actor(const std::string& device);

  /// Writes every event so far to the audit log and syncs it (unless its
  /// fsync policy is FSYNC_NEVER); returns the number of records in the log.
  /// Its return acknowledges the records of every item that ended before
  /// the call (docs/audit.md).
  caf::expected<uint64_t> flush_audit();

  /// The audit log's counters (records, bytes, fsyncs, rotations,
  /// recoveries, write errors) and its active file.
  caf::expected<cohort::audit_stats> audit_stats();

  const std::string& audit_path() const { return audit_path_; }

  /// Stops admitting (items held back end with shutting_down), lets items
  /// in flight finish for up to the config's shutdown_drain_ms, ends what is
  /// left with shutting_down, flushes the audit log and stops every actor.
  /// Every admitted item still ends exactly once. Afterwards every call
  /// that needs the actors ends with shutting_down (placement_stats() still
  /// reports the final counters), and so does every submission. A later
  /// call waits until the first has stopped the runtime and the callbacks
  /// have run (from a callback it returns at once).
  void stop();

  /// See client_hub::after_callbacks (after stop: runs `fn` at once).
  void after_callbacks(std::function<void()> fn);

  /// True on the thread that runs submit()'s callbacks (where the runtime
  /// must not be destroyed: its destructor waits for that thread).
  bool on_callback_thread() const;

  /// Whether `stop()` was called.
  bool stopped() const { return stopped_; }

private:
  explicit runtime(caf::actor_system& sys);
  /// Makes the rescanner of the config's GPUs and starts its rescans.
  void start_rescans(const pb::RuntimeConfig& cfg);
  /// Adds the GPU a rescan found, in a device host process of its own,
  /// under a name of the fleet's own (fresh_gpu_name); why not when it
  /// cannot run in one.
  caf::expected<rescan_gpu>
  add_scanned_gpu(const devices::gpu::scanned_gpu& found);

  caf::actor_system& sys_;
  /// Every device by index; a rescan appends the GPUs it adds.
  std::shared_ptr<device_roster> roster_ = std::make_shared<device_roster>();
  std::string audit_path_;
  audit_actor audit_;
  balancer_actor balancer_;
  /// The sink of submit and run.
  std::unique_ptr<client_hub> hub_;
  std::string share_socket_;
  std::unique_ptr<cohort::objects::share_server> share_;
  std::unique_ptr<exec::session_server> exec_;
  /// Rescans the machine's GPUs (null with devices.gpus: false).
  std::unique_ptr<device_rescanner> rescanner_;
  quota_actor quota_;
  supervisor_actor supervisor_;
  alert_actor alerts_;
  telemetry_actor telemetry_;
  std::chrono::milliseconds telemetry_interval_{1000};
  devices::xid_policy xid_policy_;
  /// The config as started, with the limits operators changed since.
  std::mutex cfg_mtx_;
  pb::RuntimeConfig cfg_;
  std::shared_ptr<devices::memory::tenant_ledger> ledger_;
  /// What start was given and found, for devices added later: the
  /// allocation observer, and whether GPUs can run in host processes.
  std::shared_ptr<devices::memory::memory_observer> observer_;
  gpu_hosting hosting_;
  /// Each GPU backend's health library as start found it, by vendor: a
  /// GPU a rescan adds is watched through it.
  std::map<std::string, std::shared_ptr<devices::health::gpu_monitor>>
      monitors_;
  std::shared_ptr<const kernels::bundle::trust_store> trust_;
  /// How bundles load in isolation: the helper, the plugins, the timeout;
  /// found when the first bundle loads (under bundle_mtx_).
  std::shared_ptr<const kernels::bundle::isolation> isolation_;
  std::chrono::milliseconds bundle_timeout_{60'000};
  bool bundle_in_process_ = false;
  uint64_t bundle_host_memory_ = 0; // set at start
  mutable std::mutex bundle_mtx_;
  bundle_counts bundle_counts_;
  std::chrono::milliseconds drain_timeout_{10000};
  std::atomic<bool> stopped_{false};
  /// Set when the first stop() has returned; later calls wait for it.
  std::mutex stop_mtx_;
  std::condition_variable stop_cv_;
  bool stop_done_ = false;

  /// Audits, counts and alerts what became of the bundle in `dir`: loaded
  /// (`reason` empty; `name` is the bundle's) or refused for `reason`.
  void record_bundle(const std::string& dir, const std::string& name,
                     const std::string& reason, const std::string& detail);

  /// Sends `xs` to `dest` and waits for its reply; after stop, a receiver
  /// that is gone is shutting_down.
  template <class T, class Handle, class... Ts>
  caf::expected<T> ask(const Handle& dest, Ts... xs);
};

} // namespace cohort::actors
