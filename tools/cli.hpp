// The command line on CLI11: helpers shared by the `cohort` program's
// commands (each command adds its subcommand to the app and runs from what
// CLI11 parsed; values are then read strictly by tools/strict_numbers.hpp).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace cohort::tools {

/// Exit statuses of every command.
inline constexpr int exit_ok = 0;
inline constexpr int exit_failed = 1;
inline constexpr int exit_bad_input = 2;

/// Options that take a value, by name ("--config"), read as strings: a
/// command checks them itself (strict numbers and sizes, files).
struct string_options {
  std::map<std::string, std::string> values;
  std::map<std::string, CLI::Option*> options;

  /// Adds `--name VALUE` to `app`.
  CLI::Option* add(CLI::App& app, const std::string& name,
                   const std::string& help, const std::string& type = "TEXT");

  /// The options given on the command line, name to value.
  std::map<std::string, std::string> given() const;

  /// The value of `name`, or "" when it was not given.
  std::string get(const std::string& name) const;
};

/// Parses `args` (without the program's name) with `app`. Returns the exit
/// status when parsing ended the run: --help (its text on `out`, 0) or a
/// usage error (the message on stderr, naming the command, 2); nullopt
/// when the command should run.
std::optional<int> parse_cli(CLI::App& app, std::vector<std::string> args,
                             std::FILE* out = stdout);

/// A bash completion script for `app` (`cohort completion bash`).
std::string bash_completion(const CLI::App& app);

} // namespace cohort::tools
