// `cohort trace`: a running node's trace through its admin API
// (docs/tracing.md): record for a while and write it, or stop a trace
// started elsewhere and write it.
#pragma once

#include <cstdint>
#include <string>

#include "tools/cli.hpp"

namespace cohort::tools {

/// `cohort trace` as CLI11 parsed it.
struct trace_cli {
  CLI::App* app = nullptr;
  std::string url;
  std::string token_file;
  std::string output;
  double seconds = 10;
  /// 0: the node's default.
  uint64_t max_events = 0;
  /// Only stop the trace being recorded and write it.
  bool stop = false;
};

/// Adds `trace` to `parent`.
void add_trace_command(CLI::App& parent, trace_cli& c);

/// Runs it: 0 once the trace is written; 1 when the node cannot be reached
/// or refuses (a trace already being recorded, none to stop, a wrong
/// token) or the file cannot be written; 2 for bad input.
int cmd_trace(const trace_cli& c);

} // namespace cohort::tools
