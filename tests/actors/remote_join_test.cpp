// Nodes that join remote device hosts (docs/device-hosts.md, "Nodes on other
// machines"), all on the loopback interface: a two-node fleet places work on
// both machines; a connection cut under load is a loss of the remote
// devices whose items end exactly once, and the node rejoins when the
// network is back; a host that refuses the node's token or certificate, or
// cannot be reached, is refused at start with an error that names it.
#include <catch2/catch.hpp>

#include <set>
#include <thread>

#include "actors/device_host.hpp"
#include "chaos/fault_injector.hpp"
#include "messages/network.hpp"
#include "tests/remote_fixture.hpp"
#include "tests/runtime_fixture.hpp"
#include "tests/tls_fixture.hpp"
#include "tests/tools/cli_fixture.hpp"
#include "tools/admin_api.hpp"
#include "tools/metrics.hpp"

using namespace cohort;
using namespace cohort::actors;
using namespace std::chrono_literals;

namespace {

using test::gemv_items;
using test::wait_status;

// A remote host serving `names` (simulated GPUs, each launch 2 ms) with
// the host's certificate; its pid and port.
test::remote_host serve(const test::tls_files& tls, const test::temp_dir& dir,
                        std::vector<std::pair<std::string, double>> names) {
  auto cfg = test::make_config(dir, 0, std::move(names));
  for (auto& g : *cfg.mutable_devices()->mutable_sim_gpu())
    g.set_launch_latency_us(2000);
  cfg.set_audit_path(dir.file("host-audit.log"));
  *cfg.mutable_network() = tls.network("host");
  auto path = dir.file("host.textproto");
  test::write_text(path, cfg);
  auto h =
      test::start_remote_host({"--listen", "127.0.0.1:0", "--config", path});
  INFO(h.line);
  REQUIRE(h.port() > 0);
  return h;
}

// A node with sim0 in its own process that joins `port` with the node's
// certificate.
pb::RuntimeConfig node_config(const test::tls_files& tls,
                              const test::temp_dir& dir, uint16_t port) {
  auto cfg = test::make_config(dir, 0, {{"sim0", 1}});
  cfg.mutable_devices()->mutable_sim_gpu(0)->set_launch_latency_us(2000);
  *cfg.mutable_network() = tls.network("node");
  cfg.mutable_network()->add_join("127.0.0.1:" + std::to_string(port));
  cfg.mutable_network()->set_connect_timeout_ms(3000);
  return cfg;
}

// Cohort's actor system, with CAF's TLS module set up from `cfg`.
struct node {
  system_config cfg;
  caf::actor_system sys;
  explicit node(const pb::RuntimeConfig& c) : cfg(c), sys(cfg) {}
};

// Waits (up to `limit`) until device `index` lost its connection `n` times.
bool wait_losses(runtime& rt, size_t index, uint32_t n,
                 std::chrono::milliseconds limit = 10s) {
  auto until = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < until) {
    auto s = rt.placement_stats();
    REQUIRE(s);
    if (s->devices[index].losses >= n)
      return true;
    std::this_thread::sleep_for(10ms);
  }
  return false;
}

// Runs 10 items, which must all end with their result on `device` (the
// only one that takes work now).
void check_all_on(node& n, runtime& rt, const std::string& device) {
  auto items = gemv_items(10, 1000);
  auto e = test::submit_all(n.sys, rt, items, [] {});
  test::check_exactly_once(items, e);
  CHECK(e.errors.empty());
  for (auto& [id, res] : e.results)
    CHECK(res.device == device);
}

#define SKIP_WITHOUT_CERTIFICATES(tls)                                         \
  if (!(tls).ok) {                                                             \
    WARN("SKIPPED: the openssl command could not make test certificates");     \
    return;                                                                    \
  }

} // namespace

TEST_CASE("a node joins a remote device host and places work on both "
          "machines",
          "[actors][host][remote]") {
  test::tls_files tls;
  SKIP_WITHOUT_CERTIFICATES(tls)
  test::temp_dir dir;
  auto h = serve(tls, dir, {{"r0", 1}, {"r1", 1}});
  test::host_guard guard{h.pid};
  auto where = "127.0.0.1:" + std::to_string(h.port());
  auto cfg = node_config(tls, dir, h.port());
  node n{cfg};
  auto rt = runtime::start(n.sys, cfg);
  REQUIRE(rt);
  auto& r = **rt;
  // The remote devices come after the node's own, and say where they are.
  REQUIRE(r.devices().size() == 3);
  CHECK(r.devices()[0].remote.empty());
  CHECK(r.devices()[1].name == "r0");
  CHECK(r.devices()[1].remote == where);
  CHECK(r.devices()[2].name == "r1");
  CHECK(r.devices()[2].remote == where);
  CHECK_FALSE(r.devices()[2].host_process);
  CHECK(r.devices()[2].simulated);
  for (size_t i : {1, 2})
    REQUIRE(wait_status(r, i, device_status::available, 10s) ==
            device_status::available);
  CHECK(r.host_pid("r0") == 0);
  // Work lands on both machines, each item once, with the right values.
  auto items = gemv_items(300);
  auto e = test::submit_all(n.sys, r, items, [] {});
  test::check_exactly_once(items, e);
  CHECK(e.errors.empty());
  std::set<std::string> used;
  for (auto& [id, res] : e.results)
    used.insert(res.device);
  CHECK(used.count("sim0") == 1);
  CHECK((used.count("r0") + used.count("r1")) >= 1);
  // Operators see where each device lives: /v1/devices, and a `node` label
  // on the remote devices' series (none on this machine's).
  tools::metrics_exporter metrics{r};
  tools::admin_api api{r, "", metrics};
  auto devices = api.handle("GET", "/v1/devices", "", "");
  CHECK(devices.status == 200);
  CHECK_THAT(devices.body,
             Catch::Contains("\"location\": \"remote host\"") &&
                 Catch::Contains("\"remote\": \"" + where + "\"") &&
                 Catch::Contains("\"location\": \"node\""));
  auto scrape = metrics.scrape();
  REQUIRE(scrape);
  CHECK_THAT(*scrape,
             Catch::Contains("cohort_device_up{device=\"r0\",node=\"" + where +
                             "\"} 1") &&
                 Catch::Contains("cohort_device_up{device=\"sim0\"} 1"));
  // The crossing to the remote devices was measured from their items (none
  // for the node's own device), and operators see it.
  auto stats = r.placement_stats();
  REQUIRE(stats);
  CHECK(stats->devices[0].crossing_ns == 0);
  for (size_t i : {1, 2}) {
    if (stats->devices[i].completed == 0)
      continue;
    auto name = r.devices()[i].name;
    INFO(name);
    CHECK(stats->devices[i].crossing_ns > 0);
    CHECK_THAT(*scrape, Catch::Contains("cohort_device_crossing_seconds{"
                                        "device=\"" +
                                        name + "\",node=\"" + where + "\"}"));
  }
  CHECK_THAT(devices.body, Catch::Contains("\"crossing_seconds\": "));
  CHECK_THAT(*scrape, !Catch::Contains("cohort_device_crossing_seconds{"
                                       "device=\"sim0\""));
  // A fault reaches the remote device by its index there: r1 is lost, and
  // the node greets it again, which resets it on its host.
  sim_fault f;
  f.kind = pb::SLOW_DOWN;
  f.factor = 0;
  CHECK(code_of(r.inject_sim_fault("r1", f)) == errc::invalid_fault);
  f.kind = pb::LOSE;
  REQUIRE_FALSE(r.inject_sim_fault("r1", f));
  REQUIRE(wait_losses(r, 2, 1));
  REQUIRE(wait_status(r, 2, device_status::available, 10s) ==
          device_status::available);
  auto audit = test::audit_text(r);
  CHECK_THAT(audit, Catch::Contains("joined on its remote host " + where));
  CHECK_THAT(audit, Catch::Contains("rejoined its remote host " + where +
                                    ", restart 1 of"));
  // r1 runs work again.
  REQUIRE_FALSE(r.set_offline("sim0"));
  REQUIRE_FALSE(r.set_offline("r0"));
  check_all_on(n, r, "r1");
  r.stop();
  // The host serves on after its node stopped.
  CHECK(::kill(h.pid, 0) == 0);
}

TEST_CASE("a node's connection to a remote host cut under load is a loss of "
          "its devices, and the node rejoins when it is back",
          "[actors][host][remote]") {
  test::tls_files tls;
  SKIP_WITHOUT_CERTIFICATES(tls)
  test::temp_dir dir;
  auto h = serve(tls, dir, {{"r0", 1}});
  test::host_guard guard{h.pid};
  test::tcp_forwarder net{h.port()};
  auto cfg = node_config(tls, dir, net.port());
  node n{cfg};
  auto rt = runtime::start(n.sys, cfg);
  REQUIRE(rt);
  auto& r = **rt;
  REQUIRE(wait_status(r, 1, device_status::available, 10s) ==
          device_status::available);
  // Cut while both devices work through 300 items: each ends once, on sim0
  // or on r0 before the cut, with the right values.
  auto items = gemv_items(300);
  auto e = test::submit_all(n.sys, r, items, [&] {
    std::this_thread::sleep_for(30ms);
    net.cut();
  });
  test::check_exactly_once(items, e);
  CHECK(e.errors.empty());
  REQUIRE(wait_losses(r, 1, 1));
  // While the network is down, the node tries again and r0 stays away.
  CHECK(wait_status(r, 1, device_status::available, 500ms) !=
        device_status::available);
  auto tries = net.forwarded();
  // Back: the node rejoins without a restart of its own, and r0 runs work.
  net.restore();
  REQUIRE(wait_status(r, 1, device_status::available, 15s) ==
          device_status::available);
  CHECK(net.forwarded() > tries);
  auto audit = test::audit_text(r);
  CHECK_THAT(audit, Catch::Contains("dropped"));
  CHECK_THAT(audit, Catch::Contains("rejoined its remote host"));
  CHECK_THAT(audit, Catch::Contains("restart not counted"));
  REQUIRE_FALSE(r.set_offline("sim0"));
  check_all_on(n, r, "r0");
}

TEST_CASE("the chaos harness cuts a node's connection to a remote host and "
          "holds the network down; the node rejoins after the hold",
          "[actors][host][remote]") {
  test::tls_files tls;
  SKIP_WITHOUT_CERTIFICATES(tls)
  test::temp_dir dir;
  auto h = serve(tls, dir, {{"r0", 1}, {"r1", 1}});
  test::host_guard guard{h.pid};
  auto cfg = node_config(tls, dir, h.port());
  node n{cfg};
  auto rt = runtime::start(n.sys, cfg);
  REQUIRE(rt);
  auto& r = **rt;
  for (size_t i : {1, 2})
    REQUIRE(wait_status(r, i, device_status::available, 10s) ==
            device_status::available);
  // What has no connection to cut is refused.
  CHECK(code_of(r.cut_connection("sim0")) == errc::invalid_fault);
  CHECK(code_of(r.cut_connection("nowhere")) == errc::unknown_device);
  chaos::fault f;
  f.kind = pb::CUT_CONNECTION;
  f.device = "sim0";
  CHECK(code_of(chaos::inject(r, f)) == errc::invalid_fault);
  f.kind = pb::KILL_HOST;
  f.device = "r0";
  CHECK(code_of(chaos::inject(r, f)) == errc::invalid_fault);
  // Cut under load, with the network held down for 800 ms: both devices
  // of the host are lost, every item ends once (on sim0 or on the host
  // before the cut), and neither comes back before the hold ends.
  f.kind = pb::CUT_CONNECTION;
  f.hold = 800ms;
  auto cut_at = std::chrono::steady_clock::now();
  auto items = gemv_items(300);
  auto e = test::submit_all(n.sys, r, items, [&] {
    std::this_thread::sleep_for(30ms);
    cut_at = std::chrono::steady_clock::now();
    REQUIRE_FALSE(chaos::inject(r, f));
  });
  test::check_exactly_once(items, e);
  CHECK(e.errors.empty());
  REQUIRE(wait_losses(r, 1, 1));
  REQUIRE(wait_losses(r, 2, 1));
  for (size_t i : {1, 2})
    REQUIRE(wait_status(r, i, device_status::available, 15s) ==
            device_status::available);
  CHECK(std::chrono::steady_clock::now() - cut_at >= 800ms);
  // The hold kept both devices of the host away (they share its
  // connection), and neither rejoin counted as a restart.
  REQUIRE(r.flush_audit());
  for (auto name : {"r0", "r1"}) {
    INFO(name);
    bool held = false, rejoined = false;
    for (auto& rec : test::read_audit(r.audit_path())) {
      if (rec.kind() != pb::DEVICE_EVENT || rec.device() != name)
        continue;
      held |= rec.detail().find("held cut by the chaos harness") !=
              std::string::npos;
      rejoined |=
          rec.detail().find("rejoined its remote host") != std::string::npos &&
          rec.detail().find("restart not counted") != std::string::npos;
    }
    CHECK(held);
    CHECK(rejoined);
  }
  REQUIRE_FALSE(r.set_offline("sim0"));
  REQUIRE_FALSE(r.set_offline("r1"));
  check_all_on(n, r, "r0");
}

TEST_CASE("a node is refused at start by a remote host it cannot join, with "
          "an error that names the host",
          "[actors][host][remote]") {
  test::tls_files tls;
  SKIP_WITHOUT_CERTIFICATES(tls)
  test::temp_dir dir;
  auto h = serve(tls, dir, {{"r0", 1}});
  test::host_guard guard{h.pid};
  auto where = "127.0.0.1:" + std::to_string(h.port());
  auto refused = [&](const pb::RuntimeConfig& cfg) {
    node n{cfg};
    auto rt = runtime::start(n.sys, cfg);
    REQUIRE_FALSE(rt);
    return rt.error();
  };
  SECTION("another token") {
    auto cfg = node_config(tls, dir, h.port());
    auto token = dir.file("other-token");
    std::ofstream{token} << "another-token-0123456789\n";
    cfg.mutable_network()->set_token_file(token);
    auto err = refused(cfg);
    CHECK(code_of(err) == errc::not_granted);
    CHECK_THAT(describe(err), Catch::Contains("cannot join the remote device "
                                              "host " +
                                              where));
  }
  SECTION("a certificate another CA signed") {
    auto cfg = node_config(tls, dir, h.port());
    auto* net = cfg.mutable_network();
    net->set_certificate(tls.file("stranger.pem"));
    net->set_key(tls.file("stranger.key"));
    net->set_cafile(tls.file("ca2.pem"));
    auto err = refused(cfg);
    CHECK(code_of(err) == errc::device_lost);
    CHECK_THAT(describe(err), Catch::Contains(where) &&
                                  Catch::Contains("TLS handshake failed"));
  }
  SECTION("nothing listens there") {
    // A port that was free a moment ago.
    uint16_t port = 0;
    {
      test::tcp_forwarder probe{1};
      port = probe.port();
    }
    auto cfg = node_config(tls, dir, port);
    auto err = refused(cfg);
    CHECK(code_of(err) == errc::device_lost);
    CHECK_THAT(describe(err),
               Catch::Contains("127.0.0.1:" + std::to_string(port)));
  }
  SECTION("a device name the node has already") {
    auto cfg = node_config(tls, dir, h.port());
    cfg.mutable_devices()->mutable_sim_gpu(0)->set_name("r0");
    auto err = refused(cfg);
    CHECK(code_of(err) == errc::malformed_config);
    CHECK_THAT(describe(err), Catch::Contains("named 'r0'"));
  }
  SECTION("an actor system without CAF's TLS module") {
    auto cfg = node_config(tls, dir, h.port());
    system_config plain;
    load_network(plain);
    caf::actor_system sys{plain};
    auto rt = runtime::start(sys, cfg);
    REQUIRE_FALSE(rt);
    CHECK(code_of(rt.error()) == errc::malformed_config);
    CHECK_THAT(describe(rt.error()), Catch::Contains("TLS module"));
  }
  // The host serves on.
  CHECK(::kill(h.pid, 0) == 0);
}

TEST_CASE("cohort serve --join adds a remote host's devices to the node",
          "[actors][host][remote]") {
  // Without TLS and the fleet's token there is nothing to join with.
  auto r = test::cohort_cli("serve --join 127.0.0.1:9471");
  CHECK(r.status == 2);
  CHECK_THAT(r.output, Catch::Contains("TLS"));
  r = test::cohort_cli("serve --join 127.0.0.1:9471,");
  CHECK(r.status == 2);
  CHECK_THAT(r.output, Catch::Contains("HOST:PORT"));
  test::tls_files tls;
  SKIP_WITHOUT_CERTIFICATES(tls)
  test::temp_dir dir;
  auto h = serve(tls, dir, {{"r0", 1}});
  test::host_guard guard{h.pid};
  auto where = "127.0.0.1:" + std::to_string(h.port());
  // The config joins nothing; --join names the host.
  auto cfg = node_config(tls, dir, h.port());
  cfg.mutable_network()->clear_join();
  auto path = dir.file("node.textproto");
  test::write_text(path, cfg);
  r = test::cohort_cli("serve --config " + path +
                       " --listen 127.0.0.1:0 --for 1 --join " + where);
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK_THAT(r.output, Catch::Contains("on the remote host " + where));
  CHECK_THAT(r.output, Catch::Contains("stopped"));
}

TEST_CASE("a cut connection to a host process is a loss, and a new process "
          "replaces it",
          "[actors][host]") {
  test::temp_dir dir;
  auto cfg = test::make_config(dir, 0, {{"sim0", 1}, {"sim1", 1}});
  cfg.mutable_devices()->mutable_sim_gpu(1)->set_host_process(true);
  cfg.mutable_devices()->set_host_binary(COHORT_BINARY);
  node n{cfg};
  auto rt = runtime::start(n.sys, cfg);
  REQUIRE(rt);
  auto& r = **rt;
  REQUIRE(wait_status(r, 1, device_status::available, 10s) ==
          device_status::available);
  auto first = r.host_pid("sim1");
  REQUIRE(first > 0);
  REQUIRE_FALSE(r.cut_connection("sim1"));
  REQUIRE(wait_losses(r, 1, 1));
  int second = 0;
  for (int i = 0; i < 1000 && second == 0; ++i) {
    auto pid = r.host_pid("sim1");
    if (pid > 0 && pid != first &&
        r.placement_stats()->devices[1].status == device_status::available)
      second = pid;
    std::this_thread::sleep_for(10ms);
  }
  INFO(test::audit_text(r));
  REQUIRE(second > 0);
  REQUIRE_FALSE(r.cut_connection("sim1"));
  REQUIRE(wait_losses(r, 1, 2));
}
