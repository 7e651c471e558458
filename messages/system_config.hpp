// The one place where Cohort's message types and error category meet CAF,
// and where CAF's scheduler is set up for Cohort.
#pragma once

#include <caf/actor_system_config.hpp>

namespace cohort {

namespace pb {
class RuntimeConfig;
class Scheduler;
} // namespace pb

/// Registers every Cohort message type and the "cohort" error category on
/// `cfg`.
void register_types(caf::actor_system_config& cfg);

/// Sets CAF's scheduler on `cfg` from `s` (`cohort.pb.Scheduler`), Cohort's
/// defaults for what `s` leaves unset: one worker per core (at least 2) and
/// idle workers that spin briefly and then sleep until work arrives. Call
/// check_config first: values are not checked here.
void apply_scheduler(caf::actor_system_config& cfg, const pb::Scheduler& s);

struct network_settings;

/// True when `cfg` has devices in host processes (simulated GPUs that say
/// so; real GPUs unless it keeps them in the node's process, by default on a
/// machine with GPU device files, /dev/nvidiactl or /dev/kfd) or joins
/// remote device hosts (docs/device-hosts.md): its actor system needs CAF's
/// network layer (the middleman).
bool needs_network(const pb::RuntimeConfig& cfg);

/// Loads CAF's middleman on `cfg`, with heartbeats every 100 ms and a
/// connection silent for 2 s taken as lost.
void load_network(caf::actor_system_config& cfg);

/// The same, and CAF's TLS module (libcaf_openssl) with the certificate,
/// key, passphrase and CAs of `net` when it has TLS. `net` comes from
/// compile_network, which checked every file: CAF reads them only at the
/// first connection, and ends the process on one it cannot read. Call it
/// before the actor system is made.
void load_network(caf::actor_system_config& cfg, const network_settings& net);

/// An actor system config with Cohort's types registered and Cohort's
/// scheduler defaults.
class system_config : public caf::actor_system_config {
public:
  system_config();

  /// With the scheduler of `cfg` (its `scheduler` section) over the
  /// defaults, and CAF's middleman when `cfg` needs it (needs_network),
  /// with TLS when its `network` section has it. A `network` section that
  /// does not compile loads no TLS: runtime::start then refuses the config
  /// with the reason.
  explicit system_config(const pb::RuntimeConfig& cfg);
};

} // namespace cohort
