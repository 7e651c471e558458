// `cohort watch`: a live terminal view of a running node, refreshed from its
// admin API: items, devices, tenants and alerts (docs/cli.md).
#pragma once

#include <chrono>
#include <string>

#include "messages/admin.pb.h"
#include "tools/cli.hpp"

namespace cohort::tools {

/// `cohort watch` as CLI11 parsed it.
struct watch_cli {
  CLI::App* app = nullptr;
  std::string url;
  double interval_s = 2.0;
  /// Frames to show before exiting (0: until interrupted); --once is 1.
  int count = 0;
  bool once = false;
  /// Redraw in place (a terminal) instead of printing frame after frame.
  bool clear = true;
};

/// What one look at a node found: its answers, or why there are none.
struct watch_snapshot {
  std::chrono::steady_clock::time_point at{};
  /// Wall-clock time of the look, for the frame's header.
  std::chrono::system_clock::time_point wall{};
  /// Empty when every answer came; else why the view is not current.
  std::string error;
  pb::StatsView stats;
  pb::DeviceList devices;
  pb::TenantList tenants;
};

/// Looks at the node at `url` once.
watch_snapshot watch_look(const std::string& url);

/// One frame of the view (plain text, no terminal codes): `before` is the
/// previous look (rates and utilization come from the two), or null.
std::string watch_frame(const std::string& url, const watch_snapshot& now,
                        const watch_snapshot* before, double interval_s);

/// Adds `watch [--url URL] [--interval S] [--once] [--count N]
/// [--no-clear]` to `parent`.
void add_watch_command(CLI::App& parent, watch_cli& c);

/// Runs it until interrupted (SIGINT, SIGTERM) or for --count frames: 0,
/// or 1 when the last look could not reach the node.
int cmd_watch(const watch_cli& c);

} // namespace cohort::tools
