// The dispatch benchmark's shared shape: each competitor runs `tasks`
// independent sums of 1,024 floats and reports throughput and latency.
#pragma once

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
  /// Empty when the run succeeded; otherwise why it did not.
  std::string error;
};

/// Cohort with quota and audit on: `workers` CPU workers, one tenant.
dispatch_figures run_cohort(int tasks, int workers, int window,
                            int latency_samples);

/// StarPU 1.3 with scheduling policy `policy` and `workers` CPU workers.
dispatch_figures run_starpu(const std::string& policy, int tasks, int workers,
                            int latency_samples);

/// p-th percentile (0..100) of `samples` (sorted in place).
double percentile(std::vector<double>& samples, double p);

} // namespace cohort::bench
