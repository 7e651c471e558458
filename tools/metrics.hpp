// Prometheus metrics of a running runtime: device metrics under the
// dcgm-exporter names where they mean the same thing, Cohort's own under
// `cohort_`. docs/metrics.md lists every series.
#pragma once

#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <caf/expected.hpp>

#include "actors/runtime.hpp"
#include "messages/alert.hpp"
#include "messages/audit_stats.hpp"

namespace cohort::tools {

/// Everything one scrape reads from a runtime.
struct metrics_input {
  std::vector<device_info> devices;
  balancer_stats stats;
  std::vector<memory_snapshot> memory;
  headroom_report headroom;
  std::vector<cohort::alert> alerts;
  std::optional<cohort::audit_stats> audit;
  /// Per device: Xid errors and the last code.
  std::vector<std::pair<uint64_t, uint32_t>> xids;
  /// Kernel bundles loaded and refused.
  actors::bundle_counts bundles;
  /// The live device-resident objects.
  std::vector<object_info> objects;
  /// `cohort exec`'s sessions; nullopt without an exec socket.
  std::optional<exec::session_stats> exec;
  /// Device rescans; nullopt on a node that does not rescan.
  std::optional<actors::rescan_counts> rescans;
};

/// Reads a runtime's counters (a few actor round trips).
caf::expected<metrics_input> read_metrics(actors::runtime& rt);

/// Renders scrapes. GPU utilization is busy device time over wall time since
/// the previous scrape (capped at 100), so it keeps one scrape's counters.
/// Thread-safe: scrapes are serialized.
class metrics_exporter {
public:
  explicit metrics_exporter(actors::runtime& rt) : rt_(rt) {
    // nop
  }

  /// The Prometheus text exposition of the runtime now, or the error that
  /// kept it from reading its counters.
  caf::expected<std::string> scrape();

  /// Renders `in` as read at `now` (tests feed made-up input).
  std::string render(const metrics_input& in,
                     std::chrono::steady_clock::time_point now);

  /// Counts an admin API request by its answer's status (cohort_http_*).
  void count_request(const std::string& route, int status);

  /// Counts a connection the HTTP server closed at its read deadline.
  void count_timed_out_connection();

private:
  actors::runtime& rt_;
  std::mutex mtx_;
  std::chrono::steady_clock::time_point last_{};
  std::map<std::string, int64_t> busy_before_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  uint64_t timed_out_connections_ = 0;
};

} // namespace cohort::tools
