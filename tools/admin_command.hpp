// `cohort admin`: the admin API's command-line client.
#pragma once

#include <string>
#include <vector>

#include "tools/cli.hpp"

namespace cohort::tools {

/// `cohort admin` as CLI11 parsed it.
struct admin_cli {
  CLI::App* app = nullptr;
  std::string url;
  std::string token_file;
  /// The subcommand given (stats, devices, ..., quota) and its argument
  /// (a device, a tenant, a plan file).
  std::map<std::string, CLI::App*> commands;
  std::string target;
  /// quota's --max-inflight, --memory-quota, --rate, --burst.
  string_options limits;
};

/// Adds `admin [--url URL] [--token-file FILE] COMMAND [ARGS]` to `parent`.
void add_admin_command(CLI::App& parent, admin_cli& c);

/// Runs it; prints the JSON answer. Returns 0 for a 2xx answer, 1 for a
/// 4xx or 5xx answer or an unreachable node, 2 for bad input.
int cmd_admin(const admin_cli& c);

} // namespace cohort::tools
