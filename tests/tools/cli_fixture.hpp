// Helpers for tests of the `cohort` command line: files written into a
// temporary directory, and the built program run with its output captured.
#pragma once

#include <catch2/catch.hpp>

#include <array>
#include <cstdio>
#include <fstream>
#include <string>
#include <sys/wait.h>

#include "tests/runtime_fixture.hpp"

namespace cohort::test {

/// Writes `text` to `name` in `dir`; returns its path.
inline std::string write(const temp_dir& dir, const std::string& name,
                         const std::string& text) {
  auto path = dir.file(name);
  std::ofstream{path} << text;
  return path;
}

struct cli_result {
  int status = -1;
  std::string output;
};

/// Runs a shell command line, capturing stdout and stderr.
inline cli_result run_command(const std::string& line) {
  cli_result out;
  std::string cmd = line + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0)
    out.output.append(buf.data(), n);
  int st = ::pclose(p);
  out.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return out;
}

/// Runs the built `cohort` binary with `args`, capturing stdout and stderr.
inline cli_result cohort_cli(const std::string& args) {
  return run_command(std::string{COHORT_BINARY} + " " + args);
}

} // namespace cohort::test
