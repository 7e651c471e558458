// StarPU's side of the placement benchmark: tasks of known cost on workers of
// unequal speed, placed by StarPU's dmda scheduler.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cohort::bench {

/// One task of the placement workload.
struct placement_task {
  double work_ns = 0; // modeled run time at speed 1.0
  uint32_t kind = 0;  // task class (kernel/size class), for StarPU's
                      // per-footprint models
  bool spike = false; // this task's run takes spike_factor times longer
                      // (injected noise)
};

/// One competitor's figures.
struct placement_figures {
  std::string system; // e.g. "starpu dmda (history model)"
  double makespan_s = 0;
  std::string error; // non-empty when it could not run (then makespan is 0)
};

/// Runs `tasks` under StarPU's `dmda` scheduler on one StarPU CPU worker per
/// entry of `speeds`; a task run by worker w sleeps work_ns / speeds[w]
/// (times spike_factor when spike) — sleeping, not spinning, so that more
/// workers than cores still model the devices faithfully. `model` selects
/// the performance model: "history" (STARPU_HISTORY_BASED with a footprint
/// per kind, calibrated by a first pass in a private STARPU_HOME temp dir,
/// the way users run it), "exact" (the true cost of each task on each worker,
/// spikes excepted, through one implementation per worker) or "arch" (a
/// STARPU_PER_ARCH cost function, which cannot tell CPU workers apart).
/// Returns the makespan of the measured pass (submit all, wait for all).
/// Debian's StarPU 1.3 is built with at most 4 CPU workers (STARPU_MAXCPUS);
/// more speeds than that is an error, not a silent fallback.
placement_figures run_starpu_placement(const std::vector<placement_task>& tasks,
                                       const std::vector<double>& speeds,
                                       double spike_factor,
                                       const std::string& model);

} // namespace cohort::bench
