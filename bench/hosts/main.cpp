// bench/hosts: a simulated GPU in a device host process against the same
// device in the node's process (docs/device-hosts.md). Reports, each over
// the runs, interleaved:
//   - one-at-a-time latency of a small item (median and p99, microseconds);
//   - throughput of a batch of small items (items per second);
//   - respawn: from a SIGKILL of the host to the device available again;
//   - recovery: from a SIGKILL under load to the end of each item that was
//     moved off the killed host (median and p99).
//
//   bench_hosts [--items N] [--runs N] [--kills N]
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

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

// One simulated GPU named sim0 (in a host process when `hosted`), and for
// the kill runs a second one in the node's process to take the moved work.
pb::RuntimeConfig config(bool hosted, bool with_spare, uint32_t latency_us) {
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
  add("sim0", hosted);
  if (with_spare)
    add("spare", false);
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
};

dispatch_figures dispatch(caf::actor_system& sys, bool hosted, int items) {
  auto rt = actors::runtime::start(sys, config(hosted, false, 1));
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
  auto rt = actors::runtime::start(sys, config(true, true, 2000));
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
    r.submit(small_item(uint64_t(i + 1)),
             [&](caf::expected<work_result> res) {
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
  auto cfg_hosted = config(true, false, 1);
  system_config scfg{cfg_hosted};
  caf::actor_system sys{scfg};
  std::printf("%-22s %4s %10s %10s %12s\n", "device", "run", "p50 us",
              "p99 us", "items/s");
  for (int run = 0; run < runs; ++run)
    for (bool hosted : {false, true}) {
      auto f = dispatch(sys, hosted, items);
      std::printf("%-22s %4d %10.1f %10.1f %12.0f\n",
                  hosted ? "sim0 in a host process" : "sim0 in the node", run,
                  f.p50_us, f.p99_us, f.items_per_s);
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
