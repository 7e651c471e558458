// bench/hosts: a simulated GPU in a device host process, and on a remote
// device host the node joined over TLS on the loopback interface, against
// the same device in the node's process (docs/device-hosts.md). Reports,
// each over the runs, interleaved:
//   - one-at-a-time latency of a small item (median and p99, microseconds);
//   - throughput of a batch of small items (items per second);
//   - respawn: from a SIGKILL of the host to the device available again;
//   - recovery: from a SIGKILL under load to the end of each item that was
//     moved off the killed host (median and p99).
//
//   bench_hosts [--items N] [--runs N] [--kills N]
//
// The remote runs need the openssl command (deps/apt.txt), which makes a
// throwaway CA and certificate; without it they are skipped, saying so.
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <google/protobuf/text_format.h>

#include "actors/runtime.hpp"
#include "messages/system_config.hpp"

using namespace cohort;
using clock_type = std::chrono::steady_clock;

namespace {

double us_since(clock_type::time_point t0, clock_type::time_point t1) {
  return std::chrono::duration<double, std::micro>(t1 - t0).count();
}

double percentile(std::vector<double> v, double p) {
  if (v.empty())
    return 0;
  std::sort(v.begin(), v.end());
  auto i = size_t(p * double(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

enum class where { node, host_process, remote };

const char* to_string(where w) {
  switch (w) {
  case where::node:
    return "sim0 in the node";
  case where::host_process:
    return "sim0 in a host process";
  default:
    return "sim0 on a remote host";
  }
}

// A remote device host on 127.0.0.1 with a throwaway CA, serving sim0.
struct remote_host {
  std::filesystem::path dir;
  int pid = 0;
  uint16_t port = 0;
  pb::NetworkConfig network;

  ~remote_host() {
    if (pid > 0) {
      ::kill(pid, SIGTERM);
      ::waitpid(pid, nullptr, 0);
    }
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
};

// Makes the CA, one certificate for both sides and the token in `dir`;
// false when the openssl command failed.
bool make_certificates(const std::filesystem::path& dir) {
  auto d = dir.string();
  auto cmd =
      "cd '" + d +
      "' && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 "
      "-nodes -days 2 -keyout ca.key -out ca.pem -subj /CN=bench-ca "
      "-addext basicConstraints=critical,CA:TRUE -addext "
      "keyUsage=critical,keyCertSign,cRLSign && printf "
      "'basicConstraints=CA:FALSE\\nextendedKeyUsage=serverAuth,clientAuth\\n'"
      " > leaf.ext && openssl req -newkey ec -pkeyopt "
      "ec_paramgen_curve:prime256v1 -nodes -keyout fleet.key -out fleet.csr "
      "-subj /CN=fleet && openssl x509 -req -in fleet.csr -CA ca.pem -CAkey "
      "ca.key -CAcreateserial -out fleet.pem -days 2 -sha256 -extfile "
      "leaf.ext && printf 'bench-fleet-token-0123456789\\n' > token";
  return std::system(("(" + cmd + ") > /dev/null 2>&1").c_str()) == 0;
}

// Starts `cohort device-host --listen 127.0.0.1:0` serving `sim`; false
// (with a message) when it could not.
bool start_remote(remote_host& h, const pb::RuntimeConfig& sim) {
  char tmpl[] = "/tmp/cohort-bench-hosts-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr)
    return false;
  h.dir = tmpl;
  if (!make_certificates(h.dir)) {
    std::printf("(remote runs skipped: the openssl command could not make a "
                "certificate)\n");
    return false;
  }
  auto file = [&](const char* name) { return (h.dir / name).string(); };
  h.network.set_certificate(file("fleet.pem"));
  h.network.set_key(file("fleet.key"));
  h.network.set_cafile(file("ca.pem"));
  h.network.set_token_file(file("token"));
  auto host_cfg = sim;
  *host_cfg.mutable_network() = h.network;
  host_cfg.set_audit_path(file("host-audit.log"));
  std::string text;
  google::protobuf::TextFormat::PrintToString(host_cfg, &text);
  std::ofstream{file("host.textproto")} << text;
  int out[2];
  if (::pipe(out) != 0)
    return false;
  h.pid = ::fork();
  if (h.pid == 0) {
    ::dup2(out[1], 1);
    ::close(out[0]);
    ::close(out[1]);
    auto config = file("host.textproto");
    ::execl(COHORT_BINARY, COHORT_BINARY, "device-host", "--listen",
            "127.0.0.1:0", "--config", config.c_str(), nullptr);
    ::_exit(127);
  }
  ::close(out[1]);
  std::string line;
  char c;
  pollfd p{out[0], POLLIN, 0};
  while (::poll(&p, 1, 15000) > 0 && ::read(out[0], &c, 1) == 1 && c != '\n')
    line += c;
  ::close(out[0]);
  auto at = line.rfind(':');
  if (at != std::string::npos)
    h.port = uint16_t(std::strtoul(line.c_str() + at + 1, nullptr, 10));
  if (h.port == 0) {
    std::fprintf(stderr, "bench_hosts: the remote host said '%s'\n",
                 line.c_str());
    return false;
  }
  return true;
}

// One simulated GPU named sim0 (in a host process, or on the remote host
// `remote` serves), and for the kill runs a second one in the node's
// process to take the moved work.
pb::RuntimeConfig config(where w, bool with_spare, uint32_t latency_us,
                         const remote_host* remote = nullptr) {
  pb::RuntimeConfig cfg;
  cfg.mutable_devices()->set_cpu_workers(0);
  cfg.mutable_devices()->set_gpus(false);
  auto add = [&](const std::string& name, bool host) {
    auto* g = cfg.mutable_devices()->add_sim_gpu();
    g->set_name(name);
    g->set_memory_mib(1024);
    g->set_streams(2);
    g->set_speed(1);
    g->set_launch_latency_us(latency_us);
    g->set_host_process(host);
  };
  if (w != where::remote)
    add("sim0", w == where::host_process);
  if (with_spare)
    add("spare", false);
  if (remote != nullptr) {
    // Its TLS module is loaded either way: one actor system serves every
    // run.
    *cfg.mutable_network() = remote->network;
    if (w == where::remote)
      cfg.mutable_network()->add_join("127.0.0.1:" +
                                      std::to_string(remote->port));
  }
  auto* t = cfg.add_tenant();
  t->set_tenant("t");
  t->add_kernels("*");
  t->add_devices("*");
  // A whole batch in flight at once.
  t->set_max_inflight(100000);
  cfg.mutable_limits()->set_max_inflight(100000);
  cfg.mutable_devices()->set_host_binary(COHORT_BINARY);
  cfg.set_audit_path("/tmp/cohort-bench-hosts-audit.log");
  cfg.mutable_audit()->set_fsync(pb::FSYNC_NEVER);
  return cfg;
}

work_item small_item(uint64_t id) {
  static const std::vector<float> x(1024, 1.0f);
  work_item item;
  item.id = id;
  item.tenant = "t";
  item.kernel = kernels::kernel_id::reduce_sum;
  item.inputs.emplace_back(x);
  return item;
}

bool wait_available(actors::runtime& rt, size_t index) {
  for (int i = 0; i < 2000; ++i) {
    auto s = rt.placement_stats();
    if (s && s->devices[index].status == device_status::available)
      return true;
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
  return false;
}

struct dispatch_figures {
  double p50_us = 0, p99_us = 0, items_per_s = 0;
  /// The crossing the balancer measured to the device (its fixed cost).
  double crossing_us = 0;
};

dispatch_figures dispatch(caf::actor_system& sys, where w, int items,
                          const remote_host* remote) {
  auto rt = actors::runtime::start(sys, config(w, false, 1, remote));
  if (!rt) {
    std::fprintf(stderr, "bench_hosts: %s\n", describe(rt.error()).c_str());
    std::exit(1);
  }
  auto& r = **rt;
  wait_available(r, 0);
  dispatch_figures out;
  std::vector<double> lat;
  uint64_t id = 1;
  for (int i = 0; i < std::min(items, 2000); ++i) {
    auto t0 = clock_type::now();
    auto res = r.run(small_item(id++));
    lat.push_back(us_since(t0, clock_type::now()));
    if (!res) {
      std::fprintf(stderr, "bench_hosts: %s\n", describe(res.error()).c_str());
      std::exit(1);
    }
  }
  out.p50_us = percentile(lat, 0.5);
  out.p99_us = percentile(lat, 0.99);
  if (auto s = r.placement_stats())
    out.crossing_us = s->devices[0].crossing_ns / 1e3;
  std::vector<work_item> batch;
  for (int i = 0; i < items; ++i)
    batch.push_back(small_item(id++));
  auto t0 = clock_type::now();
  auto fs = r.submit(std::move(batch));
  for (auto& f : fs)
    if (auto res = f.get(); !res) {
      std::fprintf(stderr, "bench_hosts: an item failed: %s\n",
                   describe(res.error()).c_str());
      std::exit(1);
    }
  out.items_per_s = double(items) / (us_since(t0, clock_type::now()) / 1e6);
  r.stop();
  return out;
}

struct kill_figures {
  std::vector<double> respawn_ms;
  std::vector<double> recovery_ms;
};

// Kills sim0's host while 400 items of 2 ms each run on it and on the spare;
// records the respawn and each moved item's end after the kill.
void kill_once(caf::actor_system& sys, kill_figures& out) {
  auto rt =
      actors::runtime::start(sys, config(where::host_process, true, 2000));
  if (!rt) {
    std::fprintf(stderr, "bench_hosts: %s\n", describe(rt.error()).c_str());
    std::exit(1);
  }
  auto& r = **rt;
  wait_available(r, 0);
  auto pid = r.host_pid("sim0");
  std::mutex mtx;
  std::vector<std::pair<clock_type::time_point, uint32_t>> ends;
  int n = 400;
  for (int i = 0; i < n; ++i)
    r.submit(small_item(uint64_t(i + 1)), [&](caf::expected<work_result> res) {
      std::lock_guard<std::mutex> guard{mtx};
      ends.emplace_back(clock_type::now(), res ? res->attempts : 0);
    });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  auto killed = clock_type::now();
  ::kill(pid, SIGKILL);
  while (r.host_pid("sim0") == pid || r.host_pid("sim0") == 0 ||
         !wait_available(r, 0))
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  out.respawn_ms.push_back(us_since(killed, clock_type::now()) / 1000);
  for (;;) {
    {
      std::lock_guard<std::mutex> guard{mtx};
      if (ends.size() == size_t(n))
        break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  for (auto& [t, attempts] : ends)
    if (attempts > 1)
      out.recovery_ms.push_back(us_since(killed, t) / 1000);
  r.stop();
}

} // namespace

int main(int argc, char** argv) {
  int items = 20000, runs = 3, kills = 10;
  for (int i = 1; i < argc; ++i) {
    auto arg = std::string{argv[i]};
    auto next = [&] { return i + 1 < argc ? std::atoi(argv[++i]) : 0; };
    if (arg == "--items")
      items = next();
    else if (arg == "--runs")
      runs = next();
    else if (arg == "--kills")
      kills = next();
    else {
      std::fprintf(stderr,
                   "usage: bench_hosts [--items N] [--runs N] [--kills N]\n");
      return 2;
    }
  }
  if (items <= 0 || runs <= 0 || kills <= 0) {
    std::fprintf(stderr, "bench_hosts: --items, --runs and --kills must be "
                         "positive\n");
    return 2;
  }
  // The remote host serves the same device as the node would make.
  remote_host remote;
  bool with_remote =
      start_remote(remote, config(where::node, false, 1, nullptr));
  auto cfg_all =
      config(where::host_process, false, 1, with_remote ? &remote : nullptr);
  system_config scfg{cfg_all};
  caf::actor_system sys{scfg};
  std::printf("%-22s %4s %10s %10s %12s %12s\n", "device", "run", "p50 us",
              "p99 us", "items/s", "crossing us");
  std::vector<where> modes{where::node, where::host_process};
  if (with_remote)
    modes.push_back(where::remote);
  for (int run = 0; run < runs; ++run)
    for (auto w : modes) {
      auto f = dispatch(sys, w, items, with_remote ? &remote : nullptr);
      std::printf("%-22s %4d %10.1f %10.1f %12.0f %12.1f\n", to_string(w), run,
                  f.p50_us, f.p99_us, f.items_per_s, f.crossing_us);
      std::fflush(stdout);
    }
  kill_figures k;
  for (int i = 0; i < kills; ++i)
    kill_once(sys, k);
  std::printf("\nSIGKILL of the host, %d times (400 items of 2 ms on the host "
              "and a spare):\n",
              kills);
  std::printf("  respawn to available: p50 %.1f ms, p99 %.1f ms\n",
              percentile(k.respawn_ms, 0.5), percentile(k.respawn_ms, 0.99));
  std::printf("  moved items' ends after the kill (%zu items): p50 %.1f ms, "
              "p99 %.1f ms\n",
              k.recovery_ms.size(), percentile(k.recovery_ms, 0.5),
              percentile(k.recovery_ms, 0.99));
  return 0;
}
