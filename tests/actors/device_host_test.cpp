// Devices in host processes (docs/device-hosts.md): work runs in the host;
// a host killed under load is a device loss whose items end exactly once
// and whose device comes back in a new process; stopping the runtime ends
// its hosts; a gate refuses a wrong token; what cannot run hosts is refused
// with a clear error. Real GPUs (the fake CUDA plugin's) in host
// processes: tests/actors/gpu_hosts_test.cpp.
#include <catch2/catch.hpp>

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <iterator>
#include <set>
#include <thread>

#include <caf/io/all.hpp>
#include <caf/openssl/all.hpp>
#include <google/protobuf/text_format.h>

#include "actors/device_host.hpp"
#include "kernels/random_data.hpp"
#include "kernels/registry.hpp"
#include "messages/network.hpp"
#include "tests/remote_fixture.hpp"
#include "tests/runtime_fixture.hpp"
#include "tests/tls_fixture.hpp"
#include "tests/tools/cli_fixture.hpp"

using namespace cohort;
using namespace cohort::actors;
using namespace std::chrono_literals;

namespace {

using test::audit_text;
using test::gemv_items;
using test::wait_status;

// Cohort's actor system config with CAF's middleman loaded.
struct network_config : system_config {
  network_config() { load_network(*this); }
};

struct host_fixture {
  network_config cfg;
  caf::actor_system sys{cfg};
  test::temp_dir dir;
};

// sim0 in this process, sim1 in a host process; each launch takes 2 ms, so
// that a batch keeps both busy for a while.
pb::RuntimeConfig hosted_config(const test::temp_dir& dir) {
  auto cfg = test::make_config(dir, 0, {{"sim0", 1}, {"sim1", 1}});
  for (auto& g : *cfg.mutable_devices()->mutable_sim_gpu())
    g.set_launch_latency_us(2000);
  cfg.mutable_devices()->mutable_sim_gpu(1)->set_host_process(true);
  cfg.mutable_devices()->set_host_binary(COHORT_BINARY);
  return cfg;
}

// The audit log's device events, one per line (for a failure's message).
std::string device_events(runtime& rt) {
  REQUIRE(rt.flush_audit());
  std::string out;
  for (auto& rec : test::read_audit(rt.audit_path()))
    if (rec.kind() == pb::DEVICE_EVENT)
      out += rec.device() + ": " + rec.detail() + "\n";
  return out;
}

// Waits (up to 15 s) until device `name` runs in a host process other than
// `old`, and is available there; returns its pid then (0: it did not).
int wait_new_host(runtime& rt, const std::string& name, size_t index, int old) {
  for (int i = 0; i < 1500; ++i) {
    auto pid = rt.host_pid(name);
    auto s = rt.placement_stats();
    REQUIRE(s);
    if (pid > 0 && pid != old &&
        s->devices[index].status == device_status::available)
      return pid;
    std::this_thread::sleep_for(10ms);
  }
  return 0;
}

// Waits (up to 5 s) until process `pid` is stopped (state T in
// /proc/PID/stat): SIGSTOP takes effect after kill returns.
bool stopped(int pid) {
  for (int i = 0; i < 500; ++i) {
    std::ifstream in{"/proc/" + std::to_string(pid) + "/stat"};
    std::string stat{std::istreambuf_iterator<char>{in}, {}};
    auto close = stat.rfind(')');
    if (close != std::string::npos && close + 2 < stat.size() &&
        (stat[close + 2] == 'T' || stat[close + 2] == 't'))
      return true;
    std::this_thread::sleep_for(10ms);
  }
  return false;
}

// True once no process has `pid` (it was ended and reaped).
bool gone(int pid) {
  return ::kill(pid, 0) != 0 && errno == ESRCH;
}

// Runs `cohort device-host` with `input` on its standard input; returns its
// exit status.
int device_host_status(const std::string& input) {
  auto path =
      std::string{"/tmp/cohort-host-input-"} + std::to_string(::getpid());
  {
    std::ofstream out{path, std::ios::binary};
    out << input;
  }
  auto cmd = std::string{COHORT_BINARY} + " device-host < " + path +
             " > /dev/null 2>&1";
  auto rc = std::system(cmd.c_str());
  ::unlink(path.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

// An actor system config with the middleman and CAF's TLS module set up
// from `net`.
struct tls_config : system_config {
  explicit tls_config(const network_settings& net) { load_network(*this, net); }
};

using test::reap;
using test::start_remote_host;
using test::write_text;

} // namespace

TEST_CASE("a remote device host serves its devices over mutual TLS to nodes "
          "with the fleet's token",
          "[actors][host][remote]") {
  test::tls_files tls;
  if (!tls.ok) {
    WARN("SKIPPED remote device host: the openssl command could not make "
         "test certificates");
    return;
  }
  test::temp_dir dir;
  auto host_cfg = test::make_config(dir, 0, {{"r0", 1}, {"r1", 1}});
  *host_cfg.mutable_network() = tls.network("host");
  auto path = dir.file("host.textproto");
  write_text(path, host_cfg);
  auto h = start_remote_host({"--listen", "127.0.0.1:0", "--config", path});
  // Ended however the test ends.
  test::host_guard guard{h.pid};
  INFO(h.line);
  auto at = h.line.find("on 127.0.0.1:");
  REQUIRE(at != std::string::npos);
  CHECK_THAT(h.line, Catch::Contains("serving 2 devices (r0, r1)") &&
                         Catch::EndsWith("with TLS"));
  auto port = uint16_t(std::stoul(h.line.substr(at + 13)));
  std::string token = "fleet-token-0123456789abcdef";
  {
    pb::RuntimeConfig node_cfg;
    *node_cfg.mutable_network() = tls.network("node");
    auto net = compile_network(node_cfg);
    REQUIRE(net);
    tls_config cfg{*net};
    caf::actor_system sys{cfg};
    auto gate =
        caf::openssl::remote_actor<host_gate_actor>(sys, "127.0.0.1", port);
    REQUIRE(gate);
    caf::scoped_actor self{sys};
    self->request(*gate, 5s, list_atom::value, token)
        .receive(
            [](std::vector<device_info>& l) {
              REQUIRE(l.size() == 2);
              CHECK(l[0].name == "r0");
              CHECK(l[1].name == "r1");
              CHECK(l[1].simulated);
            },
            [](caf::error& err) { FAIL(describe(err)); });
    self->request(*gate, 5s, list_atom::value, std::string{"guess"})
        .receive(
            [](std::vector<device_info>&) { FAIL("listed"); },
            [](caf::error& err) { CHECK(code_of(err) == errc::not_granted); });
    auto hello = [&] {
      host_hello hi;
      hi.device = 1;
      caf::actor out;
      self->request(*gate, 5s, hello_atom::value, token, hi,
                    caf::actor_cast<caf::actor>(self),
                    caf::actor_cast<caf::actor>(self))
          .receive([&](caf::actor& a) { out = std::move(a); },
                   [](caf::error& err) { FAIL(describe(err)); });
      return out;
    };
    auto first = hello();
    REQUIRE(first);
    // A hello that names another device than the one at its index is
    // refused.
    {
      host_hello hi;
      hi.device = 1;
      hi.name = "r0";
      self->request(*gate, 5s, hello_atom::value, token, hi,
                    caf::actor_cast<caf::actor>(self),
                    caf::actor_cast<caf::actor>(self))
          .receive([](caf::actor&) { FAIL("greeted"); },
                   [](caf::error& err) {
                     CHECK(code_of(err) == errc::unknown_device);
                     CHECK_THAT(describe(err),
                                Catch::Contains("is 'r1', not 'r0'"));
                   });
    }
    self->request(caf::actor_cast<device_actor>(first), 5s, info_atom::value)
        .receive([](device_info& info) { CHECK(info.name == "r1"); },
                 [](caf::error& err) { FAIL(describe(err)); });
    // A node that rejoins greets the device again: its earlier actor ends,
    // and a new one runs the device.
    auto again = hello();
    REQUIRE(again);
    CHECK(again != first);
    self->request(caf::actor_cast<device_actor>(again), 5s, info_atom::value)
        .receive([](device_info& info) { CHECK(info.name == "r1"); },
                 [](caf::error& err) { FAIL(describe(err)); });
  }
  {
    // A side whose certificate another CA signed is refused in the
    // handshake.
    network_settings stranger;
    stranger.certificate = tls.file("stranger.pem");
    stranger.key = tls.file("stranger.key");
    stranger.cafile = tls.file("ca2.pem");
    tls_config cfg{stranger};
    caf::actor_system sys{cfg};
    auto gate =
        caf::openssl::remote_actor<host_gate_actor>(sys, "127.0.0.1", port);
    CHECK_FALSE(gate);
  }
  REQUIRE(::kill(h.pid, SIGTERM) == 0);
  CHECK(reap(std::exchange(guard.pid, 0)) == 0);
}

TEST_CASE("cohort device-host --listen refuses what it cannot serve",
          "[actors][host][remote]") {
  test::temp_dir dir;
  auto cfg = test::make_config(dir, 0, {{"r0", 1}});
  auto path = dir.file("plain.textproto");
  write_text(path, cfg);
  auto status = [](const std::string& args) {
    auto cmd = std::string{COHORT_BINARY} + " device-host " + args +
               " > /dev/null 2>&1";
    auto rc = std::system(cmd.c_str());
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  };
  // No TLS and no token in the config.
  CHECK(status("--listen 127.0.0.1:0 --config " + path) == 2);
  CHECK(status("--listen 127.0.0.1:0") == 2);
  CHECK(status("--listen nowhere --config " + path) == 2);
  CHECK(status("--listen 127.0.0.1:0 --config /nonexistent") == 2);
}

TEST_CASE_METHOD(host_fixture,
                 "a device in a host process runs work and comes back after "
                 "its process is killed under load",
                 "[actors][host]") {
  auto rt = runtime::start(sys, hosted_config(dir));
  REQUIRE(rt);
  auto& r = **rt;
  REQUIRE(wait_status(r, 1, device_status::available) ==
          device_status::available);
  auto first = r.host_pid("sim1");
  REQUIRE(first > 0);
  CHECK(first != ::getpid());
  CHECK(r.host_pid("sim0") == 0);
  // Killed while both devices work through 300 items: each ends once, on
  // sim0 or on sim1 before the kill, with the right values.
  auto items = gemv_items(300);
  auto e = test::submit_all(sys, r, items, [&] {
    std::this_thread::sleep_for(30ms);
    REQUIRE(::kill(first, SIGKILL) == 0);
  });
  test::check_exactly_once(items, e);
  CHECK(e.errors.empty());
  std::set<std::string> used;
  for (auto& [id, res] : e.results)
    used.insert(res.device);
  CHECK(used.count("sim1") == 1);
  auto stats = r.placement_stats();
  REQUIRE(stats);
  CHECK(stats->devices[1].losses >= 1);
  CHECK(stats->retries > 0);
  // A new process runs the device again.
  auto second = wait_new_host(r, "sim1", 1, first);
  CHECK(second > 0);
  CHECK(gone(first));
  REQUIRE_FALSE(r.set_offline("sim0"));
  auto more = gemv_items(20, 1000);
  auto e2 = test::submit_all(sys, r, more, [] {});
  test::check_exactly_once(more, e2);
  CHECK(e2.errors.empty());
  for (auto& [id, res] : e2.results)
    CHECK(res.device == "sim1");
  auto log = audit_text(r);
  INFO(device_events(r));
  CHECK(log.find("its host process " + std::to_string(first) +
                 " killed by signal 9") != std::string::npos);
  // Its first start came up, or (a machine so loaded that the connection
  // went silent for 2 s while it started) failed and was retried.
  CHECK((log.find("started in a host process") != std::string::npos ||
         log.find("its host process did not start") != std::string::npos));
  // Its restart likewise: the first new process, or (its start timed out
  // the same way) a later one within the restart budget.
  CHECK(log.find("new host process, restart ") != std::string::npos);
  // Stopping the runtime ends its host.
  r.stop();
  CHECK(gone(second));
}

TEST_CASE_METHOD(host_fixture,
                 "a host stopped under load (SIGSTOP, a hang) is a device "
                 "loss found by the heartbeat",
                 "[actors][host]") {
  auto rt = runtime::start(sys, hosted_config(dir));
  REQUIRE(rt);
  auto& r = **rt;
  REQUIRE(wait_status(r, 1, device_status::available) ==
          device_status::available);
  auto first = r.host_pid("sim1");
  REQUIRE(first > 0);
  auto items = gemv_items(300);
  auto stopped_at = std::chrono::steady_clock::now();
  auto e = test::submit_all(sys, r, items, [&] {
    std::this_thread::sleep_for(30ms);
    stopped_at = std::chrono::steady_clock::now();
    REQUIRE(::kill(first, SIGSTOP) == 0);
  });
  test::check_exactly_once(items, e);
  CHECK(e.errors.empty());
  auto second = wait_new_host(r, "sim1", 1, first);
  CHECK(second > 0);
  CHECK(gone(first));
  // Found by the missing heartbeats after the 2 s connection timeout (the
  // stopped host cannot run its kernel watchdog), within a bound a loaded
  // machine keeps.
  auto stats = r.placement_stats();
  REQUIRE(stats);
  CHECK(stats->devices[1].losses == 1);
  CHECK(std::chrono::steady_clock::now() - stopped_at < 15s);
  CHECK_THAT(audit_text(r),
             Catch::Contains("its host process " + std::to_string(first) +
                             " was still running and was ended by its node"));
}

TEST_CASE_METHOD(host_fixture,
                 "reading an object from a host that hangs ends: the object "
                 "is made again in the new host",
                 "[actors][host]") {
  // One device, in a host process; what it keeps has no host copy.
  auto cfg = test::make_config(dir, 0, {{"sim0", 1}});
  cfg.mutable_devices()->mutable_sim_gpu(0)->set_host_process(true);
  cfg.mutable_devices()->set_host_binary(COHORT_BINARY);
  auto rt = runtime::start(sys, cfg);
  REQUIRE(rt);
  auto& r = **rt;
  REQUIRE(wait_status(r, 0, device_status::available) ==
          device_status::available);
  auto first = r.host_pid("sim0");
  REQUIRE(first > 0);
  std::vector<float> x(4096, 1.5f);
  work_item keep;
  keep.id = 1;
  keep.tenant = "t";
  keep.kernel = kernel_id::axpy;
  keep.args.alpha = 2.0f;
  keep.inputs = {host_buffer{x}, host_buffer{x}};
  keep.keep_on_device = true;
  auto kept = r.run(keep);
  REQUIRE(kept);
  auto id = kept->object.id;
  REQUIRE(kept->object.devices == std::vector<std::string>{"sim0"});
  auto before = r.get_object("t", id);
  REQUIRE(before);
  REQUIRE(before->size() == x.size());
  // The host hangs; the read asked of it never gets an answer from it. It
  // ends when the device is lost (the heartbeat's 2 s), once the item that
  // made the object ran again in the new host.
  REQUIRE(::kill(first, SIGSTOP) == 0);
  REQUIRE(stopped(first));
  auto after = r.get_object("t", id);
  INFO(device_events(r));
  REQUIRE(after);
  REQUIRE(after->size() == before->size());
  auto a = after->span();
  auto b = before->span();
  REQUIRE(b.size() == x.size());
  CHECK(b[0] == Approx(4.5f));
  CHECK(std::equal(a.begin(), a.end(), b.begin()));
  auto second = r.host_pid("sim0");
  CHECK(second > 0);
  CHECK(second != first);
  CHECK_THAT(audit_text(r),
             Catch::Contains("made again on sim0 by re-running"));
  r.stop();
  CHECK(gone(first));
}

TEST_CASE_METHOD(host_fixture,
                 "faults reach a simulated device in a host process; a sticky "
                 "error there ends with a new process",
                 "[actors][host]") {
  auto rt = runtime::start(sys, hosted_config(dir));
  REQUIRE(rt);
  auto& r = **rt;
  REQUIRE(wait_status(r, 1, device_status::available) ==
          device_status::available);
  CHECK(r.devices()[1].host_process);
  CHECK_FALSE(r.devices()[0].host_process);
  auto first = r.host_pid("sim1");
  REQUIRE(first > 0);
  sim_fault f;
  // What the device does not take is refused by the host, in words.
  f.kind = pb::SLOW_DOWN;
  f.factor = 0;
  auto bad = r.inject_sim_fault("sim1", f);
  CHECK(code_of(bad) == errc::invalid_fault);
  CHECK_THAT(describe(bad), Catch::Contains("factor must be positive"));
  f.kind = pb::KILL_HOST;
  CHECK(code_of(r.inject_sim_fault("sim1", f)) == errc::invalid_fault);
  f.kind = pb::LOSE;
  CHECK(code_of(r.inject_sim_fault("sim9", f)) == errc::unknown_device);
  // The same call reaches a device in this process.
  f.kind = pb::SLOW_DOWN;
  f.factor = 1;
  CHECK_FALSE(r.inject_sim_fault("sim0", f));
  CHECK(r.sim_device("sim0") != nullptr);
  CHECK(r.sim_device("sim1") == nullptr);
  // A sticky error poisons the host's context: the device is lost, and a
  // new process is its reset.
  f.kind = pb::STICKY_ERROR;
  REQUIRE_FALSE(r.inject_sim_fault("sim1", f));
  auto second = wait_new_host(r, "sim1", 1, first);
  INFO(device_events(r));
  REQUIRE(second > 0);
  CHECK(gone(first));
  auto stats = r.placement_stats();
  REQUIRE(stats);
  CHECK(stats->devices[1].losses == 1);
  CHECK_THAT(audit_text(r), Catch::Contains("the context is poisoned"));
  // The new process runs work.
  REQUIRE_FALSE(r.set_offline("sim0"));
  auto items = gemv_items(10);
  auto e = test::submit_all(sys, r, items, [] {});
  test::check_exactly_once(items, e);
  CHECK(e.errors.empty());
  for (auto& [id, res] : e.results)
    CHECK(res.device == "sim1");
}

TEST_CASE_METHOD(host_fixture,
                 "a device lost permanently in a host process stays lost, as "
                 "in the node's process",
                 "[actors][host]") {
  auto cfg = hosted_config(dir);
  cfg.mutable_devices()->set_cpu_workers(1);
  auto rt = runtime::start(sys, cfg);
  REQUIRE(rt);
  auto& r = **rt;
  auto index_of = [&](const std::string& name) {
    auto devs = r.devices();
    for (size_t k = 0; k < devs.size(); ++k)
      if (devs[k].name == name)
        return k;
    FAIL("no device " << name);
    return size_t{0};
  };
  auto s0 = index_of("sim0");
  auto s1 = index_of("sim1");
  REQUIRE(wait_status(r, s1, device_status::available) ==
          device_status::available);
  auto first = r.host_pid("sim1");
  REQUIRE(first > 0);
  sim_fault f;
  f.kind = pb::LOSE_PERMANENTLY;
  REQUIRE_FALSE(r.inject_sim_fault("sim0", f));
  REQUIRE_FALSE(r.inject_sim_fault("sim1", f));
  // Work finds both losses and ends exactly once (on the CPU worker once
  // both are offline), and both devices end offline.
  auto items = gemv_items(40);
  auto e = test::submit_all(sys, r, items, [] {});
  test::check_exactly_once(items, e);
  INFO(device_events(r));
  CHECK(wait_status(r, s0, device_status::offline) == device_status::offline);
  // It used to come back in a new host process (3 of 3).
  CHECK(wait_status(r, s1, device_status::offline) == device_status::offline);
  std::this_thread::sleep_for(300ms);
  auto stats = r.placement_stats();
  REQUIRE(stats);
  CHECK(stats->devices[s1].status == device_status::offline);
  CHECK(stats->devices[s1].restarts == stats->devices[s0].restarts);
  CHECK(r.host_pid("sim1") == 0);
  CHECK(gone(first));
  CHECK_THAT(device_events(r),
             Catch::Contains("sim1: supervisor: ") &&
                 Catch::Contains("the device is gone (lost permanently)"));
}

TEST_CASE_METHOD(host_fixture,
                 "a host's gate lists its device and greets only its node, "
                 "once",
                 "[actors][host]") {
  pb::HostSpec spec;
  auto* g = spec.mutable_sim_gpu();
  g->set_name("simh");
  g->set_memory_mib(64);
  g->set_streams(1);
  g->set_speed(1);
  spec.set_token("right-token");
  auto p = start_host(COHORT_BINARY, spec, 10s);
  REQUIRE(p);
  CHECK(p->port > 0);
  auto gate =
      sys.middleman().remote_actor<host_gate_actor>("127.0.0.1", p->port);
  REQUIRE(gate);
  caf::scoped_actor self{sys};
  auto hello = [&](const std::string& token, uint32_t device = 0) {
    caf::expected<caf::actor> out{caf::error{}};
    host_hello h;
    h.device = device;
    self->request(*gate, 5s, hello_atom::value, token, h,
                  caf::actor_cast<caf::actor>(self),
                  caf::actor_cast<caf::actor>(self))
        .receive([&](caf::actor& dev) { out = std::move(dev); },
                 [&](caf::error& err) { out = std::move(err); });
    return out;
  };
  auto fault = [&](const std::string& token) {
    caf::error out;
    sim_fault f;
    f.kind = pb::SLOW_DOWN;
    f.factor = 2;
    self->request(*gate, 5s, fault_atom::value, token, uint32_t{0}, f)
        .receive([](bool) {}, [&](caf::error& err) { out = std::move(err); });
    return out;
  };
  // No fault before the node greeted the gate.
  CHECK(code_of(fault("right-token")) == errc::not_granted);
  auto list = [&](const std::string& token) {
    caf::expected<std::vector<device_info>> out{caf::error{}};
    self->request(*gate, 5s, list_atom::value, token)
        .receive([&](std::vector<device_info>& l) { out = std::move(l); },
                 [&](caf::error& err) { out = std::move(err); });
    return out;
  };
  auto listed = list("right-token");
  REQUIRE(listed);
  REQUIRE(listed->size() == 1);
  CHECK((*listed)[0].name == "simh");
  CHECK(code_of(list("wrong-token").error()) == errc::not_granted);
  auto wrong = hello("wrong-token");
  REQUIRE_FALSE(wrong);
  CHECK(code_of(wrong.error()) == errc::not_granted);
  auto beyond = hello("right-token", 1);
  REQUIRE_FALSE(beyond);
  CHECK(code_of(beyond.error()) == errc::unknown_device);
  auto right = hello("right-token");
  REQUIRE(right);
  CHECK(*right);
  // The device actor answers across the process boundary.
  self->request(caf::actor_cast<device_actor>(*right), 5s, info_atom::value)
      .receive([](device_info& info) { CHECK(info.name == "simh"); },
               [](caf::error& err) { FAIL(describe(err)); });
  CHECK(code_of(fault("wrong-token")) == errc::not_granted);
  CHECK_FALSE(fault("right-token"));
  auto again = hello("right-token");
  REQUIRE_FALSE(again);
  CHECK(code_of(again.error()) == errc::invalid_transition);
  auto pid = p->pid;
  CHECK(end_host(*p) == "was still running and was ended by its node");
  CHECK(gone(pid));
  // The middleman takes the gate's proxy down as the connection closes
  // (before the actor system ends, which then has no traffic in flight).
  self->monitor(*gate);
  bool down = false;
  self->receive([&](const caf::down_msg&) { down = true; },
                caf::after(5s) >> [] {});
  CHECK(down);
}

TEST_CASE_METHOD(host_fixture,
                 "placement weighs the measured crossing to a device in a "
                 "host process",
                 "[actors][host][placement]") {
  // sim0 in a host process, sim1 in this one, alike otherwise: with both
  // idle, only the crossing tells them apart (a tie would go to sim0).
  auto cfg = test::make_config(dir, 0, {{"sim0", 1}, {"sim1", 1}});
  for (auto& g : *cfg.mutable_devices()->mutable_sim_gpu())
    g.set_launch_latency_us(2000);
  cfg.mutable_devices()->mutable_sim_gpu(0)->set_host_process(true);
  cfg.mutable_devices()->set_host_binary(COHORT_BINARY);
  auto rt = runtime::start(sys, cfg);
  REQUIRE(rt);
  auto& r = **rt;
  REQUIRE(wait_status(r, 0, device_status::available) ==
          device_status::available);
  // One at a time, each item finishes first in this process once sim0's
  // crossing is known: sim0 runs only what measures it (exploring runs).
  std::map<std::string, int> ran;
  auto began = std::chrono::steady_clock::now();
  for (uint64_t id = 1; id <= 40; ++id) {
    std::vector<work_item> one{test::gemv_item(id)};
    auto e = test::submit_all(sys, r, one, [] {});
    test::check_exactly_once(one, e);
    REQUIRE(e.results.size() == 1);
    ++ran[e.results.begin()->second.device];
  }
  auto took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - began)
          .count();
  INFO("sim0 ran " << ran["sim0"] << ", sim1 " << ran["sim1"] << " in " << took
                   << " s");
  // Its first item measures it; a crossing counts for 1 s, then one more
  // item measures it again (a slow machine takes seconds for the 40).
  CHECK(ran["sim0"] >= 1);
  CHECK(ran["sim0"] <= 2 + int(took));
  auto stats = r.placement_stats();
  REQUIRE(stats);
  CHECK(stats->devices[0].crossing_ns > 0);
  CHECK(stats->devices[1].crossing_ns == 0);
  // Many at once: sim1's backlog soon outweighs the crossing, and sim0
  // takes its share.
  auto items = gemv_items(100, 1000);
  auto e = test::submit_all(sys, r, items, [] {});
  test::check_exactly_once(items, e);
  CHECK(e.errors.empty());
  int on_host = 0;
  for (auto& [id, res] : e.results)
    on_host += res.device == "sim0";
  CHECK(on_host >= 10);
}

TEST_CASE_METHOD(host_fixture,
                 "a kernel registered in the node runs on its own devices, "
                 "not on simulated GPUs in host processes",
                 "[actors][host]") {
  // Doubles each element. Registered once per test process.
  static const auto doubled = [] {
    kernels::kernel_def d;
    d.name = "test.host_doubled";
    d.signature.inputs = {{"x", kernels::dtype::f32}};
    d.signature.output = {"y", kernels::dtype::f32};
    d.output_elements = [](const kernels::kernel_args&,
                           kernels::input_lengths in) { return in[0]; };
    d.cost = [](const kernels::kernel_args&, kernels::input_lengths in) {
      return kernels::kernel_cost{double(in[0]), 0};
    };
    d.cpu = [](const kernels::kernel_args&, kernels::typed_inputs in) {
      kernels::kernel_output out;
      auto x = in[0].as<float>();
      out.resize(kernels::dtype::f32, x.size());
      auto y = out.as<float>();
      for (size_t i = 0; i < x.size(); ++i)
        y[i] = 2 * x[i];
      return out;
    };
    std::string why;
    auto id = kernels::register_kernel(std::move(d), why);
    REQUIRE(id);
    return *id;
  }();
  auto item = [&](uint64_t id) {
    work_item w;
    w.id = id;
    w.tenant = "t";
    w.kernel = doubled;
    w.inputs.emplace_back(kernels::random_floats(id, 256));
    return w;
  };
  // sim0 in a host process, sim1 here: every item runs on sim1.
  auto cfg = test::make_config(dir, 0, {{"sim0", 1}, {"sim1", 1}});
  cfg.mutable_devices()->mutable_sim_gpu(0)->set_host_process(true);
  cfg.mutable_devices()->set_host_binary(COHORT_BINARY);
  {
    auto rt = runtime::start(sys, cfg);
    REQUIRE(rt);
    REQUIRE(wait_status(**rt, 0, device_status::available) ==
            device_status::available);
    std::vector<work_item> items;
    for (uint64_t id = 1; id <= 30; ++id)
      items.push_back(item(id));
    auto e = test::submit_all(sys, **rt, items, [] {});
    test::check_exactly_once(items, e);
    CHECK(e.errors.empty());
    for (auto& [id, res] : e.results) {
      CHECK(res.device == "sim1");
      auto x = kernels::random_floats(id, 256);
      auto y = res.output.as<float>();
      REQUIRE(y.size() == 256);
      CHECK(y[7] == 2 * x[7]);
    }
  }
  // Only a device in a host process: the item is refused, saying why.
  cfg.mutable_devices()->mutable_sim_gpu()->DeleteSubrange(1, 1);
  auto rt = runtime::start(sys, cfg);
  REQUIRE(rt);
  std::vector<work_item> one{item(100)};
  auto e = test::submit_all(sys, **rt, one, [] {});
  test::check_exactly_once(one, e);
  REQUIRE(e.errors.size() == 1);
  auto& err = e.errors.begin()->second;
  CHECK(code_of(err) == errc::no_device_available);
  CHECK_THAT(describe(err),
             Catch::Contains("not on remote hosts or simulated GPUs in host "
                             "processes"));
}

TEST_CASE_METHOD(host_fixture, "what cannot run device hosts is refused",
                 "[actors][host]") {
  SECTION("a host binary that is not there") {
    auto cfg = hosted_config(dir);
    cfg.mutable_devices()->set_host_binary("/nonexistent/cohort");
    auto rt = runtime::start(sys, cfg);
    REQUIRE_FALSE(rt);
    CHECK(code_of(rt.error()) == errc::malformed_config);
    CHECK_THAT(describe(rt.error()),
               Catch::Contains("devices.host_binary: cannot run"));
  }
  SECTION("an actor system without the middleman") {
    system_config plain;
    caf::actor_system local{plain};
    auto rt = runtime::start(local, hosted_config(dir));
    REQUIRE_FALSE(rt);
    CHECK(code_of(rt.error()) == errc::malformed_config);
    CHECK_THAT(describe(rt.error()), Catch::Contains("middleman"));
  }
  SECTION("a program that exits at once: the device is given up") {
    auto cfg = hosted_config(dir);
    cfg.mutable_devices()->set_host_binary("/bin/false");
    auto rt = runtime::start(sys, cfg);
    REQUIRE(rt);
    CHECK(wait_status(**rt, 1, device_status::offline) ==
          device_status::offline);
    // The other device takes the work.
    auto items = gemv_items(10);
    auto e = test::submit_all(sys, **rt, items, [] {});
    test::check_exactly_once(items, e);
    CHECK(e.errors.empty());
    auto log = audit_text(**rt);
    CHECK(log.find("its host process did not start") != std::string::npos);
    CHECK(log.find("restart limit") != std::string::npos);
  }
}

TEST_CASE("cohort device-host refuses input that is not a host spec",
          "[actors][host]") {
  CHECK(device_host_status("") == 2);
  CHECK(device_host_status(std::string{"\x05\0\0\0hello", 9}) == 2);
  // A length far beyond any spec.
  CHECK(device_host_status(std::string{"\xff\xff\xff\x7f", 4}) == 2);
  // A spec without a token.
  pb::HostSpec spec;
  spec.mutable_sim_gpu()->set_name("x");
  auto bytes = spec.SerializeAsString();
  std::string framed{char(bytes.size()), 0, 0, 0};
  CHECK(device_host_status(framed + bytes) == 2);
  // A spec whose device is invalid (no memory, no streams).
  spec.set_token("t");
  bytes = spec.SerializeAsString();
  framed = std::string{char(bytes.size()), 0, 0, 0};
  CHECK(device_host_status(framed + bytes) == 2);
}

TEST_CASE_METHOD(host_fixture,
                 "the node's Xid policy reaches a device in a host process",
                 "[actors][host][xid]") {
  auto cfg = hosted_config(dir);
  auto* rule = cfg.mutable_supervision()->add_xid();
  rule->add_codes(13);
  rule->set_action(pb::XID_ISOLATE);
  auto rt = runtime::start(sys, cfg);
  REQUIRE(rt);
  auto& r = **rt;
  REQUIRE(wait_status(r, 1, device_status::available) ==
          device_status::available);
  auto first = r.host_pid("sim1");
  REQUIRE(first > 0);
  // The host's device isolates on Xid 13 as the node's rule says: its
  // process ends, and no new one starts.
  sim_fault f;
  f.kind = pb::RAISE_XID;
  f.xid = 13;
  REQUIRE_FALSE(r.inject_sim_fault("sim1", f));
  CHECK(wait_status(r, 1, device_status::offline) == device_status::offline);
  INFO(device_events(r));
  CHECK_THAT(audit_text(r), Catch::Contains("isolated by the Xid policy"));
  for (int i = 0; i < 500 && !gone(first); ++i)
    std::this_thread::sleep_for(10ms);
  CHECK(gone(first));
  auto stats = r.placement_stats();
  REQUIRE(stats);
  CHECK(stats->devices[1].restarts == 0);
  // An operator brings it back in a new process, which has the policy
  // too; a code without a rule keeps its default (31: degrade).
  REQUIRE_FALSE(r.set_online("sim1"));
  auto second = wait_new_host(r, "sim1", 1, first);
  REQUIRE(second > 0);
  f.xid = 31;
  REQUIRE_FALSE(r.inject_sim_fault("sim1", f));
  CHECK(wait_status(r, 1, device_status::degraded) == device_status::degraded);
  CHECK(r.host_pid("sim1") == second);
  f.xid = 13;
  REQUIRE_FALSE(r.inject_sim_fault("sim1", f));
  CHECK(wait_status(r, 1, device_status::offline) == device_status::offline);
}
