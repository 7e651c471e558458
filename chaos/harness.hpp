// The chaos harness: runs a scenario (a workload over simulated GPUs and a
// timeline of faults and operator actions), then checks the invariants.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/expected.hpp>

#include "chaos/fault_injector.hpp"
#include "chaos/invariants.hpp"
#include "messages/cohort.pb.h"

namespace cohort::chaos {

/// How a scenario is run.
struct run_options {
  /// Multiplies every load's items and submission time and stretches the
  /// timeline with them (soak runs use 10 or more).
  double scale = 1.0;
  /// Replaces the scenario's seed when non-zero.
  uint64_t seed = 0;
  /// Where the audit log goes (a file in the system's temp directory when
  /// empty; removed after the check unless `keep_audit`).
  std::string audit_path;
  bool keep_audit = false;
  /// The `cohort` program that devices in host processes run; replaces the
  /// scenario's devices.host_binary when not empty.
  std::string host_binary;
};

/// A fault at its time in the timeline.
struct timed_fault {
  std::chrono::milliseconds at{0};
  fault f;
};

/// What one run did and what the checker found.
struct chaos_report {
  std::string name;
  uint64_t seed = 0;
  std::vector<timed_fault> timeline;
  /// Faults that could not be applied (an operator action refused), with why.
  std::vector<std::string> refused;
  verdict check;
  /// Balancer counters at the end.
  uint64_t retries = 0;
  uint64_t fallbacks = 0;
  uint32_t losses = 0;
  uint32_t restarts = 0;
  uint32_t circuit_opens = 0;
  /// Fallback latency per tenant: items, worst, over budget.
  std::vector<std::string> fallback_notes;
  /// Per device: items completed there, losses, restarts, final status.
  std::vector<std::string> device_notes;
  /// What the loads did with objects (empty when they used none).
  std::string objects_note;
  std::chrono::milliseconds wall{0};
  std::string audit_path;
};

/// Most faults in a scenario's timeline (events with their repeats plus
/// random faults).
inline constexpr uint64_t max_fault_count = 10'000;

/// Most objects one load puts before its workload.
inline constexpr uint32_t max_load_objects = 1024;

/// Most input elements (items and objects x size, over every load) a
/// scenario submits
/// at scale 1: about 2 GiB of floats.
inline constexpr uint64_t max_input_elements = uint64_t{1} << 28;

/// Checks a scenario as `load_scenario` does (malformed_config): a name, a
/// load, known error names, bounded sizes, fault counts and inputs.
caf::error check_scenario(const pb::ChaosScenario& s);

/// Reads a scenario from a protobuf text file; malformed_config (with line
/// and column) or io_error.
caf::expected<pb::ChaosScenario> load_scenario(const std::string& path);

/// The scenario's faults in time order: its events (repeated as asked) and
/// its random faults drawn from `seed`, over simulated GPUs named in its
/// runtime config. The same seed gives the same timeline.
std::vector<timed_fault> expand_timeline(const pb::ChaosScenario& s,
                                         uint64_t seed, double scale);

/// Runs `s` in `sys`: starts a runtime from its config, submits its
/// workload, applies its timeline, waits for every item, stops the runtime
/// and checks the invariants. Errors only for a scenario that cannot run
/// (malformed_config); broken invariants are in the report.
caf::expected<chaos_report> run_scenario(caf::actor_system& sys,
                                         const pb::ChaosScenario& s,
                                         const run_options& opts = {});

} // namespace cohort::chaos
