// ./dev.sh gpu-check (scripts/gpu-check.sh) on a machine without a GPU:
// exit 2 and a report that says nothing was validated, never a pass. On a
// machine with an NVIDIA GPU the check itself is what to run.
#include <catch2/catch.hpp>

#include <fstream>
#include <iterator>

#include "tests/runtime_fixture.hpp"
#include "tests/tools/cli_fixture.hpp"

using namespace cohort;

TEST_CASE("gpu-check on a machine without an NVIDIA GPU validates nothing and "
          "says so",
          "[tools][cli]") {
  if (test::run_command("nvidia-smi -L 2>/dev/null | grep -q '^GPU '").status ==
      0) {
    WARN("SKIPPED: this machine has an NVIDIA GPU; ./dev.sh gpu-check is the "
         "check to run here");
    return;
  }
  test::temp_dir dir;
  auto report = dir.file("report.md");
  auto res = test::run_command(std::string{COHORT_SOURCE_DIR} +
                               "/scripts/gpu-check.sh " + report);
  INFO(res.output);
  CHECK(res.status == 2);
  CHECK_THAT(res.output, Catch::Contains("nothing validated"));
  std::ifstream in{report.c_str()};
  std::string text{std::istreambuf_iterator<char>{in}, {}};
  CHECK_THAT(text, Catch::Contains("# Cohort GPU check"));
  CHECK_THAT(text, Catch::Contains("## No NVIDIA GPU"));
}
