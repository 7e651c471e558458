// cohort serve's HTTP side, in process: every admin API route over real
// HTTP (bad JSON, unknown device or tenant, missing and wrong token), the
// metrics exposition, and the `cohort serve` / `cohort admin` programs with
// a clean stop on SIGTERM.
#include <catch2/catch.hpp>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

#include <sys/wait.h>
#include <unistd.h>

#include <httplib.h>

#include "audit/audit_log.hpp"
#include "cohort/client.hpp"
#include "tests/json_fixture.hpp"
#include "tests/runtime_fixture.hpp"
#include "tests/temp_dir.hpp"
#include "tests/tools/cli_fixture.hpp"
#include "tests/tools/served_fixture.hpp"
#include "tools/serve_command.hpp"

using namespace cohort;
using namespace std::chrono_literals;

namespace {

using test::served;
using test::token;

using test::has;

} // namespace

TEST_CASE_METHOD(served, "the admin API answers every route over HTTP",
                 "[tools][serve]") {
  auto cfg = test::make_config(dir, 1, {{"sim0", 1}, {"sim1", 1}});
  cfg.mutable_tenant(0)->set_max_inflight(32);
  start(cfg);
  auto items = std::vector<work_item>{test::gemv_item(1), test::gemv_item(2)};
  auto e = test::submit_all(sys, *rt, items, [] {});
  test::check_exactly_once(items, e);
  SECTION("reads") {
    auto s = get("/v1/stats");
    REQUIRE(s);
    CHECK(s->status == 200);
    CHECK(s->get_header_value("Content-Type") == "application/json");
    CHECK(has(s->body, "\"completed\": \"2\""));
    CHECK(has(s->body, "\"admitted\": \"2\""));
    auto d = get("/v1/devices");
    REQUIRE(d);
    CHECK(d->status == 200);
    CHECK(has(d->body, "\"name\": \"sim1\""));
    CHECK(has(d->body, "\"status\": \"available\""));
    CHECK(has(d->body, "\"simulated\": true"));
    CHECK(has(d->body, "\"location\": \"node\""));
    CHECK(has(d->body, "\"host_pid\": 0"));
    auto t = get("/v1/tenants");
    REQUIRE(t);
    CHECK(t->status == 200);
    CHECK(has(t->body, "\"tenant\": \"t\""));
    CHECK(has(t->body, "\"max_inflight\": \"32\""));
    auto a = get("/v1/alerts");
    REQUIRE(a);
    CHECK(a->status == 200);
    auto h = get("/healthz");
    REQUIRE(h);
    CHECK(h->status == 200);
  }
  SECTION("metrics in the Prometheus text format") {
    auto m = get("/metrics");
    REQUIRE(m);
    CHECK(m->status == 200);
    CHECK(has(m->get_header_value("Content-Type"), "text/plain"));
    auto& b = m->body;
    CHECK(has(b, "# TYPE DCGM_FI_DEV_GPU_UTIL gauge"));
    CHECK(
        has(b, "DCGM_FI_DEV_FB_USED{gpu=\"1\",UUID=\"sim0\",device=\"sim0\""));
    CHECK(has(b, "# TYPE cohort_work_latency_seconds histogram"));
    CHECK(has(b, "cohort_work_latency_seconds_bucket{kernel=\"gemv\""));
    CHECK(has(b, "le=\"+Inf\"} "));
    CHECK(has(b, "cohort_items_completed_total 2"));
    CHECK(has(b, "cohort_tenant_inflight_limit{tenant=\"t\"} 32"));
    CHECK(has(b, "cohort_circuit_state{device=\"sim0\"} 0"));
    CHECK(
        has(b, "cohort_device_status{device=\"sim0\",status=\"available\"} 1"));
    CHECK(has(b, "cohort_audit_records_total "));
    CHECK(has(b, "cohort_queue_depth{device=\"cpu0\"} 0"));
    CHECK(has(b, "# TYPE cohort_device_memory_peak_used_bytes gauge"));
    CHECK(has(b, "cohort_device_memory_peak_used_bytes{device=\"sim0\"} "));
    CHECK(
        has(b, "cohort_device_memory_pool_peak_held_bytes{device=\"sim0\"} "));
    // CPU workers are not GPUs: no dcgm series for them.
    CHECK_FALSE(has(b, "DCGM_FI_DEV_GPU_UTIL{gpu=\"0\""));
  }
  SECTION("operators drain, offline and online a device with the token") {
    auto r = post("/v1/devices/sim0/drain", "");
    REQUIRE(r);
    CHECK(r->status == 200);
    auto d = get("/v1/devices");
    REQUIRE(d);
    CHECK(has(d->body, "\"status\": \"draining\""));
    r = post("/v1/devices/sim1/offline", "");
    REQUIRE(r);
    CHECK(r->status == 200);
    r = post("/v1/devices/sim1/drain", "");
    REQUIRE(r);
    CHECK(r->status == 409);
    CHECK(has(r->body, "\"error\": \"invalid_transition\""));
    r = post("/v1/devices/sim1/online", "");
    REQUIRE(r);
    CHECK(r->status == 200);
    REQUIRE(rt->flush_audit());
    std::ifstream in{rt->audit_path(), std::ios::binary};
    std::string log{std::istreambuf_iterator<char>{in}, {}};
    CHECK(has(log, "admin API (127.0.0.1:"));
    CHECK(has(log, "): drain sim0: ok"));
    CHECK(has(log, "): offline sim1: ok"));
  }
  SECTION("a tenant's quota changes at run time") {
    auto r = post("/v1/tenants/t/quota",
                  R"({"max_inflight": 7, "memory_quota_bytes": "1048576"})");
    REQUIRE(r);
    CHECK(r->status == 200);
    CHECK(has(r->body, "\"max_inflight\": \"7\""));
    auto h = rt->headroom("t");
    REQUIRE(h);
    CHECK(h->tenants.at(0).max_inflight == 7);
    CHECK(h->tenants.at(0).memory_quota == 1048576);
    // A quota no device could hold is refused and changes nothing.
    r = post("/v1/tenants/t/quota",
             R"({"memory_quota_bytes": "1099511627776000"})");
    REQUIRE(r);
    CHECK(r->status == 422);
    h = rt->headroom("t");
    REQUIRE(h);
    CHECK(h->tenants.at(0).memory_quota == 1048576);
  }
  SECTION("a dry run through the API") {
    auto r = post("/v1/simulate",
                  R"({"name": "p", "step": [{"tenant": "t", "device": "sim0",
                      "bytes": "1024", "label": "a"}]})",
                  "");
    REQUIRE(r);
    CHECK(r->status == 200);
    CHECK(has(r->body, "\"ok\": true"));
  }
  SECTION("bad requests get clear 4xx answers") {
    auto r = post("/v1/tenants/t/quota", "{\"max_inflight\": 7");
    REQUIRE(r);
    CHECK(r->status == 400);
    CHECK(has(r->body, "\"error\": \"bad_request\""));
    r = post("/v1/tenants/t/quota", "{\"max_inflights\": 7}");
    REQUIRE(r);
    CHECK(r->status == 400);
    r = post("/v1/tenants/nobody/quota", "{\"max_inflight\": 7}");
    REQUIRE(r);
    CHECK(r->status == 404);
    CHECK(has(r->body, "unknown_tenant"));
    r = post("/v1/devices/nope/offline", "");
    REQUIRE(r);
    CHECK(r->status == 404);
    CHECK(has(r->body, "unknown_device"));
    r = post("/v1/devices/sim0/explode", "");
    REQUIRE(r);
    CHECK(r->status == 404);
    r = post("/v1/simulate", "not json", "");
    REQUIRE(r);
    CHECK(r->status == 400);
    auto g = get("/v1/devices/sim0/drain");
    REQUIRE(g);
    CHECK(g->status == 405);
    CHECK(g->get_header_value("Allow") == "POST");
    CHECK(has(g->body, "/v1/devices/:name/drain takes POST, not GET"));
    r = post("/v1/stats", "");
    REQUIRE(r);
    CHECK(r->status == 405);
    CHECK(r->get_header_value("Allow") == "GET");
    g = get("/v2/stats");
    REQUIRE(g);
    CHECK(g->status == 404);
  }
  SECTION("mutating calls need the right token") {
    auto r = post("/v1/devices/sim0/drain", "", "");
    REQUIRE(r);
    CHECK(r->status == 401);
    CHECK(r->get_header_value("WWW-Authenticate") == "Bearer realm=\"cohort\"");
    r = post("/v1/devices/sim0/drain", "", "Bearer " + token + "x");
    REQUIRE(r);
    CHECK(r->status == 403);
    r = post("/v1/devices/sim0/drain", "", "Basic " + token);
    REQUIRE(r);
    CHECK(r->status == 403);
    r = post("/v1/tenants/t/quota", "{\"max_inflight\": 1}", "Bearer nope");
    REQUIRE(r);
    CHECK(r->status == 403);
    // Nothing changed.
    auto s = rt->placement_stats();
    REQUIRE(s);
    CHECK(s->devices[1].status == device_status::available);
    auto h = rt->headroom("t");
    REQUIRE(h);
    CHECK(h->tenants.at(0).max_inflight == 32);
  }
}

TEST_CASE_METHOD(served, "a node without a token refuses every mutating call",
                 "[tools][serve]") {
  start(test::make_config(dir, 1, {{"sim0", 1}}), "");
  auto r = post("/v1/devices/sim0/drain", "", "Bearer anything");
  REQUIRE(r);
  CHECK(r->status == 403);
  CHECK(has(r->body, "no admin token"));
  auto g = get("/v1/stats");
  REQUIRE(g);
  CHECK(g->status == 200);
}

TEST_CASE("tokens are compared whole", "[tools][serve]") {
  CHECK(tools::token_matches("abc", "abc"));
  CHECK_FALSE(tools::token_matches("abc", "abd"));
  CHECK_FALSE(tools::token_matches("ab", "abc"));
  CHECK_FALSE(tools::token_matches("", "abc"));
}

TEST_CASE("cohort serve runs a workload, is steered by cohort admin and stops "
          "cleanly on SIGTERM",
          "[tools][serve]") {
  test::temp_dir dir;
  auto tok = test::write(dir, "token", token + "\n");
  auto log = dir.file("serve.log");
  auto out = dir.file("serve.out");
  std::string cmd = std::string{COHORT_BINARY} +
                    " serve --listen 127.0.0.1:0 --token-file " + tok +
                    " --audit " + dir.file("audit.log") + " --pipeline " +
                    COHORT_SOURCE_DIR + "/examples/pipelines/demo.textproto" +
                    " > " + out + " 2>&1 & echo $!";
  FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  int pid = 0;
  REQUIRE(std::fscanf(p, "%d", &pid) == 1);
  ::pclose(p);
  auto read_out = [&] {
    std::ifstream in{out};
    return std::string{std::istreambuf_iterator<char>{in}, {}};
  };
  int port = 0;
  for (int i = 0; i < 300 && port == 0; ++i) {
    auto text = read_out();
    auto at = text.find("http://127.0.0.1:");
    if (at != std::string::npos)
      port = std::atoi(text.c_str() + at + 17);
    else
      std::this_thread::sleep_for(20ms);
  }
  REQUIRE(port > 0);
  auto url = " --url http://127.0.0.1:" + std::to_string(port);
  auto devices = test::cohort_cli("admin" + url + " devices");
  CHECK(devices.status == 0);
  CHECK(has(devices.output, "\"name\": \"sim0\""));
  auto drain =
      test::cohort_cli("admin" + url + " --token-file " + tok + " drain sim2");
  CHECK(drain.status == 0);
  auto refused = test::cohort_cli("admin" + url + " drain sim2");
  CHECK(refused.status == 1);
  CHECK(has(refused.output, "unauthorized"));
  auto quota = test::cohort_cli("admin" + url + " --token-file " + tok +
                                " quota analytics --max-inflight 8 "
                                "--memory-quota 512M");
  CHECK(quota.status == 0);
  CHECK(has(quota.output, "\"memory_quota_bytes\": \"536870912\""));
  auto bad =
      test::cohort_cli("admin" + url + " quota analytics --max-inflight x");
  CHECK(bad.status == 2);
  // Let the workload run a little, then stop the node.
  std::this_thread::sleep_for(500ms);
  REQUIRE(::kill(pid, SIGTERM) == 0);
  std::string text;
  for (int i = 0; i < 1500; ++i) {
    text = read_out();
    if (has(text, "cohort serve: stopped"))
      break;
    std::this_thread::sleep_for(20ms);
  }
  CHECK(has(text, "stopping (Terminated)"));
  INFO(text);
  REQUIRE(has(text, "cohort serve: stopped"));
  CHECK(has(text, "audit log"));
  CHECK(has(text, ": verified,"));
  // Every admitted item ended: the counts agree.
  auto at = text.find("stopped; ");
  unsigned long long admitted = 0, ended = 0;
  REQUIRE(std::sscanf(text.c_str() + at,
                      "stopped; %llu items admitted, %llu ended", &admitted,
                      &ended) == 2);
  CHECK(admitted > 0);
  CHECK(admitted == ended);
  auto unreachable = test::cohort_cli(
      "admin --url http://127.0.0.1:" + std::to_string(port) + " stats");
  CHECK(unreachable.status == 1);
}

TEST_CASE("a second SIGTERM during the stop does not cut it short",
          "[tools][serve]") {
  // GNU timeout sends SIGTERM twice (to the program, then to its group);
  // a signal the kernel handed a thread that OpenBLAS started before main
  // used to kill the node without its summary (exit 143).
  test::temp_dir dir;
  auto out = dir.file("serve.out");
  std::string cmd = "exec " + std::string{COHORT_BINARY} +
                    " serve --listen 127.0.0.1:0 --audit " +
                    dir.file("audit.log") + " --pipeline " + COHORT_SOURCE_DIR +
                    "/examples/pipelines/demo.textproto > " + out + " 2>&1";
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), nullptr);
    ::_exit(127);
  }
  for (int i = 0; i < 500 && !has(test::slurp(out), "pipeline run 1:"); ++i)
    std::this_thread::sleep_for(20ms);
  // The first starts the stop; the others land while it runs.
  for (int i = 0; i < 6; ++i) {
    REQUIRE(::kill(pid, SIGTERM) == 0);
    std::this_thread::sleep_for(10ms);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  auto text = test::slurp(out);
  INFO(text);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(has(text, "stopping (Terminated)"));
  CHECK(has(text, "already stopping (Terminated again)"));
  CHECK(has(text, "cohort serve: stopped;"));
  CHECK(has(text, ": verified,"));
}

TEST_CASE("cohort serve refuses bad options", "[tools][serve]") {
  auto r = test::cohort_cli("serve --listen nowhere");
  CHECK(r.status == 2);
  CHECK(has(r.output, "HOST:PORT"));
  r = test::cohort_cli("serve --listen 127.0.0.1:99999");
  CHECK(r.status == 2);
  r = test::cohort_cli("serve --token-file /nonexistent/token");
  CHECK(r.status == 2);
  r = test::cohort_cli("serve --bogus 1");
  CHECK(r.status == 2);
}

TEST_CASE_METHOD(served,
                 "the shipped dashboard and alert rules use only metrics the "
                 "node exports",
                 "[tools][serve]") {
  start(test::make_config(dir, 1, {{"sim0", 1}}));
  auto m = get("/metrics");
  REQUIRE(m);
  REQUIRE(m->status == 200);
  auto exported = [&](std::string name) {
    if (has(m->body, "# TYPE " + name + " "))
      return true;
    // Histogram series carry suffixes.
    for (std::string suffix : {"_bucket", "_sum", "_count"})
      if (name.size() > suffix.size() &&
          name.compare(name.size() - suffix.size(), suffix.size(), suffix) ==
              0 &&
          has(m->body, "# TYPE " + name.substr(0, name.size() - suffix.size()) +
                           " histogram"))
        return true;
    return false;
  };
  for (auto file : {"docs/grafana/cohort.json", "docs/alerts/cohort-rules.yml",
                    "docs/runbooks.md", "docs/metrics.md"}) {
    std::ifstream in{std::string{COHORT_SOURCE_DIR} + "/" + file};
    REQUIRE(in);
    std::string text{std::istreambuf_iterator<char>{in}, {}};
    std::regex name{R"(\b(DCGM_FI_[A-Z_]+|cohort_[a-z_]+)\b)"};
    size_t seen = 0;
    for (auto i = std::sregex_iterator{text.begin(), text.end(), name};
         i != std::sregex_iterator{}; ++i) {
      auto n = (*i)[1].str();
      auto end = size_t(i->position(1) + i->length(1));
      // Names of things that are not metrics, and prefixes in patterns
      // (`cohort_device_(losses|restarts)_total`, `cohort_tenant_fallback*`).
      if (n == "cohort_tests" || n == "cohort_simulated" || n.back() == '_' ||
          (end < text.size() && (text[end] == '*' || text[end] == '(')))
        continue;
      INFO(file << " names " << n);
      CHECK(exported(n));
      ++seen;
    }
    CHECK(seen > 0);
  }
}

TEST_CASE("cohort serve's stop summary counts this run only",
          "[tools][serve]") {
  test::temp_dir dir;
  auto log = dir.file("node.log");
  {
    // An earlier node's log ends with an item it never finished (it
    // crashed): this run must not be blamed for it.
    auto earlier = audit::audit_log::open(log, 8);
    REQUIRE(earlier);
    REQUIRE_FALSE((*earlier)->append(
        {audit_kind::admitted, "t", 7, "", "axpy", "before the crash", 0}));
    REQUIRE_FALSE((*earlier)->flush(true));
  }
  auto res = test::cohort_cli("serve --listen 127.0.0.1:0 --audit " + log +
                              " --for 0.3");
  INFO(res.output);
  CHECK(res.status == 0);
  CHECK(has(res.output, "0 items admitted, 0 ended in this run"));
  CHECK(has(res.output, ": verified,"));
}

TEST_CASE_METHOD(served, "the admin API and cohort objects list the objects",
                 "[tools][serve][objects]") {
  start(test::make_config(dir, 1, {{"sim0", 1}, {"sim1", 1}}));
  std::vector<float> x(1024, 1.0f);
  auto obj = rt->put_object("t", host_buffer{x}, "sim1");
  REQUIRE(obj);
  auto all = get("/v1/objects");
  REQUIRE(all);
  CHECK(all->status == 200);
  CHECK(has(all->body, "\"id\": \"" + std::to_string(obj->id) + "\""));
  CHECK(has(all->body, "\"tenant\": \"t\""));
  CHECK(has(all->body, "\"dtype\": \"f32\""));
  CHECK(has(all->body, "\"bytes\": \"4096\""));
  CHECK(has(all->body, "\"sim1\""));
  CHECK(has(all->body, "\"host_copy\": true"));
  CHECK(has(all->body, "\"handles\": 1"));
  auto mine = get("/v1/tenants/t/objects");
  REQUIRE(mine);
  CHECK(mine->status == 200);
  CHECK(has(mine->body, "\"sim1\""));
  auto nobody = get("/v1/tenants/nobody/objects");
  REQUIRE(nobody);
  CHECK(nobody->status == 404);
  auto url = " --url http://127.0.0.1:" + std::to_string(port);
  auto table = test::cohort_cli("objects" + url);
  CHECK(table.status == 0);
  INFO(table.output);
  CHECK(has(table.output, "TENANT"));
  CHECK(has(table.output, "4.0 KiB"));
  CHECK(has(table.output, "sim1"));
  CHECK(has(table.output, "1 object: 4.0 KiB in device memory"));
  auto json = test::cohort_cli("objects --json --tenant t" + url);
  CHECK(json.status == 0);
  CHECK(has(json.output, "\"objects\""));
  auto unknown = test::cohort_cli("objects --tenant nobody" + url);
  CHECK(unknown.status == 1);
  auto m = get("/metrics");
  REQUIRE(m);
  CHECK(has(m->body, "cohort_objects{tenant=\"t\"} 1"));
  CHECK(has(m->body, "cohort_object_bytes{tenant=\"t\",device=\"sim1\"} 4096"));
  CHECK(has(m->body, "cohort_object_bytes{tenant=\"t\",device=\"host\"} 4096"));
  CHECK(has(m->body, "cohort_objects_made_total 1"));
  CHECK(has(m->body, "cohort_object_copies_stored_total 1"));
  CHECK(has(m->body, "cohort_objects_lost_total 0"));
  rt->release_object(obj->id);
  for (int i = 0; i < 400; ++i) {
    auto l = rt->objects();
    REQUIRE(l);
    if (l->empty())
      break;
    std::this_thread::sleep_for(5ms);
  }
  auto empty = get("/v1/objects");
  REQUIRE(empty);
  CHECK(has(empty->body, "\"objects\": []"));
}

TEST_CASE_METHOD(served, "shared objects show their attachments everywhere",
                 "[tools][serve][objects][share]") {
  auto cfg = test::make_config(dir, 1, {{"sim0", 1}});
  auto sock = dir.file("share.sock");
  cfg.set_share_socket(sock);
  start(cfg);
  CHECK(rt->share_socket() == sock);
  std::vector<float> x(1024, 1.0f);
  auto obj = rt->put_object("t", host_buffer{x}, "sim0");
  REQUIRE(obj);
  auto token = rt->export_object("t", obj->id, share_grant{});
  REQUIRE(token);
  CHECK_FALSE(rt->export_object("u", obj->id, share_grant{}));
  auto a = cohort::client::attachment::attach(sock, *token);
  CHECK(a.view<float>()[1023] == 1.0f);
  CHECK_THROWS_AS(cohort::client::attachment::attach(sock, "nope"),
                  cohort::error);
  auto all = get("/v1/objects");
  REQUIRE(all);
  CHECK(has(all->body, "\"attached\": 1"));
  CHECK(has(all->body, "\"exports\": 1"));
  auto url = " --url http://127.0.0.1:" + std::to_string(port);
  auto table = test::cohort_cli("objects" + url);
  INFO(table.output);
  CHECK(has(table.output, "ATTACHED"));
  auto m = get("/metrics");
  REQUIRE(m);
  CHECK(has(m->body, "cohort_object_attachments 1"));
  CHECK(has(m->body, "cohort_object_exports_total 1"));
  CHECK(has(m->body, "cohort_object_attaches_total 1"));
  CHECK(has(m->body, "cohort_object_attaches_refused_total 1"));
  CHECK(has(m->body, "cohort_object_attachments_reclaimed_total 0"));
  a.detach();
  bool detached = false;
  for (int i = 0; i < 400 && !detached; ++i) {
    auto s = rt->placement_stats();
    REQUIRE(s);
    detached = s->objects.detaches == 1 && s->objects.attached_now == 0;
    if (!detached)
      std::this_thread::sleep_for(5ms);
  }
  CHECK(detached);
  CHECK(rt->unexport_object("t", *token) == caf::none);
  CHECK(rt->unexport_object("t", *token) != caf::none);
}

TEST_CASE_METHOD(served,
                 "the admin API and cohort jobs list, describe and cancel "
                 "items",
                 "[tools][serve][jobs]") {
  // Tenant t may use sim1 only, which an operator took offline: its items
  // wait (queued) for as long as the test looks.
  auto cfg = test::make_config(dir, 0, {{"sim0", 1}, {"sim1", 1}});
  cfg.mutable_tenant(0)->clear_devices();
  cfg.mutable_tenant(0)->add_devices("sim1");
  cfg.mutable_tenant(0)->set_queue_timeout_ms(120000);
  start(cfg);
  REQUIRE_FALSE(rt->set_offline("sim1"));
  std::vector<actors::work_future> futures;
  for (uint64_t id = 1; id <= 3; ++id)
    futures.push_back(rt->submit(test::gemv_item(id)));
  auto url = " --url http://127.0.0.1:" + std::to_string(port);
  auto all = get("/v1/items");
  REQUIRE(all);
  CHECK(all->status == 200);
  INFO(all->body);
  CHECK(has(all->body, "\"job\": \"1\""));
  CHECK(has(all->body, "\"kernel\": \"gemv\""));
  CHECK(has(all->body, "\"tenant\": \"t\""));
  CHECK(has(all->body, "\"client\": \"" + std::to_string(rt->client()) + "\""));
  auto mine = get("/v1/tenants/t/items");
  REQUIRE(mine);
  CHECK(mine->status == 200);
  CHECK(has(mine->body, "\"job\": \"3\""));
  CHECK(get("/v1/tenants/nobody/items")->status == 404);
  auto one = get("/v1/items/2");
  REQUIRE(one);
  CHECK(one->status == 200);
  CHECK(has(one->body, "\"id\": \"2\""));
  CHECK(has(one->body, "\"state\": \"queued\""));
  CHECK(get("/v1/items/99999")->status == 404);
  CHECK(get("/v1/items/0")->status == 400);
  CHECK(get("/v1/items/x1")->status == 400);
  // The table and one item from the command line.
  auto table = test::cohort_cli("jobs list" + url);
  INFO(table.output);
  CHECK(table.status == 0);
  CHECK(has(table.output, "STATE"));
  CHECK(has(table.output, "3 live items: 3 queued"));
  CHECK(has(table.output, "no device of its grant takes work now"));
  auto described = test::cohort_cli("jobs describe 3" + url);
  INFO(described.output);
  CHECK(described.status == 0);
  CHECK(has(described.output, "kernel     gemv"));
  CHECK(has(described.output, "state      queued"));
  CHECK(test::cohort_cli("jobs describe 99999" + url).status == 1);
  CHECK(test::cohort_cli("jobs describe nine" + url).status == 2);
  // Cancels need the token.
  CHECK(post("/v1/items/1/cancel", "", "")->status == 401);
  CHECK(test::cohort_cli("jobs cancel 1" + url).status == 1);
  auto c1 = post("/v1/items/1/cancel", "");
  REQUIRE(c1);
  CHECK(c1->status == 200);
  CHECK(has(c1->body, "\"cancelled\": \"1\""));
  auto first_end = futures[0].get();
  REQUIRE_FALSE(first_end);
  CHECK(code_of(first_end.error()) == errc::cancelled);
  // Again: it ended already.
  auto again = post("/v1/items/1/cancel", "");
  REQUIRE(again);
  CHECK(again->status == 200);
  CHECK(has(again->body, "\"cancelled\": \"0\""));
  CHECK(post("/v1/items/99999/cancel", "")->status == 404);
  CHECK(post("/v1/tenants/nobody/cancel", "")->status == 404);
  CHECK(post("/v1/clients/0/cancel", "")->status == 400);
  // The rest, from the command line by tenant; the token from its file.
  auto tok = dir.file("token");
  std::ofstream{tok} << token << "\n";
  CHECK(test::cohort_cli("jobs cancel" + url).status == 2);
  CHECK(test::cohort_cli("jobs cancel 2 --tenant t" + url).status == 2);
  auto cancelled =
      test::cohort_cli("jobs cancel --tenant t --token-file " + tok + url);
  INFO(cancelled.output);
  CHECK(cancelled.status == 0);
  CHECK(has(cancelled.output, "cancel tenant t: 2 cancelled"));
  for (size_t i = 1; i < futures.size(); ++i) {
    auto end = futures[i].get();
    REQUIRE_FALSE(end);
    CHECK(code_of(end.error()) == errc::cancelled);
  }
  // By client: nothing of this runtime's is left.
  auto none =
      post("/v1/clients/" + std::to_string(rt->client()) + "/cancel", "");
  REQUIRE(none);
  CHECK(has(none->body, "\"cancelled\": \"0\""));
  auto ended = get("/v1/items/1");
  REQUIRE(ended);
  CHECK(has(ended->body, "\"state\": \"cancelled\""));
  CHECK(has(ended->body, "cancelled by the admin API (127.0.0.1:"));
  // Every cancel call is an ADMIN record, the refused ones too; each item
  // cancelled a CANCEL record.
  REQUIRE(rt->flush_audit());
  size_t admin = 0, cancels = 0;
  for (auto& rec : test::read_audit(dir.file("audit.log"))) {
    if (rec.kind() == pb::ADMIN && has(rec.detail(), ": cancel "))
      ++admin;
    if (rec.kind() == pb::CANCEL)
      ++cancels;
  }
  CHECK(admin == 6);
  CHECK(cancels == 3);
}

TEST_CASE_METHOD(served,
                 "cohort watch shows a node's items, devices, tenants and "
                 "alerts, with rates from one look to the next",
                 "[tools][serve][watch]") {
  auto cfg = test::make_config(dir, 0, {{"sim0", 1}, {"sim1", 1}});
  start(cfg);
  // sim1 is offline, by an operator: its status says so.
  REQUIRE_FALSE(rt->set_offline("sim1"));
  for (uint64_t id = 1; id <= 20; ++id)
    REQUIRE(rt->submit(test::gemv_item(id)).get());
  auto url = " --url http://127.0.0.1:" + std::to_string(port);
  auto once = test::cohort_cli("watch --once" + url);
  INFO(once.output);
  CHECK(once.status == 0);
  CHECK(has(once.output, "cohort watch  http://127.0.0.1:"));
  CHECK(has(once.output, "items: 20 admitted, 20 completed, 0 failed"));
  CHECK(has(once.output, "DEVICE"));
  CHECK(has(once.output, "sim0"));
  CHECK(has(once.output, "offline"));
  CHECK(has(once.output, "TENANT"));
  CHECK(has(once.output, "ALERTS"));
  // No terminal codes when the output is not a terminal.
  CHECK_FALSE(has(once.output, "\x1b["));
  // Two frames: the second has rates.
  auto twice =
      test::cohort_cli("watch --count 2 --interval 0.2 --no-clear" + url);
  INFO(twice.output);
  CHECK(twice.status == 0);
  CHECK(has(twice.output, "(+0.0/s)"));
  // A node that is not there: the frame says so, and the status is 1.
  auto gone = test::cohort_cli("watch --once --url http://127.0.0.1:1");
  INFO(gone.output);
  CHECK(gone.status == 1);
  CHECK(has(gone.output, "cannot reach http://127.0.0.1:1"));
  CHECK(test::cohort_cli("watch --interval 0" + url).status == 2);
  CHECK(test::cohort_cli("watch --count -1" + url).status == 2);
}

TEST_CASE_METHOD(served,
                 "GET /v1/devices/NAME/health and cohort health show a "
                 "device's counters over time and its Xids",
                 "[tools][serve][health]") {
  auto cfg = test::make_config(dir, 1, {{"sim0", 1}});
  cfg.mutable_supervision()->set_telemetry_interval_ms(20);
  start(cfg);
  rt->sim_device("sim0")->raise_xid(13);
  rt->sim_device("sim0")->heat(30);
  // The sampler keeps a sample every 20 ms.
  for (int i = 0; i < 200; ++i) {
    auto h = rt->device_health("sim0");
    REQUIRE(h);
    if (h->samples.size() >= 5)
      break;
    std::this_thread::sleep_for(10ms);
  }
  auto g = get("/v1/devices/sim0/health");
  REQUIRE(g);
  INFO(g->body);
  CHECK(g->status == 200);
  CHECK(has(g->body, "\"source\": \"simulated\""));
  CHECK(has(g->body, "\"temperature_c\": 65"));
  CHECK(has(g->body, "\"interval_ms\": 20"));
  CHECK(has(g->body, "\"xid\": 13"));
  CHECK(has(g->body, "\"circuit\": \"closed\""));
  CHECK(get("/v1/devices/nothing/health")->status == 404);
  // A CPU worker has none, and says so.
  auto cpu = get("/v1/devices/cpu0/health");
  REQUIRE(cpu);
  CHECK(cpu->status == 200);
  CHECK(has(cpu->body, "has no health counters"));
  auto url = " --url http://127.0.0.1:" + std::to_string(port);
  auto report = test::cohort_cli("health sim0 --samples 3" + url);
  INFO(report.output);
  CHECK(report.status == 0);
  CHECK(has(report.output, "device      sim0 (sim, simulated)"));
  CHECK(has(report.output, "counters    simulated, every 20 ms"));
  CHECK(has(report.output, "latest      65 C, 60.0 W of 300.0 W, 0% busy ("));
  CHECK(has(report.output, "Xids        1, the last 13"));
  // Samples taken before the heat read 35 C.
  CHECK(has(report.output, " to 65 C"));
  CHECK(has(report.output, "TIME"));
  auto json = test::cohort_cli("health sim0 --json" + url);
  CHECK(json.status == 0);
  CHECK(has(json.output, "\"samples\": ["));
  CHECK(test::cohort_cli("health nothing" + url).status == 1);
  CHECK(test::cohort_cli("health a/b" + url).status == 2);
  CHECK(test::cohort_cli("health sim0 --samples 601" + url).status == 2);
  CHECK(test::cohort_cli("health" + url).status == 2);
}

TEST_CASE_METHOD(served,
                 "the admin API and cohort trace record a node's timeline, "
                 "audited, one trace at a time",
                 "[tools][serve][trace]") {
  auto cfg = test::make_config(dir, 0, {{"sim0", 1}});
  start(cfg);
  auto url = " --url http://127.0.0.1:" + std::to_string(port);
  // No trace yet: nothing to look at or stop.
  CHECK(get("/v1/trace")->status == 409);
  // Starting needs the token; a bad body or bound is refused.
  CHECK(post("/v1/trace/start", "{}", "")->status == 401);
  CHECK(post("/v1/trace/start", "{\"max\": 3}")->status == 400);
  CHECK(post("/v1/trace/start", "{\"max_events\": 4000001}")->status == 422);
  auto started = post("/v1/trace/start", "{\"max_events\": 5000}");
  REQUIRE(started);
  CHECK(started->status == 200);
  CHECK(has(started->body, "at most 5000 events"));
  CHECK(post("/v1/trace/start", "{}")->status == 409);
  for (uint64_t id = 1; id <= 5; ++id)
    REQUIRE(rt->submit(test::gemv_item(id)).get());
  // A look leaves it recording.
  auto look = get("/v1/trace");
  REQUIRE(look);
  CHECK(look->status == 200);
  auto doc = test::parse_json(look->body);
  auto& other = test::field(doc, "otherData").struct_value();
  CHECK(test::field(other, "recording").bool_value());
  CHECK(test::number_of(other, "max_events") == 5000);
  size_t launches = 0;
  for (auto& e : test::trace_events(doc))
    launches +=
        test::text_of(e, "ph") == "X" && test::text_of(e, "name") == "gemv";
  CHECK(launches == 5);
  CHECK(post("/v1/trace/stop", "", "")->status == 401);
  auto stopped = post("/v1/trace/stop", "");
  REQUIRE(stopped);
  CHECK(stopped->status == 200);
  auto last = test::parse_json(stopped->body);
  CHECK_FALSE(
      test::field(test::field(last, "otherData").struct_value(), "recording")
          .bool_value());
  CHECK(post("/v1/trace/stop", "")->status == 409);
  auto audit = test::audit_text(*rt);
  CHECK(has(audit, "start a trace of at most 5000 events"));
  CHECK(has(audit, "stop the trace: "));

  // The command: record for a moment and write the file.
  auto tok = test::write(dir, "token", token + "\n");
  auto file = dir.file("node.json");
  auto cmd = test::cohort_cli("trace --seconds 0.2 -o " + file +
                              " --token-file " + tok + url);
  INFO(cmd.output);
  CHECK(cmd.status == 0);
  CHECK(has(cmd.output, "trace written to " + file));
  std::ifstream in{file};
  test::parse_json({std::istreambuf_iterator<char>{in}, {}});
  // Nothing to stop now; a wrong token; no file left behind for either.
  auto none = test::cohort_cli("trace --stop -o " + dir.file("none.json") +
                               " --token-file " + tok + url);
  CHECK(none.status == 1);
  CHECK(has(none.output, "HTTP 409"));
  CHECK_FALSE(std::filesystem::exists(dir.file("none.json")));
  auto wrong = test::write(dir, "wrong", "not-the-token\n");
  auto refused =
      test::cohort_cli("trace --seconds 0.1 -o " + dir.file("w.json") +
                       " --token-file " + wrong + url);
  CHECK(refused.status == 1);
  CHECK_FALSE(std::filesystem::exists(dir.file("w.json")));
  CHECK(test::cohort_cli("trace --seconds 0 -o x.json" + url).status == 2);
  CHECK(test::cohort_cli("trace --seconds 1" + url).status == 2);
}
