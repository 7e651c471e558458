// Devices in processes of their own (docs/device-hosts.md). A node runs a
// device that its config puts in a host process as `cohort device-host`, a
// child that publishes one actor, its gate, through CAF's middleman on the
// loopback interface. The node's supervisor reaches the gate, introduces
// itself with the token the node gave the process, and gets the device
// actor the host runs; from then on the balancer talks to that actor as to
// any other. A host that crashes or is killed is a device loss, and the
// supervisor starts a new process.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <caf/actor.hpp>
#include <caf/fwd.hpp>
#include <caf/typed_actor.hpp>

#include "devices/device.hpp"
#include "devices/health/gpu_watch.hpp"
#include "devices/health/health.hpp"
#include "devices/sim/sim_device.hpp"
#include "messages/atoms.hpp"
#include "messages/cohort.pb.h"
#include "messages/host.hpp"
#include "messages/network.hpp"

namespace cohort::actors {

/// The one actor a device host publishes: a host process the node started
/// (one device), or a remote host serving the devices of its machine. Every
/// question carries the host's token: a wrong one is refused with
/// not_granted.
using host_gate_actor = caf::typed_actor<
    /// The host's devices, by their index there.
    caf::replies_to<list_atom, std::string>::with<std::vector<device_info>>,
    /// The node's supervisor introduces itself for one device
    /// (host_hello::device): the device actor's settings, the actor the
    /// device reports its launches to (the balancer, a device_listener) and
    /// the one it reports warnings to (the supervisor, a health_listener).
    /// Returns the device actor (a device_actor). A host process greets its
    /// node once (invalid_transition after); a remote host greets a node
    /// that rejoins again, ending the device's earlier actor and resetting
    /// the device first. unknown_device for an index it does not have.
    caf::replies_to<hello_atom, std::string, host_hello, caf::actor,
                    caf::actor>::with<caf::actor>,
    /// The node injects a fault into one of the simulated devices the host
    /// runs (the chaos harness, through runtime::inject_sim_fault).
    /// not_granted before that device's hello; invalid_fault for a fault
    /// the device does not take.
    caf::replies_to<fault_atom, std::string, uint32_t, sim_fault>::with<bool>>;

/// The node's stand-in for a device that runs in a host process, or on a
/// remote device host: it gives the device's facts and holds what a new
/// host process is told, or where the remote host is. Nothing launches on
/// it (its device actor runs in the host); the supervisor starts and ends
/// its processes, or joins its remote host. `pid` and `gate` are
/// thread-safe, the rest is set before the runtime starts.
class hosted_device final : public devices::device {
public:
  /// A device in a host process the node starts.
  hosted_device(device_info info, pb::HostSpec spec);

  /// Device `index` of the remote host at `where` (`info.remote` names it).
  hosted_device(device_info info, endpoint where, uint32_t index);

  ~hosted_device() override;

  /// A real GPU in a host process: the node watches it as well, with the
  /// backend's health library, to count its Xids (`xid_errors`) and read
  /// its health (`telemetry`); its host acts on the events (a device-level
  /// Xid loses the device there). Call once, before it is supervised; a
  /// remote device or one without a PCI bus id is not watched. Its Xids
  /// come through `events`, the watch of its GPU's bus (shared by the MIG
  /// instances of one card; the caller starts it once they joined), those
  /// of GPU instance `gpu_instance` and of the whole GPU; without one its
  /// health is read and its Xids are not counted.
  void
  watch_health(std::shared_ptr<devices::health::gpu_monitor> monitor,
               std::shared_ptr<devices::health::gpu_watch> events = nullptr,
               uint32_t gpu_instance = devices::health::gpu_event::whole_gpu);

  /// The watch its Xids come through (null: none).
  const std::shared_ptr<devices::health::gpu_watch>& event_watch() const {
    return events_;
  }

  /// The GPU's health read in the node (unavailable, with why, for a
  /// simulated device, a remote one, or without a health library).
  devices::health::gpu_sample telemetry() const override;

  /// On a remote host (else in a host process of this node).
  bool remote() const { return !where_.host.empty(); }
  /// The remote host, and the device's index there.
  const endpoint& where() const { return where_; }
  uint32_t remote_index() const { return remote_index_; }

  /// What the next host process is told (its token is set at each start).
  const pb::HostSpec& spec() const { return spec_; }
  pb::HostSpec& mutable_spec() { return spec_; }

  /// The running host process (0: none now), and the port of its gate on
  /// 127.0.0.1.
  int pid() const { return pid_.load(); }
  uint16_t port() const { return port_.load(); }
  void set_pid(int pid, uint16_t port = 0) {
    port_.store(port);
    pid_.store(pid);
  }

  /// A remote host's network held down by the chaos harness until this
  /// time (runtime::cut_connection): joins fail until then.
  std::chrono::steady_clock::time_point held_until() const {
    return std::chrono::steady_clock::time_point{
        std::chrono::steady_clock::duration{held_until_.load()}};
  }
  void hold_until(std::chrono::steady_clock::time_point t) {
    held_until_.store(t.time_since_epoch().count());
  }

  /// A simulated device lost permanently (the chaos harness's
  /// LOSE_PERMANENTLY): like hardware that is gone, no new host process
  /// brings it back, and the supervisor takes it offline at its next
  /// restart, as it does a simulated GPU in the node's process whose reset
  /// fails. Thread-safe.
  bool gone() const { return gone_.load(); }
  void mark_gone() { gone_.store(true); }

  /// The gate of the running host process and its token, once the node was
  /// greeted (a null gate: none now). Thread-safe.
  std::pair<host_gate_actor, std::string> gate() const;
  void set_gate(host_gate_actor gate, std::string token);

private:
  caf::expected<devices::launch_result>
  do_launch(uint32_t stream, uint64_t ticket, kernels::kernel_id id,
            const kernels::kernel_args& args, kernels::typed_inputs inputs,
            const devices::memory::owner_tag& owner) override;
  caf::error do_health() override;
  caf::error do_reset() override;
  caf::error do_recreate() override;
  void do_release_memory() override;
  std::vector<std::string> do_take_warnings() override;

  pb::HostSpec spec_;
  std::shared_ptr<devices::health::gpu_monitor> monitor_;
  std::shared_ptr<devices::health::gpu_watch> events_;
  endpoint where_;
  uint32_t remote_index_ = 0;
  std::atomic<int> pid_{0};
  std::atomic<uint16_t> port_{0};
  std::atomic<std::chrono::steady_clock::rep> held_until_{0};
  std::atomic<bool> gone_{false};
  mutable std::mutex gate_mx_;
  host_gate_actor gate_;
  std::string token_;
};

/// Joins the remote device hosts of `net.join` (docs/device-hosts.md,
/// "Nodes on other machines"): connects to each through CAF's TLS module,
/// lists its devices with the fleet's token and returns a stand-in for
/// each, in the order of the addresses and of each host's list. Blocks, up
/// to `net.connect_timeout` per host. Errors: malformed_config when `sys`
/// has no TLS module; not_granted when a host refuses the token;
/// device_lost when a host cannot be reached or refuses this node's
/// certificate; each names the host.
caf::expected<std::vector<std::shared_ptr<hosted_device>>>
join_remote_hosts(caf::actor_system& sys, const network_settings& net);

/// Shuts down (both directions, without closing them) this process's TCP
/// connections to `where`; returns how many there were. `where.host` is
/// resolved as the middleman resolves it. Errors: io_error when the host
/// does not resolve or /proc/self/fd cannot be read.
caf::expected<size_t> shut_down_connections(const endpoint& where);

/// Applies fault `f` (a simulated device's own kind, LOSE to THERMAL) to
/// `dev`; invalid_fault for another kind.
caf::error apply_sim_fault(devices::sim::sim_device& dev, const sim_fault& f);

/// A device host process the node started.
struct host_process {
  int pid = 0;
  /// The write end of the process's standard input, held open: the process
  /// ends when it reads end of file (the node closed it or died).
  int input = -1;
  /// The port its gate is published on, on 127.0.0.1.
  uint16_t port = 0;
};

/// Starts `binary device-host`, writes `spec` to its standard input and
/// waits for it to say where its gate is, all within `timeout`. Blocks:
/// call it off the actors' threads. `spawned` (may be empty) hears the pid
/// as soon as the process exists; when it returns false the process is
/// ended at once. Until this returns, the caller owns the process: another
/// thread may kill it (it then fails fast) but must not reap it. Errors:
/// device_lost, saying what happened (the program is missing, the process
/// exited and how, it did not answer in time).
caf::expected<host_process>
start_host(const std::string& binary, const pb::HostSpec& spec,
           std::chrono::milliseconds timeout,
           const std::function<bool(int)>& spawned = {});

/// Ends the process and closes its input: reaps it if it ends within
/// `grace` by itself, else kills it (SIGKILL) and reaps it. Returns how it
/// ended: "exited with status 1", "killed by signal 9 (Killed)", or "was
/// still running and was ended by its node".
std::string end_host(host_process& p, std::chrono::milliseconds grace = {});

/// `cohort device-host`: reads a cohort.pb.HostSpec (its length as 4
/// little-endian bytes, then the bytes) from standard input, makes the
/// device, publishes its gate on 127.0.0.1 and prints "cohort device-host:
/// gate on port N" on standard output; ends when standard input reaches
/// its end. Returns the exit status: 2 for a spec it cannot use, 1 when the
/// device or the gate cannot be made.
int run_device_host();

/// `cohort device-host --listen HOST:PORT --config FILE`: makes the devices
/// of `cfg` (with its memory settings) and serves them to the nodes of a
/// fleet on other machines: one gate, published with TLS on `listen`
/// (port 0: any free port), that lists the devices and greets a node
/// with the fleet's token, again when the node rejoins after a dropped
/// connection. Prints "cohort device-host: serving N devices (NAMES) on
/// HOST:PORT with TLS" and runs until SIGINT or SIGTERM. Returns the exit
/// status: 2 for a config it cannot use (no TLS or no token included), 1
/// when it cannot listen.
int run_remote_host(const std::string& listen, const pb::RuntimeConfig& cfg);

} // namespace cohort::actors
