// The command line on CLI11: helpers shared by the `cohort` program's
// commands (each command adds its subcommand to the app and runs from what
// CLI11 parsed; values are then read strictly by tools/strict_numbers.hpp).
//
// CLI11 (2.1, header only) costs about ten seconds of compile time in every
// unit that includes it, used or not: its headers define validator objects
// and inline virtual classes that each unit compiles again. So this header
// only names its classes, and CLI11 is compiled in two units: tools/cli.cpp
// (these helpers and the options of every command in its own file,
// `add_*_command`) and tools/cohort.cpp (the program's own commands).
#pragma once

#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace CLI {
class App;
class Option;
} // namespace CLI

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

/// Whether the command line named subcommand `app` (CLI11's
/// `App::parsed()`, for the units that do not compile CLI11).
bool parsed(const CLI::App* app);

} // namespace cohort::tools
