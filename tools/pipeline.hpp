// Running a pipeline spec through a runtime: the engine of `cohort run`,
// kept apart from the command line so tests can drive it.
#pragma once

#include <atomic>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/expected.hpp>

#include "actors/runtime.hpp"
#include "audit/audit_log.hpp"
#include "messages/cohort.pb.h"
#include "messages/memory_stats.hpp"
#include "messages/stats.hpp"
#include "messages/trace.hpp"
#include "tools/report_html.hpp"

namespace cohort::tools {

/// How `run_pipeline` reports progress and where its runtime keeps its log.
struct run_options {
  /// Replaces the spec's runtime config when set.
  std::string config_path;
  /// Replaces the audit log path when set.
  std::string audit_path;
  /// `--scheduler` settings over the config's (see scheduler_arg.hpp).
  std::string scheduler;
  /// Where progress goes (nullptr = nowhere); a bar if it is a terminal,
  /// otherwise a plain line every 10%.
  std::FILE* progress = nullptr;
  /// When set (by another thread), no further item is submitted; the run
  /// ends once those submitted have ended.
  std::shared_ptr<std::atomic<bool>> cancel;
  /// `--trace FILE`: the run's trace goes there (docs/tracing.md), at most
  /// `trace_events` events of it. `run_pipeline` only.
  std::string trace_path;
  uint64_t trace_events = default_trace_events;
  /// `--report-html FILE`: the report goes there too, as a page with
  /// plots (the run samples the balancer's counters for them).
  /// `run_pipeline` only.
  std::string report_html_path;
};

/// Everything `cohort run` reports at the end.
struct pipeline_report {
  std::string name;
  uint64_t items = 0;
  /// Items a cancelled run never submitted (not counted as lost).
  uint64_t not_submitted = 0;
  uint64_t completed = 0;
  /// Ended with a definitive error after admission.
  uint64_t failed = 0;
  /// Refused at admission (quota, grant, bad input).
  uint64_t rejected = 0;
  /// Items that never ended, and items that ended more than once (both must be
  /// 0).
  uint64_t lost = 0;
  uint64_t duplicates = 0;
  /// Completed results that differ from the CPU reference.
  uint64_t mismatches = 0;
  /// Items never submitted because a stage they read from failed in their
  /// batch (each also ended: counted in neither completed nor failed).
  uint64_t skipped = 0;
  /// Output files written ("PATH (TYPE, shape (...))"), and those not
  /// written with why (a batch that failed: the file is not left half
  /// written).
  std::vector<std::string> outputs_written;
  std::vector<std::string> outputs_not_written;
  double seconds = 0;
  balancer_stats placement;
  quota_stats admission;
  /// Every device's memory at the end (devices with device memory only).
  std::vector<memory_snapshot> memory;
  /// Allocations still held on some device after every item ended (must be
  /// 0: each launch gives its memory back).
  uint64_t leaked = 0;
  std::string audit_path;
  audit::audit_verdict audit;
  /// Records this run added to the log (its earlier records are verified,
  /// not counted), and what could not be written: the flush's error and
  /// records dropped while writes failed.
  uint64_t audit_run_records = 0;
  std::string audit_unwritten;
  /// The first few error messages, for the report.
  std::vector<std::string> errors;
  /// Faults injected, as text.
  std::vector<std::string> faults;
  /// The GPUs that reported Xid errors during the run (NVML, wherever a
  /// real GPU ran; a simulated GPU's injected ones in the node's process):
  /// how many, and the code of the last.
  struct xid_count {
    std::string device;
    uint64_t errors = 0;
    uint32_t last = 0;
  };
  std::vector<xid_count> xids;
  /// The trace written (--trace): where, its events, those not kept past
  /// its bound; or why it could not be written.
  std::string trace_path;
  uint64_t trace_events = 0;
  uint64_t trace_dropped = 0;
  std::string trace_error;
  /// The page written (--report-html), or why it could not be; the
  /// counters sampled for its plots.
  std::string report_html_path;
  std::string report_html_error;
  run_timeline timeline;

  /// True when every item completed once with a correct result, no device
  /// memory leaked, the audit log verified and the trace asked for was
  /// written.
  bool ok() const {
    return lost == 0 && duplicates == 0 && mismatches == 0 && failed == 0 &&
           rejected == 0 && skipped == 0 && outputs_not_written.empty() &&
           leaked == 0 && audit.ok && trace_error.empty() &&
           report_html_error.empty();
  }
};

/// The runtime config a spec runs with: the spec's own, else the CLI default
/// (CPU workers plus 4 simulated GPUs, tenant "default" granted everything).
pb::RuntimeConfig config_for(const pb::PipelineSpec& spec);

/// The runtime config `run_pipeline` starts with: the spec's, or the file
/// of `opts.config_path`, with `opts.audit_path` and `opts.scheduler`
/// applied and checked (check_config). The command line builds its actor
/// system from it (the scheduler settings).
caf::expected<pb::RuntimeConfig> runtime_config_of(const pb::PipelineSpec& spec,
                                                   const run_options& opts);

/// Checks every stage of `spec` as `run_pipeline` does before anything runs
/// (kernels, input files and sizes of every batch, chains, gangs, output
/// files); malformed_pipeline names the first problem. Kernels named by
/// `kernel_name` must be registered already.
caf::error check_stages(const pb::PipelineSpec& spec);

/// Runs `spec` to its end. Errors: malformed_pipeline / malformed_config for
/// a spec or config that cannot run; anything the runtime start reports.
caf::expected<pipeline_report> run_pipeline(caf::actor_system& sys,
                                            const pb::PipelineSpec& spec,
                                            const run_options& opts);

/// Runs `spec`'s batches through `rt`, already running with `cfg` (the
/// spec's own config is not used), to their end. The runtime keeps running;
/// the report has no audit verdict. Used by `cohort serve --pipeline`.
caf::expected<pipeline_report> run_pipeline_on(caf::actor_system& sys,
                                               actors::runtime& rt,
                                               const pb::RuntimeConfig& cfg,
                                               const pb::PipelineSpec& spec,
                                               const run_options& opts);

/// Prints the closing report.
void print_report(std::FILE* out, const pipeline_report& r);

} // namespace cohort::tools
