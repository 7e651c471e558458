// The supervisor: owns the device actors and each device's life cycle
// (available, degraded, draining, resetting, offline). It notices when a
// device actor dies, tells the balancer (which re-places its work), resets
// and restarts the device within an intensity limit, in the manner of OTP
// supervisors, recreates a context a sticky error poisoned, turns warnings
// into a degraded device, and carries out operators' drain, offline and
// online.
#pragma once

#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include <caf/typed_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "actors/audit.hpp"
#include "actors/balancer/balancer.hpp"
#include "actors/device_actor.hpp"
#include "actors/device_host.hpp"
#include "actors/device_lifecycle.hpp"
#include "actors/device_roster.hpp"
#include "actors/heat_watch.hpp"

namespace cohort::actors {

using supervisor_actor = health_listener::extend<
    /// Spawns every device actor and announces it to the balancer; replies once
    /// all are announced.
    caf::replies_to<start_atom>::with<bool>,
    /// Internal: try to bring device `index` back.
    caf::reacts_to<restart_atom, uint32_t>,
    /// Internal: degraded devices that stayed quiet become available.
    caf::reacts_to<tick_atom>,
    /// The telemetry sampler: device `index`'s readings put it at a new
    /// heat_level (hot: degraded while it lasts; critical: drained until it
    /// is back below), with why (docs/supervision.md, "Health that acts").
    caf::reacts_to<heat_atom, uint32_t, uint8_t, std::string>,
    /// Internal: start `n` of a host process for device `index` ended: its
    /// pid (held in the registry) and its gate's port, or (pid 0) why it
    /// did not start (docs/device-hosts.md).
    caf::reacts_to<launched_atom, uint32_t, uint64_t, int32_t, uint16_t,
                   caf::error>,
    /// Operator: drain the named device (what runs finishes, nothing new is
    /// placed there). Errors: unknown_device, invalid_transition.
    caf::replies_to<drain_atom, std::string>::with<bool>,
    /// Operator: take the named device out of service now; its work moves.
    caf::replies_to<offline_atom, std::string>::with<bool>,
    /// Operator: bring the named device back (a drained one at once, an
    /// offline one after a reset).
    caf::replies_to<online_atom, std::string>::with<bool>,
    /// Chaos: crash the named device's actor.
    caf::replies_to<crash_atom, std::string>::with<bool>,
    /// Rescan (docs/gpu.md): device `index` is gone from the machine, for
    /// `why`. Its actor (and host process) ends, its work moves on, and it
    /// is out of service (device_cause::removed), never restarted; online
    /// is refused until a rescan finds it again.
    caf::reacts_to<remove_atom, uint32_t, std::string>,
    /// Rescan: device `index` (in a host process) is now GPU `ordinal` of
    /// its vendor's runtime, seen through CUDA_VISIBLE_DEVICES `visible`
    /// (empty: the node's): its next host process opens it there.
    caf::reacts_to<move_atom, uint32_t, int32_t, std::string>,
    /// Rescan: removed device `index` is back on the machine: it is
    /// restarted (a new host process).
    caf::reacts_to<restore_atom, uint32_t>,
    /// Rescan: device `index` of the roster is new (a GPU that appeared):
    /// its actor starts, in a host process when it has one, and the
    /// balancer hears of it as of any start. Its index must be the next
    /// one (invalid_arguments otherwise).
    caf::replies_to<add_atom, uint32_t>::with<bool>,
    /// Returns every device's memory, by index (asked of live device actors,
    /// read directly from devices that have none).
    caf::replies_to<memory_atom>::with<std::vector<memory_snapshot>>>;

/// What a device loss restarts.
enum class restart_strategy : uint8_t {
  /// Only the lost device.
  one_for_one,
  /// Every device (devices that share a context or a host process).
  one_for_all,
};

/// Restart policy and watchdog settings.
struct supervisor_config {
  restart_strategy strategy = restart_strategy::one_for_one;
  /// Intensity: at most this many restarts of one device within
  /// `restart_period`; one more loss takes it offline.
  uint32_t max_restarts = 3;
  std::chrono::milliseconds restart_period{10000};
  /// Pause between a loss and the restart, doubled for each restart within
  /// the period, up to `max_restart_delay`.
  std::chrono::milliseconds restart_delay{20};
  std::chrono::milliseconds max_restart_delay{1000};
  /// A degraded device with no warning for this long is available again.
  std::chrono::milliseconds degraded_quiet{2000};
  /// Temperature and power that degrade or drain a device (the telemetry
  /// sampler watches them; none set by default).
  heat_limits heat;
  /// What an Xid does to its GPU, per code; every device of the node gets
  /// it at start, a host process's with its hello.
  devices::xid_policy xid_policy;
  /// Watchdog: the default and per kernel id (0 = the default).
  std::chrono::milliseconds kernel_timeout{5000};
  std::vector<std::chrono::milliseconds> kernel_timeouts;
  /// Timeouts naming kernels not registered when the config compiled, by
  /// name: a bundle's that the config loads (resolved once it has).
  std::vector<std::pair<std::string, std::chrono::milliseconds>>
      pending_kernel_timeouts;
  /// Devices in host processes: the `cohort` program they run and how long
  /// a new one may take to be reachable (start and hello each).
  std::string host_binary;
  std::chrono::milliseconds host_start_timeout{10000};
  /// Devices on remote hosts: the fleet's token, and how long a connection
  /// and its hello may take.
  std::string fleet_token;
  std::chrono::milliseconds connect_timeout{10000};
};

/// The host processes of a supervisor, shared with the threads that start
/// them and with the supervisor's cleanup, which runs however it ends (its
/// exit handler does not run for a kill or an exception). A starter owns
/// its process until `started`; then the registry holds it until it is
/// taken. Thread-safe.
class host_registry {
public:
  /// A starter's new process. False once closed: the starter ends it.
  bool starting(int pid);

  /// A starter's process came up: held here (true), or, once closed, left
  /// to the starter to end (false).
  bool started(const host_process& p);

  /// A starter's process did not come up (the starter ended it).
  void failed(int pid);

  /// Takes process `pid` out, to be ended by the caller; a process with
  /// pid 0 when it is not held.
  host_process take(int pid);

  /// Kills the processes still starting (their starters reap them), ends
  /// and reaps the others, and refuses new ones.
  void close();

  ~host_registry() { close(); }

private:
  std::mutex mtx_;
  bool closed_ = false;
  std::set<int> starting_;
  std::map<int, host_process> held_;
};

struct supervisor_state {
  struct entry {
    std::shared_ptr<devices::device> dev;
    device_actor handle;
    caf::actor_addr addr;
    device_lifecycle life;
    std::deque<std::chrono::steady_clock::time_point> restarts;
    std::chrono::steady_clock::time_point last_warning{};
    /// Where its readings put it, and whether that drained it (not an
    /// operator: it comes back by itself once it is cool).
    heat_level heat = heat_level::ok;
    bool heat_drained = false;
    /// Brought down by a sibling's loss (one_for_all) or an operator: not a
    /// loss of its own. Both are cleared by the next down of its actor.
    bool by_sibling = false;
    bool by_operator = false;
    /// The pending restart follows a loss of its own: it counts against
    /// the restart intensity.
    bool own_loss = false;
    /// The pending restart is an operator's online: an isolation the
    /// device still reports is what the operator is ending.
    bool operator_restart = false;
    /// Starts of its actor so far.
    uint32_t generation = 0;
    /// A device in a host process (else null), its process now (0: none;
    /// the process is in the registry), the number of its latest start,
    /// whether that start is under way, its token and what its start is
    /// audited as.
    std::shared_ptr<hosted_device> hosted;
    int pid = 0;
    /// What its host's device actor reports to: passes reports on to the
    /// balancer while this process lives.
    device_listener relay;
    uint64_t launch = 0;
    bool launching = false;
    /// Its first start is part of the reply to start.
    bool first_start = false;
    std::string token;
    std::string start_why;
    /// On a remote host: joins that failed in a row since it was last up
    /// (they do not count against the restart intensity).
    uint32_t join_failures = 0;
    /// Gone from the machine (a rescan said so), and why: out of service
    /// until a rescan finds it again; its status before (an offline or a
    /// drain outlives the removal); its actor was sent away for it and is
    /// not down yet.
    bool removed = false;
    std::string removed_why;
    device_status removed_was = device_status::available;
    bool removing = false;
  };
  std::vector<entry> devices;
  std::shared_ptr<const device_roster> roster;
  /// Heat the sampler reported for a device of the roster before the
  /// supervisor was told it was added (applied when it is).
  std::map<uint32_t, std::pair<heat_level, std::string>> early_heat;
  balancer_actor balancer;
  audit_actor audit;
  supervisor_config cfg;
  bool quiet_tick_scheduled = false;
  std::shared_ptr<host_registry> hosts = std::make_shared<host_registry>();
  /// The reply to start: when every host process's first start has ended.
  caf::typed_response_promise<bool> started;
  size_t starting = 0;
  static inline const char* name = "cohort.supervisor";
};

/// Supervises one device actor per device of `roster` (index = position):
/// those it has now, and each added later (add_atom).
supervisor_actor::behavior_type
supervisor_impl(supervisor_actor::stateful_pointer<supervisor_state> self,
                std::shared_ptr<const device_roster> roster,
                balancer_actor balancer, audit_actor audit,
                supervisor_config cfg);

} // namespace cohort::actors
