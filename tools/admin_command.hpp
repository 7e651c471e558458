// `cohort admin`: the admin API's command-line client.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <caf/expected.hpp>

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

/// The node's admin API address: `given`, else $COHORT_URL, else
/// http://127.0.0.1:9470.
std::string node_url(const std::string& given);

/// The admin token for mutating calls: the first line of `token_file`
/// when given (read_secret_file: a regular file of at most 64 KiB whose
/// first line is not blank), else $COHORT_ADMIN_TOKEN, else empty; io_error
/// naming the file when it is none of that.
caf::expected<std::string> admin_token(const std::string& token_file);

/// `cohort objects` as CLI11 parsed it.
struct objects_cli {
  CLI::App* app = nullptr;
  std::string url;
  std::string tenant;
  bool json = false;
};

/// Adds `objects [--url URL] [--tenant NAME] [--json]` to `parent`.
void add_objects_command(CLI::App& parent, objects_cli& c);

/// Lists a node's device-resident objects as a table (or its JSON): 0, or
/// 1 when the node cannot be reached or refuses.
int cmd_objects(const objects_cli& c);

/// Adds `admin [--url URL] [--token-file FILE] COMMAND [ARGS]` to `parent`.
void add_admin_command(CLI::App& parent, admin_cli& c);

/// Runs it; prints the JSON answer. Returns 0 for a 2xx answer, 1 for a
/// 4xx or 5xx answer or an unreachable node, 2 for bad input.
int cmd_admin(const admin_cli& c);

} // namespace cohort::tools
