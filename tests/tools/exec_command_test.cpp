// `cohort exec` against a node served in process (docs/exec.md): a program
// held to its limit and to its tenant's quota in the node's book, its
// session in the admin API, the metrics and the audit log, its exit status
// passed on, a killed program's memory back, and what is refused.
#include <catch2/catch.hpp>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>

#include "tests/temp_dir.hpp"
#include "tests/tools/cli_fixture.hpp"
#include "tests/tools/served_fixture.hpp"

using namespace cohort;
using namespace std::chrono_literals;

namespace {

constexpr uint64_t mib = uint64_t{1} << 20;

struct exec_node : test::served {
  std::string socket;

  /// A node with tenants "t" (a 6 MiB device-memory quota) and "u", an
  /// exec socket, and grants for this user on "t" only.
  void start_node() {
    auto cfg = test::make_config(dir, 1, {{"sim0", 1}});
    cfg.mutable_tenant(0)->set_memory_quota_bytes(6 * mib);
    auto* u = cfg.add_tenant();
    u->set_tenant("u");
    u->add_kernels("*");
    u->add_devices("*");
    socket = dir.file("exec.sock");
    auto* e = cfg.mutable_exec_sessions();
    e->set_socket(socket);
    auto* g = e->add_grant();
    g->set_tenant("t");
    g->set_uid(::getuid());
    cfg.set_audit_path(dir.file("audit.log"));
    start(cfg);
  }

  /// `cohort exec` of the allocating program with `args`.
  std::string exec_line(const std::string& tenant, const std::string& limit,
                        const std::string& args) const {
    return std::string{"COHORT_FAKE_CUDA_LIB="} + COHORT_FAKE_CUDA + " " +
           COHORT_BINARY + " exec --socket " + socket + " --tenant " + tenant +
           " --limit " + limit + " -- " + COHORT_ALLOC_PROGRAM + " " + args;
  }

  uint64_t tenant_memory(const std::string& tenant) {
    auto h = rt->headroom(tenant);
    REQUIRE(h);
    REQUIRE(h->tenants.size() == 1);
    return h->tenants[0].memory;
  }

  std::string audit_text() {
    REQUIRE(rt->flush_audit());
    std::string out;
    for (auto& r : test::read_audit(dir.file("audit.log")))
      if (r.kind() == pb::EXEC_SESSION)
        out += r.tenant() + " " + std::to_string(r.work_id()) + " " +
               r.detail() + "\n";
    return out;
  }
};

using test::has;

} // namespace

TEST_CASE_METHOD(exec_node,
                 "cohort exec holds a program to its limit and its tenant's "
                 "quota, and passes on its exit status",
                 "[tools][exec]") {
  start_node();
  // 8 MiB of session, but the tenant may hold 6 MiB in all.
  auto run =
      test::run_command(exec_line("t", "8MiB", "rt 4M rt 3M drv 2M in-use"));
  INFO(run.output);
  CHECK(run.status == 0);
  CHECK(has(run.output, "rt 4194304: 0\n"));
  CHECK(has(run.output, "rt 3145728: 2\n"));
  CHECK(has(run.output, "over_quota"));
  CHECK(has(run.output, "its quota is 6291456"));
  CHECK(has(run.output, "drv 2097152: 0\n"));
  CHECK(has(run.output, "in-use: 6291456\n"));
  // Its end gave everything back to the book.
  CHECK(test::eventually([&] { return tenant_memory("t") == 0; }));
  auto x = rt->exec_sessions();
  REQUIRE(x);
  CHECK(
      test::eventually([&] { return rt->exec_sessions()->sessions.empty(); }));
  CHECK(rt->exec_sessions()->opened == 1);
  CHECK(rt->exec_sessions()->lease_refusals == 1);
  auto audit = audit_text();
  CHECK(has(audit, "t 1 opened for pid"));
  CHECK(has(audit, "limit 8.0 MiB"));
  CHECK(has(audit, "t 1 refused 3.0 MiB to pid"));
  CHECK(has(audit, "t 1 ended: peak"));
  // The program's own status comes back.
  auto failing = test::run_command(exec_line("t", "1M", "what-is-this"));
  CHECK(failing.status == 2);
  CHECK(has(failing.output, "what is 'what-is-this'"));
  auto missing = test::run_command(
      std::string{COHORT_BINARY} + " exec --socket " + socket +
      " --tenant t --limit 1M -- /nonexistent/program");
  CHECK(missing.status == 127);
  CHECK(has(missing.output, "cannot run '/nonexistent/program'"));
}

TEST_CASE_METHOD(exec_node,
                 "a session shows in the admin API and the metrics, and a "
                 "killed program's memory goes back",
                 "[tools][exec]") {
  start_node();
  std::string line = exec_line("t", "16MiB", "rt 3M hold");
  FILE* p = ::popen((line + " 2>&1").c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[256] = {};
  REQUIRE(std::fgets(buf, sizeof buf, p) != nullptr); // rt 3145728: 0
  CHECK(has(buf, "rt 3145728: 0"));
  REQUIRE(std::fgets(buf, sizeof buf, p) != nullptr); // holding PID
  int pid = 0;
  REQUIRE(std::sscanf(buf, "holding %d", &pid) == 1);
  CHECK(tenant_memory("t") >= 3 * mib);
  auto s = get("/v1/exec-sessions");
  REQUIRE(s);
  CHECK(s->status == 200);
  CHECK(has(s->body, "\"socket\": \"" + socket + "\""));
  CHECK(has(s->body, "\"tenant\": \"t\""));
  CHECK(has(s->body, "\"limit_bytes\": \"16777216\""));
  CHECK(has(s->body, "\"processes\": 1"));
  auto m = get("/metrics");
  REQUIRE(m);
  CHECK(has(m->body, "cohort_exec_sessions 1"));
  CHECK(has(m->body, "cohort_exec_processes{tenant=\"t\"} 1"));
  CHECK(has(m->body, "cohort_exec_leased_bytes{tenant=\"t\"}"));
  auto killed = std::chrono::steady_clock::now();
  REQUIRE(::kill(pid, SIGKILL) == 0);
  CHECK(test::eventually([&] { return tenant_memory("t") == 0; }));
  double ms =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - killed)
          .count() *
      1000;
  INFO("reclaimed in " << ms << " ms");
  // cohort exec ends as its program did.
  int st = ::pclose(p);
  CHECK(WIFEXITED(st));
  CHECK(WEXITSTATUS(st) == 128 + SIGKILL);
  CHECK(
      test::eventually([&] { return rt->exec_sessions()->sessions.empty(); }));
  CHECK(rt->exec_sessions()->reclaims == 1);
  m = get("/metrics");
  REQUIRE(m);
  CHECK(has(m->body, "cohort_exec_reclaims_total 1"));
  // Its socket may close before its pidfd tells: either way, its pid.
  // What it used, leased as it allocated (not a quarter of its limit).
  CHECK(has(audit_text(), "reclaimed 3.0 MiB of pid " + std::to_string(pid)));
}

TEST_CASE_METHOD(exec_node,
                 "a program with a large limit that allocates little holds "
                 "little of its tenant's quota",
                 "[tools][exec]") {
  start_node();
  // 16 MiB of session, 1 MiB used: it used to lease a quarter of its limit
  // (4 MiB of the tenant's 6), and a second program of the tenant was
  // refused 3 MiB.
  FILE* p = ::popen((exec_line("t", "16MiB", "rt 1M hold") + " 2>&1").c_str(),
                    "r");
  REQUIRE(p != nullptr);
  char buf[256] = {};
  REQUIRE(std::fgets(buf, sizeof buf, p) != nullptr);
  CHECK(has(buf, "rt 1048576: 0"));
  REQUIRE(std::fgets(buf, sizeof buf, p) != nullptr);
  int pid = 0;
  REQUIRE(std::sscanf(buf, "holding %d", &pid) == 1);
  CHECK(tenant_memory("t") <= 2 * mib);
  auto second = test::run_command(exec_line("t", "8MiB", "rt 4M in-use"));
  INFO(second.output);
  CHECK(second.status == 0);
  CHECK(has(second.output, "rt 4194304: 0\n"));
  REQUIRE(::kill(pid, SIGKILL) == 0);
  ::pclose(p);
  CHECK(test::eventually([&] { return tenant_memory("t") == 0; }));
}

TEST_CASE_METHOD(exec_node, "cohort exec refuses what it cannot do",
                 "[tools][exec]") {
  start_node();
  // No grant for "u", no such tenant, no node.
  auto u = test::run_command(exec_line("u", "1M", "rt 1M"));
  CHECK(u.status == 1);
  CHECK(has(u.output, "no session"));
  CHECK(has(u.output, "has no grant for tenant 'u'"));
  CHECK_FALSE(has(u.output, "rt 1048576"));
  auto none = test::run_command(std::string{COHORT_BINARY} + " exec --socket " +
                                dir.file("none.sock") +
                                " --tenant t --limit 1M -- true");
  CHECK(none.status == 1);
  CHECK(has(none.output, "no node answers"));
  // Bad input.
  for (auto limit : {"0", "lots", "1e30", "-5M"}) {
    auto bad = test::run_command(exec_line("t", limit, "rt 1M"));
    INFO(limit << ": " << bad.output);
    CHECK(bad.status == 2);
  }
  auto no_program =
      test::cohort_cli("exec --socket " + socket + " --tenant t --limit 1M");
  CHECK(no_program.status == 2);
  // The node without an exec socket says so.
  auto cfg = test::make_config(dir, 1, {});
  cfg.mutable_exec_sessions()->add_grant()->set_tenant("t");
  auto refused = actors::runtime::start(sys, cfg);
  REQUIRE_FALSE(refused);
  CHECK(has(describe(refused.error()), "grants without a socket"));
}

TEST_CASE("an exec config is checked before anything starts", "[tools][exec]") {
  test::temp_dir dir;
  auto check = [&](const std::string& text) {
    auto path = dir.file("c.textproto");
    std::ofstream{path} << "devices { cpu_workers: 1 }\n"
                           "tenant { tenant: \"t\" kernels: \"*\" devices: "
                           "\"*\" }\n"
                        << text;
    return test::cohort_cli("devices --config " + path);
  };
  auto socket = "exec_sessions { socket: \"" + dir.file("x.sock") + "\" ";
  for (auto [text, why] : {
           std::pair{socket + "grant { tenant: \"t\" } }",
                     "names no one: set uid, gid or any_user"},
           {socket + "grant { tenant: \"v\" uid: 1 } }",
            "the config has no such tenant"},
           {socket + "grant { uid: 1 } }", "a grant names no tenant"},
           {socket + "grant { tenant: \"*\" any_user: true uid: 3 } }",
            "sets any_user and a uid or gid"},
           {socket + "chunk_bytes: 10 }", "chunk_bytes is 10"},
           {socket + "idle_timeout_ms: 4000000000 }", "at most a day"},
           {socket + "max_sessions: 100000 }", "max_sessions is 100000"},
           {"exec_sessions { socket: \"" + std::string(200, 'x') + "\" }",
            "a Unix socket's at most"},
       }) {
    auto out = check(text);
    INFO(text << "\n" << out.output);
    CHECK(out.status == 2);
    CHECK(has(out.output, why));
  }
  auto fine = check(socket + "grant { tenant: \"*\" any_user: true } }");
  INFO(fine.output);
  CHECK(fine.status == 0);
}
