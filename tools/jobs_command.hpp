// `cohort jobs`: a running node's live items, one item, and cancels, through
// its admin API (docs/jobs.md).
#pragma once

#include <string>

#include "tools/cli.hpp"

namespace cohort::tools {

/// `cohort jobs` as CLI11 parsed it.
struct jobs_cli {
  CLI::App* app = nullptr;
  CLI::App* list = nullptr;
  CLI::App* describe = nullptr;
  CLI::App* cancel = nullptr;
  std::string url;
  std::string token_file;
  std::string tenant;
  /// describe's and cancel's JOB, cancel's --client (as given: checked
  /// when run).
  std::string job;
  std::string client;
  bool json = false;
};

/// Adds `jobs list|describe|cancel` to `parent`.
void add_jobs_command(CLI::App& parent, jobs_cli& c);

/// Runs it: 0, 1 when the node cannot be reached or refuses (an unknown
/// job, a wrong token), 2 for bad input.
int cmd_jobs(const jobs_cli& c);

} // namespace cohort::tools
