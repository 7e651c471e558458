// `cohort chaos`: runs chaos scenarios and prints what the invariant checker
// found, with recovery times.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "messages/cohort.pb.h"

namespace cohort::tools {

struct chaos_options {
  /// Scenario files, or directories of them (every .textproto inside).
  std::vector<std::string> files;
  /// Replaces each scenario's seed when non-zero.
  uint64_t seed = 0;
  double scale = 1.0;
  /// 10x the workload over 10x the time.
  bool soak = false;
  /// Runs each scenario this often, with seeds seed, seed + 1, ...
  uint32_t repeat = 1;
  /// Keeps each run's audit log there (empty: removed after the check).
  std::string audit_dir;
  /// Also prints the timeline and each device's counters.
  bool verbose = false;
  /// CAF's scheduler for the runs (checked).
  pb::Scheduler scheduler;
  /// Asked before each run: a signal's number (SIGTERM) stops there, with
  /// the summary of the runs that ran; 0 goes on. Unset: never.
  std::function<int()> stop_requested;
};

/// Runs every scenario and prints a table to `out`. Returns 0 when every
/// invariant held, 1 when one broke or the runs were stopped before the
/// last, 2 for bad input.
int run_chaos(const chaos_options& opts, std::FILE* out);

} // namespace cohort::tools
