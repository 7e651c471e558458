// `cohort health DEVICE`: one device's health as a running node kept it,
// through its admin API (GET /v1/devices/NAME/health): its state, circuit,
// Xids, ECC, and its temperature, power and utilization over time.
#pragma once

#include <string>

#include "messages/admin.pb.h"
#include "tools/cli.hpp"

namespace cohort::tools {

/// `cohort health` as CLI11 parsed it.
struct health_cli {
  CLI::App* app = nullptr;
  std::string url;
  std::string device;
  /// Samples listed one per line (the newest); the trends take them all.
  int samples = 10;
  bool json = false;
};

/// The report of `h` (plain text): state, counters now, Xids, trends over
/// every kept sample, and the newest `samples` one per line.
std::string health_report(const pb::DeviceHealth& h, int samples);

/// A line of block characters, one per bucket of `values` (at most
/// `width`), low to high between their least and most; empty for none.
std::string sparkline(const std::vector<double>& values, size_t width);

/// Adds `health DEVICE [--url URL] [--samples N] [--json]` to `parent`.
void add_health_command(CLI::App& parent, health_cli& c);

/// Runs it: 0, 1 when the node cannot be reached or has no such device.
int cmd_health(const health_cli& c);

} // namespace cohort::tools
