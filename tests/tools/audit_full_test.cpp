// The audit log on a disk that fills up: a node keeps serving and stops on
// SIGTERM while the log cannot take its backlog, and `cohort chaos` names the
// write error. A file-size limit (RLIMIT_FSIZE) is the full disk: a write
// past it writes what fits and fails (EFBIG), as on a disk with that much
// room, and raising it is space coming back.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <regex>
#include <thread>

#include <httplib.h>

#include "devices/memory/asan_poison.hpp"
#include "tests/temp_dir.hpp"
#include "tests/tools/cli_fixture.hpp"

using namespace cohort;
using namespace std::chrono_literals;

namespace {

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Starts `cohort ARGS` with its output in `out` and a file-size limit of
// `limit` bytes; returns its pid.
pid_t start_limited(const std::string& args, const std::string& out,
                    rlim_t limit) {
  std::string cmd =
      "exec " + std::string{COHORT_BINARY} + " " + args + " > " + out + " 2>&1";
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    rlimit rl{limit, RLIM_INFINITY};
    ::setrlimit(RLIMIT_FSIZE, &rl);
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), nullptr);
    ::_exit(127);
  }
  return pid;
}

// Kills and reaps the child `pid` when a test ends early (a failed REQUIRE).
struct reaped {
  pid_t pid;
  ~reaped() {
    if (pid > 0 && ::waitpid(pid, nullptr, WNOHANG) == 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }
};

// Resident memory of `pid` in KiB (0 when unknown).
long rss_kib(pid_t pid) {
  auto status = test::slurp("/proc/" + std::to_string(pid) + "/status");
  std::smatch m;
  if (std::regex_search(status, m, std::regex{"VmRSS:\\s+(\\d+) kB"}))
    return std::stol(m[1]);
  return 0;
}

} // namespace

TEST_CASE("a node whose audit log cannot take its backlog keeps answering and "
          "stops on SIGTERM",
          "[tools][cli][audit]") {
  test::temp_dir dir;
  // Rejections while the log fails are records too: the pipeline keeps
  // submitting, as clients would.
  auto spec = test::write(dir, "p.textproto", R"(
name: "flood"
tenant: "t"
batches: 200
window: 64
stage { name: "scale" kernel: AXPY args { alpha: 2 n: 1024 } }
runtime {
  devices { cpu_workers: 2 gpus: false }
  tenant { tenant: "t" kernels: "*" devices: "*" }
  audit { max_unwritten_mib: 4 }
}
)");
  auto out = dir.file("serve.out");
  auto log = dir.file("audit.log");
  constexpr rlim_t room = 512 << 10;
  pid_t pid =
      start_limited("serve --pipeline " + spec +
                        " --repeat 0 --listen 127.0.0.1:0 --audit " + log,
                    out, room);
  reaped guard{pid};
  int port = 0;
  std::smatch m;
  for (int i = 0; i < 500 && port == 0; ++i) {
    auto text = test::slurp(out);
    if (std::regex_search(text, m,
                          std::regex{"listening on http://127.0.0.1:(\\d+)"}))
      port = std::stoi(m[1]);
    else
      std::this_thread::sleep_for(20ms);
  }
  REQUIRE(port != 0);
  httplib::Client http{"127.0.0.1", port};
  http.set_read_timeout(5, 0);
  auto metric = [&](const std::string& name) -> std::string {
    auto r = http.Get("/metrics");
    if (!r || r->status != 200)
      return "no answer";
    std::smatch v;
    if (std::regex_search(r->body, v, std::regex{"\n" + name + " (\\S+)"}))
      return v[1];
    return "absent";
  };
  // The log fills its room and fails; its backlog reaches the cap.
  bool failing = false;
  for (int i = 0; i < 500 && !failing; ++i) {
    failing = metric("cohort_audit_failing") == "1";
    std::this_thread::sleep_for(20ms);
  }
  REQUIRE(failing);
  std::this_thread::sleep_for(3s);
  // Room for part of the backlog comes back: 1 MiB for 4 MiB waiting.
  rlimit more{room + (1 << 20), RLIM_INFINITY};
  REQUIRE(::prlimit(pid, RLIMIT_FSIZE, &more, nullptr) == 0);
  long rss_before = rss_kib(pid);
  for (int i = 0; i < 10; ++i) {
    auto at = std::chrono::steady_clock::now();
    auto failing_now = metric("cohort_audit_failing");
    auto took = std::chrono::steady_clock::now() - at;
    INFO("scrape " << i);
    // Before: the writer wrote the whole backlog again for each record that
    // came in, cut it back, and never answered again.
    CHECK(failing_now == "1");
    CHECK(took < 2s);
    std::this_thread::sleep_for(300ms);
  }
  // What fitted was written and kept: the log holds verified records up to
  // its new room.
  auto verdict = audit::audit_log::verify(log);
  CHECK(verdict.good_records > 0);
  CHECK(std::filesystem::file_size(log) > room + (512 << 10));
  // Memory stays within the 4 MiB of records and what it had (before: 1 GB
  // more within the 3 s). ASan keeps up to 256 MiB of freed memory.
  long slack_kib = devices::memory::asan_enabled ? 320 << 10 : 32 << 10;
  CHECK(rss_kib(pid) < rss_before + slack_kib);
  REQUIRE(::kill(pid, SIGTERM) == 0);
  int status = 0;
  pid_t done = 0;
  for (int i = 0; i < 1000 && done == 0; ++i) {
    done = ::waitpid(pid, &status, WNOHANG);
    if (done == 0)
      std::this_thread::sleep_for(20ms);
  }
  if (done == 0) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
  }
  auto text = test::slurp(out);
  INFO(text);
  CHECK(done == pid);
  guard.pid = 0;
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 1);
  CHECK(has(text, "INCOMPLETE"));
  CHECK(has(text, "File too large"));
}

TEST_CASE("cohort chaos on a disk that stays full names the write error",
          "[tools][cli][audit]") {
  test::temp_dir dir;
  auto out = dir.file("chaos.out");
  auto scenario =
      std::string{COHORT_SOURCE_DIR} + "/chaos/scenarios/single_loss.textproto";
  pid_t pid = start_limited(
      "chaos " + scenario + " --audit-dir " + dir.path.string(), out, 16 << 10);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  auto text = test::slurp(out);
  INFO(text);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 1);
  // Before: hundreds of "no record of item N" and never the cause.
  CHECK(has(text, "the audit log could not be written (io_error: "));
  CHECK(has(text, "File too large"));
  CHECK(has(text, "it does not vouch for this run"));
  CHECK_FALSE(has(text, "no record of item"));
}
