// `cohort run` and `cohort chaos` stopped by SIGTERM (GNU timeout sends it
// twice): they stop where the work can stop, print their report and exit 1
// (the work was not all done), instead of dying by the signal (exit 143).
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <thread>

#include "tests/temp_dir.hpp"
#include "tests/tools/cli_fixture.hpp"

using namespace cohort;
using namespace std::chrono_literals;

namespace {

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Starts `args` of the cohort program with its output in `out`; waits until
// `ready` says it runs (or 10 s), then sends three SIGTERMs 10 ms apart and
// returns the wait status.
int terminated(const std::string& args, const std::string& out,
               const std::function<bool()>& ready) {
  std::string cmd =
      "exec " + std::string{COHORT_BINARY} + " " + args + " > " + out + " 2>&1";
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), nullptr);
    ::_exit(127);
  }
  for (int i = 0; i < 500 && !ready(); ++i)
    std::this_thread::sleep_for(20ms);
  for (int i = 0; i < 3; ++i) {
    REQUIRE(::kill(pid, SIGTERM) == 0);
    std::this_thread::sleep_for(10ms);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  return status;
}

} // namespace

TEST_CASE("cohort run stops on SIGTERM with its report: submitted items end, "
          "the others are not submitted",
          "[tools][cli]") {
  test::temp_dir dir;
  // Long enough that it is still running when the signal comes.
  auto spec = test::write(dir, "long.textproto", R"(
name: "long"
tenant: "t"
batches: 1000000
window: 4
stage { name: "scale" kernel: AXPY args { alpha: 2 n: 4096 } }
runtime {
  devices { cpu_workers: 1 gpus: false }
  tenant { tenant: "t" kernels: "*" devices: "*" }
}
)");
  auto out = dir.file("run.out");
  auto log = dir.file("audit.log");
  // Running once its audit log holds the first items.
  int status = terminated("run " + spec + " --no-progress --audit " + log, out,
                          [&] { return test::slurp(log).size() > 4096; });
  auto text = test::slurp(out);
  INFO(text);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 1);
  CHECK(has(text, "cohort run: stopping (Terminated): no more items are "
                  "submitted; those submitted end"));
  CHECK(has(text, "not submitted: the run was stopped"));
  CHECK(has(text, " 0 lost, 0 duplicated"));
}

TEST_CASE("cohort chaos stops on SIGTERM after the run in progress, with the "
          "summary of those that ran",
          "[tools][cli]") {
  test::temp_dir dir;
  auto out = dir.file("chaos.out");
  auto scenario =
      std::string{COHORT_SOURCE_DIR} + "/chaos/scenarios/single_loss.textproto";
  int status = terminated("chaos " + scenario + " --repeat 50", out,
                          [&] { return has(test::slurp(out), "scenario"); });
  auto text = test::slurp(out);
  INFO(text);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 1);
  CHECK(has(text, "already stopping"));
  CHECK(has(text, "stopped (Terminated) after "));
  CHECK(has(text, " of 50 runs; the others did not run"));
  CHECK(has(text, "0 lost, 0 duplicated"));
}
