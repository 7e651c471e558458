// `cohort kernel keygen|list`: signing keys for kernel bundles, and the
// kernels of the registry (docs/kernels.md).
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "tools/cli.hpp"

namespace cohort::tools {

/// `cohort kernel ...` as CLI11 parsed it.
struct kernel_cli {
  CLI::App* keygen = nullptr;
  CLI::App* list = nullptr;
  /// keygen: where the keys go (PREFIX.key, PREFIX.pub).
  std::string prefix;
  bool json = false;
};

/// Adds `kernel` and its subcommands to `parent`, filling `k`.
void add_kernel_command(CLI::App& parent, kernel_cli& k);

/// Runs the parsed command, printing to `out` and errors to stderr.
/// Returns 0, or 2 for bad input (an existing key file, an unwritable path).
int run_kernel(const kernel_cli& k, std::FILE* out);

/// Parses and runs `cohort kernel ARGS` (ARGS without "kernel").
int run_kernel(const std::vector<std::string>& args, std::FILE* out);

} // namespace cohort::tools
