// Devices in host processes (docs/device-hosts.md): work runs in the host;
// a host killed under load is a device loss whose items end exactly once
// and whose device comes back in a new process; stopping the runtime ends
// its hosts; a gate refuses a wrong token; what cannot run hosts is refused
// with a clear error.
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
#include "tests/devices/fake_gpu.hpp"
#include "tests/kernels/bundle/bundle_fixture.hpp"
#include "tests/remote_fixture.hpp"
#include "tests/runtime_fixture.hpp"
#include "tests/tls_fixture.hpp"
#include "tests/tools/cli_fixture.hpp"
#include "tools/npy.hpp"

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

namespace {

// A pipeline of `batches` gemv items over the fake CUDA plugin's two GPUs,
// each in the place `devices` says (a DeviceSet's text), and `cpu_workers`
// CPU workers, with the audit log in `dir`.
std::string gpu_pipeline(const test::temp_dir& dir, int batches,
                         const std::string& devices, int cpu_workers = 0) {
  auto path = dir.file("gpus.textproto");
  std::ofstream{path} << "name: \"gpus\" tenant: \"t\" batches: " << batches
                      << " seed: 3 window: 8\n"
                         "stage { name: \"g\" kernel: GEMV args { m: 64 n: "
                         "64 } }\n"
                         "runtime {\n  devices { cpu_workers: "
                      << cpu_workers
                      << " gpu_streams: 2 "
                         "host_binary: \""
                      << COHORT_BINARY << "\" " << devices
                      << " }\n"
                         "  tenant { tenant: \"t\" kernels: \"*\" devices: "
                         "\"*\" }\n"
                         "  audit_path: \""
                      << dir.file("audit.log") << "\"\n  max_attempts: 8\n}\n";
  return path;
}

// `cohort run PIPELINE` with the fake CUDA plugin (two GPUs) and `env`.
test::cli_result run_on_fake_gpus(const std::string& pipeline,
                                  const std::string& env = "") {
  return test::run_command(
      std::string{"COHORT_PLUGIN_PATH="} + COHORT_FAKE_PLUGIN_DIR + " " + env +
      " " + COHORT_BINARY + " run " + pipeline + " --no-progress");
}

// The audit log's device events of `path`, one per line.
std::string device_events_in(const std::string& path) {
  std::string out;
  for (auto& rec : test::read_audit(path))
    if (rec.kind() == pb::DEVICE_EVENT)
      out += rec.device() + ": " + rec.detail() + "\n";
  return out;
}

} // namespace

TEST_CASE("real GPUs run in device host processes, and one with a sticky "
          "error comes back in a new process",
          "[actors][host][gpu]") {
  test::temp_dir dir;
  SECTION("both GPUs in host processes run the work") {
    auto run =
        run_on_fake_gpus(gpu_pipeline(dir, 40, "gpu_host_processes: true"));
    INFO(run.output);
    CHECK(run.status == 0);
    CHECK_THAT(run.output, Catch::Contains("40 completed, 0 failed"));
    auto events = device_events_in(dir.file("audit.log"));
    INFO(events);
    CHECK_THAT(events, Catch::Contains("cuda0: supervisor: resetting -> "
                                       "available (restarted: started in a "
                                       "host process)") &&
                           Catch::Contains("cuda1: supervisor: resetting -> "
                                           "available (restarted: started in "
                                           "a host process)"));
  }
  SECTION("a sticky error ends with a new process, not a lost GPU") {
    // The first host to launch a kernel gets a sticky error that no reset
    // clears; the new process it is replaced with runs clean. Tenant a may
    // run on cuda0 only and b on cuda1 only, so the run lasts until the
    // poisoned GPU is back, however slow the machine.
    auto path = dir.file("sticky.textproto");
    std::ofstream{path}
        << "name: \"sticky\" batches: 40 seed: 5 window: 8\n"
           "stage { name: \"a\" kernel: GEMV args { m: 64 n: 64 } tenant: "
           "\"a\" }\n"
           "stage { name: \"b\" kernel: GEMV args { m: 64 n: 64 } tenant: "
           "\"b\" }\n"
           "runtime {\n  devices { cpu_workers: 0 gpu_streams: 2 "
           "gpu_host_processes: true host_binary: \""
        << COHORT_BINARY
        << "\" }\n"
           "  tenant { tenant: \"a\" kernels: \"*\" devices: \"cuda0\" "
           "queue_timeout_ms: 60000 }\n"
           "  tenant { tenant: \"b\" kernels: \"*\" devices: \"cuda1\" "
           "queue_timeout_ms: 60000 }\n"
           "  audit_path: \""
        << dir.file("audit.log") << "\"\n  max_attempts: 8\n}\n";
    auto run = run_on_fake_gpus(path, "COHORT_FAKE_GPU_STICKY_ONCE=" +
                                          dir.file("sticky-once"));
    INFO(run.output);
    CHECK(run.status == 0);
    CHECK_THAT(run.output, Catch::Contains("80 completed, 0 failed"));
    auto events = device_events_in(dir.file("audit.log"));
    INFO(events);
    CHECK_THAT(events, Catch::Contains("(sticky: the context is lost)") &&
                           Catch::Contains("new host process, restart "));
  }
  SECTION("the node counts the Xids of GPUs in host processes") {
    // The fake health library tells every watcher of a GPU of Xid 13 (an
    // application's fault: a warning, not a loss) as it starts watching.
    // The node watches its hosted GPUs as NVML lets any process do: its
    // report counts one per GPU (their hosts, which watch too, warn).
    auto run =
        run_on_fake_gpus(gpu_pipeline(dir, 20, "gpu_host_processes: true"),
                         "COHORT_FAKE_GPU_XID=13");
    INFO(run.output);
    CHECK(run.status == 0);
    CHECK_THAT(run.output,
               Catch::Contains("20 completed, 0 failed") &&
                   Catch::Contains("Xid errors         cuda0: 1 (the last "
                                   "Xid 13)") &&
                   Catch::Contains("Xid errors         cuda1: 1 (the last "
                                   "Xid 13)"));
    auto events = device_events_in(dir.file("audit.log"));
    INFO(events);
    CHECK_THAT(events, Catch::Contains("cuda0: supervisor: resetting -> "
                                       "available (restarted: started in a "
                                       "host process)"));
  }
  SECTION("a host that finds another GPU at its ordinal refuses to start") {
    // The hosts see other GPUs at the ordinals the node probed (as with a
    // CUDA_VISIBLE_DEVICES of their own): each refuses, saying both UUIDs,
    // the node gives the GPU up at once (a new process would find the
    // same GPU), and the work runs on the CPU worker.
    auto run =
        run_on_fake_gpus(gpu_pipeline(dir, 10, "gpu_host_processes: true", 1),
                         "COHORT_FAKE_GPU_OTHER_IN_HOSTS=1");
    INFO(run.output);
    CHECK(run.status == 0);
    CHECK_THAT(run.output, Catch::Contains("10 completed, 0 failed"));
    auto events = device_events_in(dir.file("audit.log"));
    INFO(events);
    CHECK_THAT(events, Catch::Contains("ordinal 0 is GPU OTHER-0 in this "
                                       "process, not FAKE-0") &&
                           Catch::Contains("ordinal 1 is GPU OTHER-1 in this "
                                           "process, not FAKE-1"));
    CHECK_THAT(events, !Catch::Contains("cuda0: supervisor: resetting -> "
                                        "available"));
    CHECK_THAT(events, Catch::Contains("(not tried again: a new host process "
                                       "would find the same GPU)"));
    CHECK_THAT(events, !Catch::Contains("its host process did not start"));
  }
  SECTION("per GPU: cuda1 kept in the node's process") {
    auto run = run_on_fake_gpus(gpu_pipeline(
        dir, 20, "gpu_host_process { key: \"cuda1\" value: false }"));
    INFO(run.output);
    CHECK(run.status == 0);
    auto events = device_events_in(dir.file("audit.log"));
    INFO(events);
    // By default cuda0 runs in a host process when the node can start one:
    // `cohort run` loads CAF's middleman on a machine with GPU device files
    // or when the config asks for host processes. Without, the audit says
    // why it runs in the node's process.
    bool hosted = events.find("cuda0: supervisor: resetting -> available "
                              "(restarted: started in a host process)") !=
                  std::string::npos;
    CHECK((hosted ||
           events.find("cuda0: runs in the node's process, not in a device "
                       "host process of its own: the actor system has no CAF "
                       "middleman") != std::string::npos));
    // cuda1 stays in the node's process, as its config says (not audited).
    CHECK_THAT(events, !Catch::Contains("cuda1: supervisor: resetting -> "
                                        "available (restarted: started in a "
                                        "host process)") &&
                           !Catch::Contains("cuda1: runs in the node's"));
  }
}

TEST_CASE("a bundle's kernel with CUDA code runs on GPUs in host processes",
          "[actors][host][gpu][kernels]") {
  // A signed bundle whose scale_add (f64: alpha * x + y) has CUDA code: a
  // fake module naming the entry point the fake plugin defines, launched in
  // blocks of 64 over one thread per element. Both fake GPUs run in host
  // processes and there is no CPU worker: every item runs in a host, which
  // gets the kernel's code from the node and each launch's sizes with it.
  test::temp_dir dir;
  auto key = std::move(*kernels::bundle::private_key::generate());
  auto pub = test::write_public_key(dir, key);
  auto b = dir.file("hosted");
  auto text = test::acme_kernels_text("hosted");
  text.replace(text.find("  cpu_symbol: \"acme_scale_add\""), 0,
               "  cuda { blob: \"gpu/k.ptx\" function: \"scale_add\" "
               "block: 64 threads: \"x\" }\n");
  test::make_bundle(b, "hosted", text, nullptr);
  test::add_blob(b, "gpu/k.ptx",
                 std::string{testing::fake_gpu_api::module_magic} +
                     "scale_add\n",
                 "CUDA_PTX");
  auto sig = kernels::bundle::sign_bundle(b, key);
  REQUIRE(std::holds_alternative<pb::BundleSignature>(sig));
  test::write_bytes(
      b + "/manifest.sig",
      kernels::bundle::signature_text(std::get<pb::BundleSignature>(sig)));
  constexpr size_t rows = 1200;
  std::vector<double> x(rows), y(rows);
  for (size_t i = 0; i < rows; ++i) {
    x[i] = double(i) * 0.25;
    y[i] = 1.0 / double(i + 1);
  }
  auto save = [&](const std::string& name, const std::vector<double>& v) {
    auto path = dir.file(name);
    auto w = tools::npy::writer::create(path, kernels::dtype::f64, {rows});
    REQUIRE(w);
    REQUIRE(!w->write(0, {v.data(), v.size(), kernels::dtype::f64}));
    REQUIRE(!w->commit());
    return path;
  };
  auto xs = save("x.npy", x);
  auto ys = save("y.npy", y);
  auto out = dir.file("z.npy");
  auto spec = dir.file("hosted.textproto");
  std::ofstream{spec}
      << "name: \"hosted\" tenant: \"t\" batches: 12 window: 4\n"
         "stage { name: \"s\" kernel_name: \"hosted.scale_add\" args { "
         "alpha: 2 } input { file: \""
      << xs << "\" } input { file: \"" << ys << "\" } output: \"" << out
      << "\" }\n"
         "runtime {\n  devices { cpu_workers: 0 gpu_streams: 2 "
         "gpu_host_processes: true host_binary: \""
      << COHORT_BINARY
      << "\" }\n"
         "  tenant { tenant: \"t\" kernels: \"*\" devices: \"*\" }\n"
         "  kernel_bundles { trusted_key: \""
      << pub << "\" load: \"" << b
      << "\" }\n"
         "  audit_path: \""
      << dir.file("audit.log") << "\"\n  max_attempts: 8\n}\n";
  auto run = run_on_fake_gpus(spec);
  INFO(run.output);
  CHECK(run.status == 0);
  CHECK_THAT(run.output, Catch::Contains("12 completed, 0 failed") &&
                             Catch::Contains("results            12 of 12 "
                                             "match the CPU reference"));
  auto events = device_events_in(dir.file("audit.log"));
  INFO(events);
  CHECK_THAT(events, Catch::Contains("cuda0: supervisor: resetting -> "
                                     "available (restarted: started in a "
                                     "host process)"));
  // What the hosts computed, row by row.
  auto r = tools::npy::reader::open(out);
  REQUIRE(r);
  auto all = r->rows(0, r->info().rows);
  REQUIRE(all);
  auto z = all->view().as<double>();
  REQUIRE(z.size() == rows);
  for (size_t i = 0; i < rows; i += 97)
    CHECK(z[i] == Approx(2 * x[i] + y[i]).epsilon(1e-12));
}

TEST_CASE("where a real GPU runs: per GPU, for all, or by default where the "
          "node can start host processes",
          "[actors][host][gpu]") {
  pb::RuntimeConfig cfg;
  gpu_hosting can;
  gpu_hosting cannot{false, "no cohort program"};
  std::string why;
  // Unset: in a host process when the node can start one, whatever
  // kernels this process registered (their GPU code goes to the hosts).
  CHECK(gpu_in_host(cfg, "cuda0", can, &why));
  CHECK(why.empty());
  CHECK_FALSE(gpu_in_host(cfg, "cuda0", cannot, &why));
  CHECK(why == "no cohort program");
  // Kernel bundles too: their GPU code goes to the hosts as well.
  auto bundled = cfg;
  bundled.mutable_kernel_bundles()->add_load("/opt/bundles/acme");
  bundled.mutable_kernel_bundles()->add_trusted_key("/etc/cohort/acme.pub");
  why.clear();
  CHECK(gpu_in_host(bundled, "cuda0", can, &why));
  CHECK(why.empty());
  // Objects shared through IPC keep GPUs in the node's process.
  auto sharing = cfg;
  sharing.set_share_socket("/run/cohort/share.sock");
  why.clear();
  CHECK_FALSE(gpu_in_host(sharing, "cuda0", can, &why));
  CHECK_THAT(why, Catch::Contains("share_socket"));
  // Said for all, then per GPU: no reason is given (nothing to explain).
  cfg.mutable_devices()->set_gpu_host_processes(false);
  why.clear();
  CHECK_FALSE(gpu_in_host(cfg, "cuda0", can, &why));
  CHECK(why.empty());
  (*cfg.mutable_devices()->mutable_gpu_host_process())["cuda1"] = true;
  CHECK(gpu_in_host(cfg, "cuda1", cannot, &why));
  CHECK_FALSE(gpu_in_host(cfg, "cuda0", can, &why));
}

TEST_CASE("the node's stand-in of a hosted GPU counts its Xids and reads "
          "its health",
          "[actors][host][gpu]") {
  auto monitor = std::make_shared<testing::fake_monitor>();
  device_info info;
  info.name = "cuda0";
  info.kind = device_kind::cuda_gpu;
  info.pci_bus_id = "0000:98:00.0";
  info.host_process = true;
  using kind = devices::health::gpu_event::kind;
  // NVML tells of Xid 79 (fallen off the bus) as a loss with its code.
  devices::health::gpu_event xid79{kind::lost, 79, ""};
  {
    hosted_device dev{info, pb::HostSpec{}};
    CHECK_FALSE(dev.telemetry().available);
    CHECK_THAT(dev.telemetry().unavailable_reason,
               Catch::Contains("no health monitor for cuda0"));
    auto watch =
        std::make_shared<devices::health::gpu_watch>(monitor, info.pci_bus_id);
    dev.watch_health(monitor, watch);
    REQUIRE(watch->start());
    watch.reset();
    CHECK(monitor->watching(info.pci_bus_id));
    CHECK(dev.telemetry().available);
    CHECK(dev.telemetry().gpu_util_percent == 42);
    monitor->raise(info.pci_bus_id, {kind::xid, 13, ""});
    monitor->raise(info.pci_bus_id, {kind::ecc_corrected, 0, ""});
    monitor->raise("0000:99:00.0", xid79);
    CHECK(dev.xid_errors() == 1);
    CHECK(dev.last_xid() == 13);
    // A device-level Xid is counted: the host acts on it.
    monitor->raise(info.pci_bus_id, xid79);
    CHECK(dev.xid_errors() == 2);
    CHECK(dev.last_xid() == 79);
    // Nothing launches on the stand-in, whatever its health.
    CHECK_FALSE(dev.health());
  }
  // Its watch ended with it.
  CHECK_FALSE(monitor->watching(info.pci_bus_id));
  // A simulated device has no bus id, and a remote one's names a GPU of
  // another machine: neither is watched.
  device_info sim;
  sim.name = "sim0";
  hosted_device plain{sim, pb::HostSpec{}};
  plain.watch_health(monitor);
  CHECK_FALSE(plain.telemetry().available);
  auto far = info;
  far.remote = "gpu-7.example:9471";
  hosted_device remote{far, endpoint{"gpu-7.example", 9471}, 0};
  remote.watch_health(monitor);
  CHECK_FALSE(monitor->watching(info.pci_bus_id));
  CHECK_FALSE(remote.telemetry().available);
}

TEST_CASE("the node's stand-ins of the MIG instances of one GPU share its "
          "watch and count their own GPU instance's Xids",
          "[actors][host][gpu]") {
  auto monitor = std::make_shared<testing::fake_monitor>();
  auto instance = [](const std::string& name) {
    device_info info;
    info.name = name;
    info.kind = device_kind::cuda_gpu;
    info.pci_bus_id = "0000:98:00.0";
    info.host_process = true;
    return info;
  };
  hosted_device first{instance("mig0.0"), pb::HostSpec{}};
  hosted_device second{instance("mig0.1"), pb::HostSpec{}};
  auto watch =
      std::make_shared<devices::health::gpu_watch>(monitor, "0000:98:00.0");
  first.watch_health(monitor, watch, 1);
  second.watch_health(monitor, watch, 2);
  REQUIRE(watch->start());
  CHECK(first.event_watch() == second.event_watch());
  using kind = devices::health::gpu_event::kind;
  auto xid = [](uint32_t code, uint32_t gi) {
    devices::health::gpu_event ev{kind::xid, code, ""};
    ev.gpu_instance = gi;
    return ev;
  };
  // Xid 31 of GPU instance 2 is the second's alone; Xid 48 (a double-bit
  // ECC error) of the whole GPU is both instances'.
  monitor->raise("0000:98:00.0", xid(31, 2));
  CHECK(first.xid_errors() == 0);
  CHECK(second.xid_errors() == 1);
  CHECK(second.last_xid() == 31);
  monitor->raise("0000:98:00.0",
                 xid(48, devices::health::gpu_event::whole_gpu));
  CHECK(first.xid_errors() == 1);
  CHECK(first.last_xid() == 48);
  CHECK(second.xid_errors() == 2);
  // Both read their health through the library.
  CHECK(first.telemetry().available);
  CHECK(second.telemetry().available);
}

TEST_CASE("CAF's network modules are loaded once however often asked",
          "[actors][host]") {
  // A config whose devices need the middleman: system_config loads it, and
  // a caller that loads it again (device hosts do) adds nothing.
  pb::RuntimeConfig rc;
  rc.mutable_devices()->add_sim_gpu()->set_host_process(true);
  system_config cfg{rc};
  auto modules = cfg.module_factories.size();
  REQUIRE(modules >= 1);
  load_network(cfg);
  load_network(cfg);
  CHECK(cfg.module_factories.size() == modules);
  // A config without: loaded once by the first call.
  system_config plain{pb::RuntimeConfig{}};
  auto before = plain.module_factories.size();
  load_network(plain);
  auto after = plain.module_factories.size();
  CHECK(after <= before + 1);
  load_network(plain);
  CHECK(plain.module_factories.size() == after);
}

TEST_CASE("cohort devices says where each real GPU runs",
          "[actors][host][gpu]") {
  test::temp_dir dir;
  auto cfg = dir.file("c.textproto");
  std::ofstream{cfg} << "devices { cpu_workers: 0 gpu_host_processes: true "
                        "gpu_host_process { key: \"cuda1\" value: false } "
                        "host_binary: \""
                     << COHORT_BINARY
                     << "\" }\n"
                        "tenant { tenant: \"t\" kernels: \"*\" devices: "
                        "\"*\" }\n";
  auto out = test::run_command(std::string{"COHORT_PLUGIN_PATH="} +
                               COHORT_FAKE_PLUGIN_DIR + " " + COHORT_BINARY +
                               " devices --config " + cfg);
  INFO(out.output);
  CHECK(out.status == 0);
  CHECK_THAT(
      out.output,
      Catch::Matches("(.|\n)*cuda0 [^\n]*a host process\n(.|\n)*") &&
          Catch::Matches("(.|\n)*cuda1 [^\n]*the node's process\n(.|\n)*") &&
          Catch::Contains("cuda0: Fake GPU (test plugin)") &&
          Catch::Contains("runs in a device host process\n    health: 42% "
                          "busy, 0 B of 256.0 MiB used, 55 C"));
  // A name that is no GPU's is refused.
  std::ofstream{cfg} << "devices { cpu_workers: 1 gpu_host_process { key: "
                        "\"gpu0\" value: true } }\n";
  auto bad = test::run_command(std::string{COHORT_BINARY} +
                               " devices --config " + cfg);
  INFO(bad.output);
  CHECK(bad.status == 2);
  CHECK_THAT(bad.output, Catch::Contains("'gpu0' is not a GPU's name"));
}

TEST_CASE("an Xid of one MIG instance is that instance's, in the node and "
          "in its host process",
          "[actors][host][gpu]") {
  // GPU 0000:98:00.0 in MIG mode: mig0.0 on GPU instance 1, mig0.1 on 2.
  // NVML tells each watcher of Xid 13 of GPU instance 2 as it starts
  // watching: the node counts it for mig0.1 alone, and of the two hosts
  // only mig0.1's acts on it (the default policy: a warning, which the
  // node hears at the host's next health check, 50 ms on: the run lasts
  // long enough). cuda1 (not in MIG mode) takes it as its GPU's.
  test::temp_dir dir;
  auto run =
      run_on_fake_gpus(gpu_pipeline(dir, 10000, "gpu_host_processes: true", 1),
                       "env -u CUDA_VISIBLE_DEVICES COHORT_FAKE_GPU_MIG=1 "
                       "COHORT_FAKE_GPU_XID=13 COHORT_FAKE_GPU_XID_INSTANCE=2");
  INFO(run.output);
  CHECK(run.status == 0);
  CHECK_THAT(run.output,
             Catch::Contains("10000 completed, 0 failed") &&
                 Catch::Contains("Xid errors         mig0.1: 1 (the last "
                                 "Xid 13)") &&
                 Catch::Contains("Xid errors         cuda1: 1 (the last "
                                 "Xid 13)") &&
                 !Catch::Contains("Xid errors         mig0.0"));
  auto events = device_events_in(dir.file("audit.log"));
  INFO(events);
  CHECK_THAT(events, Catch::Contains("mig0.1: warning: fake NVML reported "
                                     "Xid 13") &&
                         Catch::Contains("cuda1: warning: fake NVML reported "
                                         "Xid 13") &&
                         !Catch::Contains("mig0.0: warning"));
}

TEST_CASE("the instances of a GPU in MIG mode are devices of their own, "
          "each in a host process that sees it alone",
          "[actors][host][gpu]") {
  // The fake plugin's first GPU (0000:98:00.0) is in MIG mode with two
  // instances; CUDA in the node shows it as cuda0, a view of one instance.
  test::temp_dir dir;
  auto cfg = dir.file("c.textproto");
  std::ofstream{cfg} << "devices { cpu_workers: 0 gpu_host_processes: true "
                        "host_binary: \""
                     << COHORT_BINARY
                     << "\" }\n"
                        "tenant { tenant: \"t\" kernels: \"*\" devices: "
                        "\"*\" }\n";
  // The node's own CUDA_VISIBLE_DEVICES chooses among the instances: the
  // test's environment must not.
  const std::string env =
      std::string{"env -u CUDA_VISIBLE_DEVICES COHORT_FAKE_GPU_MIG=1 "} +
      "COHORT_PLUGIN_PATH=" + COHORT_FAKE_PLUGIN_DIR + " ";
  auto out =
      test::run_command(env + COHORT_BINARY + " devices --config " + cfg);
  INFO(out.output);
  CHECK(out.status == 0);
  CHECK_THAT(out.output,
             Catch::Contains("mig0.0: Fake GPU (test plugin) MIG 3g.128mb "
                             "sm_90") &&
                 Catch::Contains("UUID MIG-fake-98-1\n    runs in a device "
                                 "host process") &&
                 Catch::Contains("cuda1: Fake GPU (test plugin)") &&
                 !Catch::Contains("cuda0"));
  // NVML reads an instance's own memory, and no utilization in MIG mode.
  CHECK_THAT(out.output, Catch::Contains("UUID MIG-fake-98-0\n    runs in a "
                                         "device host process\n    health: "
                                         "n/a (MIG) busy, 0 B of 128.0 MiB "
                                         "used"));
  CHECK_THAT(out.output,
             Catch::Matches("(.|\n)*mig0.1 [^\n]*128.0 MiB[^\n]*a host "
                            "process\n(.|\n)*"));
  // An instance cannot run in the node's process: left out, with the
  // reason.
  std::ofstream{cfg} << "devices { cpu_workers: 0 gpu_host_processes: true "
                        "gpu_host_process { key: \"mig0.1\" value: false } "
                        "host_binary: \""
                     << COHORT_BINARY
                     << "\" }\n"
                        "tenant { tenant: \"t\" kernels: \"*\" devices: "
                        "\"*\" }\n";
  out = test::run_command(env + COHORT_BINARY + " devices --config " + cfg);
  INFO(out.output);
  CHECK(out.status == 0);
  CHECK_THAT(out.output, Catch::Contains("mig0.0: Fake GPU") &&
                             !Catch::Contains("mig0.1: Fake GPU") &&
                             Catch::Contains("mig0.1: a MIG instance runs in "
                                             "a device host process"));
  // A node that keeps every GPU in its own process hosts no instance: the
  // GPU is the one instance its CUDA shows, not gone.
  std::ofstream{cfg} << "devices { cpu_workers: 0 }\n"
                        "tenant { tenant: \"t\" kernels: \"*\" devices: "
                        "\"*\" }\n";
  out = test::run_command(env + COHORT_BINARY + " devices --config " + cfg);
  INFO(out.output);
  CHECK(out.status == 0);
  CHECK_THAT(out.output, Catch::Contains("cuda0: Fake GPU") &&
                             Catch::Contains("cuda1: Fake GPU") &&
                             !Catch::Contains("mig0.0: Fake GPU") &&
                             Catch::Contains("mig0.0: a MIG instance runs in "
                                             "a device host process"));
  // The node's CUDA_VISIBLE_DEVICES gives it one instance: the other is
  // someone else's.
  std::ofstream{cfg} << "devices { cpu_workers: 0 gpu_host_processes: true "
                        "host_binary: \""
                     << COHORT_BINARY
                     << "\" }\n"
                        "tenant { tenant: \"t\" kernels: \"*\" devices: "
                        "\"*\" }\n";
  out = test::run_command(env + "CUDA_VISIBLE_DEVICES=MIG-fake-98-1 " +
                          COHORT_BINARY + " devices --config " + cfg);
  INFO(out.output);
  CHECK(out.status == 0);
  CHECK_THAT(out.output,
             Catch::Contains("mig0.1: Fake GPU") &&
                 !Catch::Contains("mig0.0: Fake GPU") &&
                 !Catch::Contains("cuda0: Fake GPU") &&
                 Catch::Contains("1 MIG instance(s) left out: this process's "
                                 "CUDA_VISIBLE_DEVICES does not name them"));
  // Instances named while the node's CUDA sees no device at all (it takes
  // one UUID only): NVML still lists them.
  out = test::run_command(env +
                          "CUDA_VISIBLE_DEVICES=MIG-fake-98-0,MIG-fake-98-1 " +
                          COHORT_BINARY + " devices --config " + cfg);
  INFO(out.output);
  CHECK(out.status == 0);
  CHECK_THAT(out.output, Catch::Contains("mig0.0: Fake GPU") &&
                             Catch::Contains("mig0.1: Fake GPU") &&
                             !Catch::Contains("cuda1: Fake GPU"));
  // A start of a UUID names an instance only when no other UUID has it
  // (with no GPU left, a CPU worker keeps the config valid).
  auto with_cpu = dir.file("cpu.textproto");
  std::ofstream{with_cpu} << "devices { cpu_workers: 1 }\n";
  out = test::run_command(env + "CUDA_VISIBLE_DEVICES=MIG-fake-98- " +
                          COHORT_BINARY + " devices --config " + with_cpu);
  INFO(out.output);
  CHECK(out.status == 0);
  CHECK_THAT(out.output, !Catch::Contains("mig0.0: Fake GPU") &&
                             !Catch::Contains("mig0.1: Fake GPU") &&
                             Catch::Contains("2 MIG instance(s) left out"));
  // Naming the GPU gives it all its instances.
  out = test::run_command(env + "CUDA_VISIBLE_DEVICES=GPU-fake-98 " +
                          COHORT_BINARY + " devices --config " + cfg);
  INFO(out.output);
  CHECK(out.status == 0);
  CHECK_THAT(out.output, Catch::Contains("mig0.0: Fake GPU") &&
                             Catch::Contains("mig0.1: Fake GPU") &&
                             !Catch::Contains("left out"));
  // Two compute instances of one GPU instance share its memory in halves.
  out = test::run_command(
      "env -u CUDA_VISIBLE_DEVICES COHORT_FAKE_GPU_MIG=shared "
      "COHORT_PLUGIN_PATH=" +
      std::string{COHORT_FAKE_PLUGIN_DIR} + " " + COHORT_BINARY +
      " devices --config " + cfg);
  INFO(out.output);
  CHECK(out.status == 0);
  CHECK_THAT(
      out.output,
      Catch::Contains("mig0.0: Fake GPU (test plugin) MIG 1c.3g.128mb") &&
          Catch::Matches("(.|\n)*mig0.1 [^\n]*64.0 MiB(.|\n)*"));
  // Work granted to the two instances runs there, each in its own host
  // process that sees its instance alone (CUDA_VISIBLE_DEVICES, which the
  // fake plugin notes in each host), and cuda1 in one that sees all.
  auto path = dir.file("mig.textproto");
  std::ofstream{path} << "name: \"mig\" tenant: \"t\" batches: 30 seed: 3 "
                         "window: 8\n"
                         "stage { name: \"g\" kernel: GEMV args { m: 64 n: "
                         "64 } }\n"
                         "runtime {\n  devices { cpu_workers: 0 gpu_streams: "
                         "2 gpu_host_processes: true host_binary: \""
                      << COHORT_BINARY
                      << "\" }\n"
                         "  tenant { tenant: \"t\" kernels: \"*\" devices: "
                         "\"mig0.0\" devices: \"mig0.1\" }\n"
                         "  audit_path: \""
                      << dir.file("audit.log") << "\"\n}\n";
  auto run =
      test::run_command(env + "COHORT_FAKE_GPU_SEEN=" + dir.file("seen") + " " +
                        COHORT_BINARY + " run " + path + " --no-progress");
  INFO(run.output);
  CHECK(run.status == 0);
  CHECK_THAT(run.output, Catch::Contains("30 completed, 0 failed"));
  auto events = device_events_in(dir.file("audit.log"));
  INFO(events);
  for (auto name : {"mig0.0", "mig0.1"})
    CHECK_THAT(events, Catch::Contains(std::string{name} +
                                       ": supervisor: resetting -> available "
                                       "(restarted: started in a host "
                                       "process)"));
  std::multiset<std::string> seen;
  std::ifstream in{dir.file("seen")};
  for (std::string line; std::getline(in, line);)
    seen.insert(line);
  // Once each (more if a slow start was tried again), and nothing else.
  auto mig0 = seen.count("MIG-fake-98-0"), mig1 = seen.count("MIG-fake-98-1"),
       all = seen.count("(unset)");
  CHECK(mig0 >= 1);
  CHECK(mig1 >= 1);
  CHECK(all >= 1);
  CHECK(mig0 + mig1 + all == seen.size());
  // A name that is neither a GPU's nor an instance's is refused.
  std::ofstream{cfg} << "devices { cpu_workers: 1 gpu_host_process { key: "
                        "\"mig0\" value: true } }\n";
  auto bad = test::run_command(std::string{COHORT_BINARY} +
                               " devices --config " + cfg);
  INFO(bad.output);
  CHECK(bad.status == 2);
  CHECK_THAT(bad.output, Catch::Contains("'mig0' is not a GPU's name"));
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
