// `cohort run --report-html FILE`: the end-of-run report as one HTML page
// (docs/tracing.md): the report's figures as tables, and plots of each
// device's utilization and queue depth over the run and of the items'
// latency, drawn by the page itself (no network, no library).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "messages/device_info.hpp"
#include "messages/stats.hpp"

namespace cohort::tools {

struct pipeline_report;

/// Each device's busy time and queue over a run, sampled from the
/// balancer's counters. At most max_samples are kept: when full, every
/// other one goes (the run's whole span stays covered, less finely).
class run_timeline {
public:
  static constexpr size_t max_samples = 1000;

  /// The devices, in the balancer's order.
  void set_devices(const std::vector<device_info>& devices);

  /// A device that joined while it runs (a GPU a rescan added): `devices`
  /// are the runtime's now, the old ones first. Its series are zero
  /// before it joined.
  void grow(const std::vector<device_info>& devices);

  /// A sample `t_s` seconds into the run (devices beyond those known are
  /// left out until `grow`).
  void add(double t_s, const balancer_stats& st);

  size_t size() const { return t_s_.size(); }
  size_t devices() const { return devices_.size(); }

  /// The devices' names ("sim0 (simulated)") and, per sample, the share of
  /// its streams' time each spent on the launches that ended since the
  /// sample before (0 to 1; a launch counts when it ends), and the items
  /// placed on it.
  std::vector<std::string> names() const;
  const std::vector<double>& times() const { return t_s_; }
  std::vector<std::vector<double>> utilization() const;
  const std::vector<std::vector<uint64_t>>& queued() const { return queued_; }

private:
  void thin();

  std::vector<device_info> devices_;
  std::vector<double> t_s_;
  /// Per device, per sample: its busy time so far and its items placed.
  std::vector<std::vector<int64_t>> busy_ns_;
  std::vector<std::vector<uint64_t>> queued_;
};

/// The page for `r` (its timeline included).
std::string report_html(const pipeline_report& r);

} // namespace cohort::tools
