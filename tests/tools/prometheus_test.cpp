// A real Prometheus server (Debian's `prometheus`), started on loopback,
// scrapes `cohort serve`'s /metrics; queries through its HTTP API return the
// expected series. Skipped with a message where prometheus is not installed.
#include <catch2/catch.hpp>

#include <csignal>
#include <fstream>
#include <netinet/in.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

#include <httplib.h>

#include "tests/runtime_fixture.hpp"
#include "tests/tools/cli_fixture.hpp"
#include "tools/serve_command.hpp"

extern char** environ;

using namespace cohort;
using namespace std::chrono_literals;

namespace {

std::string find_prometheus() {
  for (const char* dir : {"/usr/bin", "/usr/local/bin", "/bin"}) {
    auto path = std::string{dir} + "/prometheus";
    if (::access(path.c_str(), X_OK) == 0)
      return path;
  }
  return {};
}

int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// The server process; stopped with SIGTERM when the test ends.
struct child {
  pid_t pid = -1;
  ~child() {
    if (pid > 0) {
      ::kill(pid, SIGTERM);
      int st = 0;
      ::waitpid(pid, &st, 0);
    }
  }
};

} // namespace

TEST_CASE_METHOD(test::actor_fixture,
                 "a real Prometheus server scrapes cohort serve",
                 "[tools][prometheus]") {
  auto prometheus = find_prometheus();
  if (prometheus.empty()) {
    WARN("SKIPPED: prometheus is not installed (apt-get install prometheus; "
         "deps/apt.txt lists it)");
    return;
  }
  auto cfg = test::make_config(dir, 1, {{"sim0", 1}, {"sim1", 2}});
  auto rt = actors::runtime::start(sys, cfg);
  REQUIRE(rt);
  tools::metrics_exporter metrics{**rt};
  tools::admin_api api{**rt, "", metrics};
  tools::http_service http{api};
  auto port = http.start("127.0.0.1", 0);
  REQUIRE(port);
  std::vector<work_item> items;
  for (uint64_t i = 1; i <= 20; ++i)
    items.push_back(test::gemv_item(i));
  auto e = test::submit_all(sys, **rt, items, [] {});
  test::check_exactly_once(items, e);
  // Prometheus on a port of its own, scraping every second.
  int prom_port = free_port();
  auto yml = test::write(dir, "prometheus.yml",
                         "global:\n  scrape_interval: 1s\n"
                         "scrape_configs:\n  - job_name: cohort\n"
                         "    static_configs:\n      - targets: ['127.0.0.1:" +
                             std::to_string(*port) + "']\n");
  std::vector<std::string> argv_s{prometheus, "--config.file=" + yml,
                                  "--storage.tsdb.path=" + dir.file("tsdb"),
                                  "--web.listen-address=127.0.0.1:" +
                                      std::to_string(prom_port),
                                  "--log.level=warn"};
  std::vector<char*> argv;
  for (auto& s : argv_s)
    argv.push_back(s.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  auto log = dir.file("prometheus.log");
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  child prom;
  REQUIRE(posix_spawn(&prom.pid, prometheus.c_str(), &fa, nullptr, argv.data(),
                      environ) == 0);
  posix_spawn_file_actions_destroy(&fa);
  httplib::Client client{"127.0.0.1", prom_port};
  client.set_connection_timeout(1);
  // Asks Prometheus until the query has a result (or 60 s pass).
  auto query = [&](const std::string& q) {
    std::string body;
    for (int i = 0; i < 240; ++i) {
      auto r = client.Get("/api/v1/query", httplib::Params{{"query", q}},
                          httplib::Headers{});
      if (r && r->status == 200 &&
          r->body.find("\"result\":[]") == std::string::npos) {
        body = r->body;
        break;
      }
      std::this_thread::sleep_for(250ms);
    }
    return body;
  };
  auto up = query("up{job=\"cohort\"}");
  auto prom_log = [&] {
    std::ifstream in{log};
    return std::string{std::istreambuf_iterator<char>{in}, {}};
  };
  INFO("prometheus log: " << prom_log());
  REQUIRE_FALSE(up.empty());
  CHECK(up.find("\"1\"]") != std::string::npos);
  auto completed = query("cohort_items_completed_total");
  CHECK(completed.find("\"20\"]") != std::string::npos);
  auto fb = query("DCGM_FI_DEV_FB_USED{device=\"sim1\"}");
  CHECK(fb.find("\"modelName\":\"simulated GPU\"") != std::string::npos);
  CHECK(fb.find("\"cohort_simulated\":\"true\"") != std::string::npos);
  auto p99 = query("histogram_quantile(0.99, sum by (le) "
                   "(cohort_work_latency_seconds_bucket{kernel=\"gemv\"}))");
  CHECK(p99.find("\"value\":[") != std::string::npos);
  auto tenant = query("cohort_tenant_inflight{tenant=\"t\"}");
  CHECK(tenant.find("\"tenant\":\"t\"") != std::string::npos);
  http.stop();
  (*rt)->stop();
}

TEST_CASE("the shipped alert rules load in Prometheus and pass their tests",
          "[tools][prometheus]") {
  if (::access("/usr/bin/promtool", X_OK) != 0) {
    WARN("SKIPPED: promtool is not installed (it comes with Debian's "
         "prometheus package; deps/apt.txt lists it)");
    return;
  }
  auto rules = std::string{COHORT_SOURCE_DIR} + "/docs/alerts/cohort-rules.yml";
  auto check = test::run_command("/usr/bin/promtool check rules " + rules);
  INFO(check.output);
  CHECK(check.status == 0);
  CHECK(check.output.find("SUCCESS") != std::string::npos);
  // The unit tests fire each rule from made-up series (and show a zero quota
  // does not); promtool resolves rule_files relative to the test file.
  auto tests = test::run_command("/usr/bin/promtool test rules " +
                                 std::string{COHORT_SOURCE_DIR} +
                                 "/docs/alerts/cohort-rules.test.yml");
  INFO(tests.output);
  CHECK(tests.status == 0);
  CHECK(tests.output.find("SUCCESS") != std::string::npos);
}
