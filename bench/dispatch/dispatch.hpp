// The dispatch benchmark's shared shape: each competitor runs `tasks`
// independent sums of 1,024 floats and reports throughput and latency.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cohort::bench {

/// One competitor's figures.
struct dispatch_figures {
  std::string system;
  double tasks_per_s = 0;
  /// Latency with one task in flight, microseconds.
  double p50_us = 0;
  double p99_us = 0;
  /// Cohort: the share of the throughput run's items that ran on simulated
  /// GPUs (0 to 1).
  double simulated_share = 0;
  /// Empty when the run succeeded; otherwise why it did not.
  std::string error;
};

/// The fleet Cohort runs on: `cpu_workers` CPU workers and `sim_gpus`
/// simulated GPUs (labelled simulated; they compute on the host).
struct cohort_fleet {
  int cpu_workers = 2;
  int sim_gpus = 0;
  /// `--scheduler` settings (KEY=VALUE,...) over Cohort's defaults.
  std::string scheduler;
  /// When positive, the client submits up to this many items per message
  /// and hears their ends coalesced (a batch_sink); otherwise one item per
  /// message and one end per message (a client_sink).
  int batch = 0;
  /// The simulated GPUs' pools zero freed blocks (the default; device work
  /// per item that CPU workers do not have).
  bool zero_on_free = true;
};

/// Cohort with quota and audit on (the default fsync policy), one tenant, a
/// client keeping `window` items in flight. The time runs from the first
/// submission until the audit log has caught up (a flush after the last
/// result); latency is one `runtime::run` at a time.
dispatch_figures run_cohort(int tasks, cohort_fleet fleet, int window,
                            int latency_samples);

/// The same runtime and workload through the public API
/// (<cohort/cohort.hpp>) from a plain thread: a window of futures, or
/// (`callbacks`) each end submitting the next item from its callback. The
/// time runs to the last result (the audit log is flushed at stop, not
/// timed); latency is one `run()` at a time. With `registered`, futures
/// run `bench.reduce_sum`, an application's kernel registered through
/// `register_kernel` that does reduce_sum's work: the registry's overhead
/// against the built-in kernel.
dispatch_figures run_public(int tasks, int workers, int window,
                            int latency_samples, bool callbacks,
                            bool registered = false);

/// StarPU 1.3 with scheduling policy `policy` and `workers` CPU workers.
dispatch_figures run_starpu(const std::string& policy, int tasks, int workers,
                            int latency_samples);

/// The machine's own floor for one task at a time, no runtime: a thread
/// hands a turn to a second one, which spins `work_us` (about a runtime's
/// whole path) and hands it back; no system calls, no sleeping. What its
/// tail adds to its median is the machine's: on a virtual machine, the
/// interruptions of its virtual CPUs. Its tasks_per_s is 0.
dispatch_figures machine_floor(double work_us, int samples);

/// p-th percentile (0..100) of `samples` (sorted in place).
double percentile(std::vector<double>& samples, double p);

/// The 1-minute load average, or -1 where it cannot be read.
double load_average();

/// "min / median / max" of `v` (not empty), with `digits` decimals.
std::string spread(std::vector<double> v, int digits = 0);

} // namespace cohort::bench
