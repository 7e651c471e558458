// `cohort exec`: runs a program Cohort did not build with its device memory
// held to a limit (docs/exec.md). It opens a session on a node's exec
// socket for a tenant, runs the program with the allocation shim preloaded
// and the session's token in its environment, holds the session while the
// program runs, and ends as the program ends.
#pragma once

#include <string>
#include <vector>

#include "tools/cli.hpp"

namespace cohort::tools {

/// `cohort exec` as CLI11 parsed it.
struct exec_cli {
  CLI::App* app = nullptr;
  /// The node's exec socket; empty: $COHORT_EXEC_SOCKET, else the default.
  std::string socket;
  std::string tenant;
  /// "256MiB".
  std::string limit;
  /// The program and its arguments.
  std::vector<std::string> command;
};

/// Where the node's exec socket is when neither --socket nor
/// COHORT_EXEC_SOCKET says.
inline constexpr const char* default_exec_socket = "/run/cohort/exec.sock";

/// Adds `exec` to `parent`.
void add_exec_command(CLI::App& parent, exec_cli& c);

/// Runs it: the program's exit status (128 + N when signal N ended it);
/// 1 when no session could be opened (no node, no grant); 2 for bad input;
/// 127 when the program cannot be run.
int cmd_exec(const exec_cli& c);

/// The shim's path: in the folders GPU plugins are looked for in
/// (COHORT_PLUGIN_PATH first), or this build tree's exec/; empty when it
/// is in none.
std::string exec_shim_path();

} // namespace cohort::tools
