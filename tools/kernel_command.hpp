// `cohort kernel keygen|sign|verify|inspect|list`: signing keys and signed
// kernel bundles, and the kernels of the registry (docs/kernels.md).
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "tools/cli.hpp"

namespace cohort::tools {

/// `cohort kernel ...` as CLI11 parsed it.
struct kernel_cli {
  CLI::App* keygen = nullptr;
  CLI::App* sign = nullptr;
  CLI::App* verify = nullptr;
  CLI::App* inspect = nullptr;
  CLI::App* list = nullptr;
  /// keygen: where the keys go (PREFIX.key, PREFIX.pub).
  std::string prefix;
  /// sign, verify, inspect: the bundle's directory.
  std::string bundle;
  /// sign: the private key file.
  std::string key;
  /// verify, list: a runtime config whose kernel_bundles settings apply
  /// (list: whose bundles load first).
  std::string config;
  /// verify: trust settings given on the command line, added to the
  /// config's.
  std::vector<std::string> trusted;
  std::vector<std::string> revoked_keys;
  std::vector<std::string> revoked_bundles;
  bool json = false;
};

/// Adds `kernel` and its subcommands to `parent`, filling `k`.
void add_kernel_command(CLI::App& parent, kernel_cli& k);

/// Runs the parsed command, printing to `out` and errors to stderr.
/// Returns 0; 1 when verify refuses the bundle (the reason on stderr); 2
/// for bad input (an existing key file, an unwritable path, a bundle that
/// cannot be read or parsed, a bad config).
int run_kernel(const kernel_cli& k, std::FILE* out);

/// Parses and runs `cohort kernel ARGS` (ARGS without "kernel").
int run_kernel(const std::vector<std::string>& args, std::FILE* out);

} // namespace cohort::tools
