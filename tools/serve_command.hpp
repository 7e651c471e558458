// `cohort serve`: a long-running node. The runtime plus one HTTP server on
// loopback by default: Prometheus metrics at /metrics and the admin API
// under /v1. Stops cleanly on SIGINT or SIGTERM: admission closes, what is in
// flight ends, the audit log is flushed and verified.
#pragma once

#include <string>
#include <vector>

#include "tools/cli.hpp"
#include "tools/http_service.hpp"

namespace cohort::tools {

/// `cohort serve` as CLI11 parsed it.
struct serve_cli {
  CLI::App* app = nullptr;
  string_options options;
};

/// Adds `serve [--config FILE] [--listen HOST:PORT] [--token-file FILE]
/// [--audit PATH] [--share-socket PATH] [--pipeline FILE [--repeat N]]
/// [--for SECONDS] [--http-* LIMIT]...` (the limits of `http_limits`) to
/// `parent`.
void add_serve_command(CLI::App& parent, serve_cli& c);

/// Runs it. Returns 0 after a clean stop, 1 when the stop found an item
/// unended or the audit chain broken, 2 for bad input.
int cmd_serve(const serve_cli& c);

} // namespace cohort::tools
