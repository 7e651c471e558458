// Placement benchmark: the makespan of one task set under round-robin,
// least-loaded and Cohort's balancer (and StarPU's dmda where it can run),
// as a ratio to the lower bound; and small-item throughput with and without
// dynamic batching.
//
//   bench_placement [--noise F] [--items N] [--small N] [--batching-only]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "actors/runtime.hpp"
#include "bench/placement/starpu_placement.hpp"
#include "kernels/random_data.hpp"
#include "messages/errc.hpp"
#include "messages/system_config.hpp"

namespace cohort::bench {
namespace {

using clock = std::chrono::steady_clock;

// Modeled throughput at speed 1: a 32^3 gemm takes about 2 ms, a 96^3 one
// about 54 ms, while this host computes either in well under a millisecond.
constexpr double gflops = 0.0327;

struct device_spec {
  std::string name;
  double speed;
  uint32_t streams;
  bool cpu;
};

struct task_set {
  std::vector<work_item> items;
  std::vector<placement_task> tasks;
};

double modeled_ns(const work_item& item) {
  auto c = item_cost(item);
  return std::max(c.flops, c.bytes) / gflops;
}

// Small, medium and large gemms (1 : 8 : 27 in work), shuffled.
task_set make_tasks(size_t n, double noise) {
  task_set out;
  std::mt19937 rng{2026};
  std::uniform_real_distribution<double> u{0, 1};
  uint64_t sizes[] = {32, 64, 96};
  for (size_t i = 0; i < n; ++i) {
    uint32_t kind = i % 5 < 2 ? 0 : i % 5 < 4 ? 1 : 2;
    auto s = sizes[kind];
    work_item item;
    item.id = i + 1;
    item.tenant = "bench";
    item.kernel = kernel_id::gemm;
    item.args.m = item.args.n = item.args.k = s;
    item.inputs.emplace_back(kernels::random_floats(i, s * s));
    item.inputs.emplace_back(kernels::random_floats(i + 99999, s * s));
    out.tasks.push_back({modeled_ns(item), kind, u(rng) < noise});
    out.items.push_back(std::move(item));
  }
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i)
    order[i] = i;
  std::shuffle(order.begin(), order.end(), rng);
  task_set shuffled;
  for (auto i : order) {
    shuffled.items.push_back(out.items[i]);
    shuffled.tasks.push_back(out.tasks[i]);
  }
  return shuffled;
}

// Every stream of every device busy all the time, or the longest task on
// the fastest device: no placement finishes sooner.
double lower_bound_s(const task_set& set,
                     const std::vector<device_spec>& fleet) {
  double work = 0, longest = 0, capacity = 0, fastest = 0;
  for (auto& t : set.tasks) {
    work += t.work_ns;
    longest = std::max(longest, t.work_ns);
  }
  for (auto& d : fleet) {
    capacity += d.speed * d.streams;
    fastest = std::max(fastest, d.speed);
  }
  return std::max(work / capacity, longest / fastest) / 1e9;
}

struct cohort_run {
  double makespan_s = 0;
  std::string error;
  std::string utilization;
};

pb::RuntimeConfig base_config(const std::vector<device_spec>& fleet,
                              double noise) {
  pb::RuntimeConfig cfg;
  cfg.mutable_devices()->set_cpu_workers(0);
  cfg.mutable_devices()->set_gpus(false);
  for (auto& d : fleet) {
    auto* g = cfg.mutable_devices()->add_sim_gpu();
    g->set_name(d.name);
    g->set_memory_mib(1024);
    g->set_streams(d.streams);
    g->set_speed(d.speed);
    g->set_gflops(gflops);
    g->set_gbytes_per_s(gflops);
    g->set_cpu(d.cpu);
    g->set_spike_fraction(noise);
  }
  for (auto name : {"bench", "other"}) {
    auto* t = cfg.add_tenant();
    t->set_tenant(name);
    t->add_kernels("*");
    t->add_devices("*");
    t->set_max_inflight(1000000);
  }
  cfg.set_audit_path(
      std::filesystem::temp_directory_path() /
      ("cohort-bench-placement-" + std::to_string(::getpid()) + ".log"));
  cfg.mutable_audit()->set_fsync(pb::FSYNC_INTERVAL);
  return cfg;
}

// Submits every item at once and waits for every end.
std::pair<double, uint64_t> submit_and_wait(caf::actor_system& sys,
                                            actors::runtime& rt,
                                            std::vector<work_item> items) {
  caf::scoped_actor self{sys};
  auto sink = caf::actor_cast<actors::client_sink>(self);
  auto n = items.size();
  auto start = clock::now();
  for (auto& item : items)
    self->send(rt.entry(), submit_atom::value, std::move(item), sink);
  uint64_t failed = 0;
  for (size_t got = 0; got < n;)
    self->receive([&](result_atom, work_result&) { ++got; },
                  [&](failed_atom, uint64_t, caf::error&) {
                    ++got;
                    ++failed;
                  });
  return {std::chrono::duration<double>(clock::now() - start).count(), failed};
}

cohort_run run_cohort(const task_set& set,
                      const std::vector<device_spec>& fleet, double noise,
                      pb::PlacementPolicy policy) {
  cohort_run out;
  system_config sys_cfg;
  caf::actor_system sys{sys_cfg};
  auto cfg = base_config(fleet, noise);
  cfg.mutable_placement()->set_policy(policy);
  auto rt = actors::runtime::start(sys, cfg);
  if (!rt) {
    out.error = describe(rt.error());
    return out;
  }
  auto [took, failed] = submit_and_wait(sys, **rt, set.items);
  if (failed > 0)
    out.error = std::to_string(failed) + " items failed";
  out.makespan_s = took;
  if (auto stats = (*rt)->placement_stats())
    for (auto& d : stats->devices) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%s%s %.0f%%",
                    out.utilization.empty() ? "" : ", ", d.name.c_str(),
                    100 * d.utilization);
      out.utilization += buf;
    }
  (*rt)->stop();
  return out;
}

void print_row(const std::string& system, double makespan_s, double bound_s,
               const std::string& error, const std::string& extra = {}) {
  if (!error.empty()) {
    std::printf("  %-34s %s\n", system.c_str(), error.c_str());
    return;
  }
  std::printf("  %-34s %9.3f s %8.3fx   %s\n", system.c_str(), makespan_s,
              makespan_s / bound_s, extra.c_str());
}

void makespan_table(const std::string& title,
                    const std::vector<device_spec>& fleet, size_t n,
                    double noise, bool starpu) {
  auto set = make_tasks(n, 0);
  auto bound = lower_bound_s(set, fleet);
  std::printf("\n%s, %zu gemms, %s\n", title.c_str(), n,
              noise > 0 ? "timing spikes (10x) on this fraction of runs"
                        : "no timing noise");
  if (noise > 0)
    std::printf("  noise fraction %.2f\n", noise);
  std::printf("  %-34s %11s %9s\n", "placement", "makespan", "/ bound");
  std::printf("  %-34s %9.3f s %8.3fx\n", "lower bound", bound, 1.0);
  struct named {
    const char* name;
    pb::PlacementPolicy policy;
  };
  for (auto [name, policy] :
       {named{"round-robin", pb::ROUND_ROBIN},
        named{"least-loaded", pb::LEAST_LOADED},
        named{"cohort (earliest completion)", pb::EARLIEST_COMPLETION}}) {
    auto r = run_cohort(set, fleet, noise, policy);
    print_row(name, r.makespan_s, bound, r.error, r.utilization);
  }
  if (!starpu)
    return;
  std::vector<double> speeds;
  for (auto& d : fleet)
    speeds.push_back(d.speed);
  // StarPU's noise makes the run really longer (it measures its own tasks):
  // its bound counts the spiked runs.
  auto noisy = make_tasks(n, noise);
  double starpu_bound = bound;
  if (noise > 0) {
    task_set spiked = noisy;
    for (auto& t : spiked.tasks)
      if (t.spike)
        t.work_ns *= 10;
    starpu_bound = lower_bound_s(spiked, fleet);
  }
  for (auto model : {"history", "exact"}) {
    auto r = run_starpu_placement(noisy.tasks, speeds, 10.0, model);
    print_row(r.system, r.makespan_s, starpu_bound, r.error,
              noise > 0 ? "(bound with spikes: " +
                              std::to_string(starpu_bound).substr(0, 5) + " s)"
                        : "");
  }
}

// Many small axpy items from two tenants, with and without batching, on a
// simulated GPU whose launch costs `launch_us` (4 streams).
void batching_table(size_t n, uint32_t launch_us) {
  std::printf("\nsmall items: %zu axpy of 256 elements, 2 tenants, one "
              "simulated GPU (4 streams, %u us per launch)\n",
              n, launch_us);
  std::printf("  %-34s %12s %10s %12s\n", "", "items/s", "launches",
              "per item");
  host_buffer x{kernels::random_floats(1, 256)};
  host_buffer y{kernels::random_floats(2, 256)};
  for (bool batching : {false, true}) {
    system_config sys_cfg;
    caf::actor_system sys{sys_cfg};
    auto cfg = base_config({{"sim0", 1, 4, false}}, 0);
    // Default modeled throughput: a launch is dominated by its fixed cost.
    auto* g = cfg.mutable_devices()->mutable_sim_gpu(0);
    g->set_gflops(0);
    g->set_gbytes_per_s(0);
    g->set_launch_latency_us(launch_us);
    if (batching) {
      auto* rule = cfg.mutable_placement()->add_batch();
      rule->set_kernel("axpy");
      rule->set_preferred_batch(64);
      rule->set_max_delay_us(500);
    }
    auto rt = actors::runtime::start(sys, cfg);
    if (!rt) {
      std::printf("  %s\n", describe(rt.error()).c_str());
      return;
    }
    std::vector<work_item> items;
    for (size_t i = 0; i < n; ++i) {
      work_item item;
      item.id = i + 1;
      item.tenant = i % 2 ? "bench" : "other";
      item.kernel = kernel_id::axpy;
      item.args.alpha = 2.0f;
      item.inputs = {x, y};
      items.push_back(std::move(item));
    }
    auto [took, failed] = submit_and_wait(sys, **rt, std::move(items));
    uint64_t launches = 0;
    if (auto stats = (*rt)->placement_stats())
      for (auto& d : stats->devices)
        launches += d.launches;
    std::printf("  %-34s %12.0f %10llu %9.1f us%s\n",
                batching ? "batched (up to 64, 500 us)" : "one launch per item",
                double(n) / took, static_cast<unsigned long long>(launches),
                took / double(n) * 1e6,
                failed ? (" (" + std::to_string(failed) + " failed)").c_str()
                       : "");
    (*rt)->stop();
  }
}

} // namespace
} // namespace cohort::bench

int main(int argc, char** argv) {
  using namespace cohort::bench;
  double noise = 0.05;
  size_t n = 300;
  size_t small = 20000;
  for (int i = 1; i < argc; ++i) {
    auto arg = [&](const char* name) {
      return std::strcmp(argv[i], name) == 0 && i + 1 < argc;
    };
    if (arg("--noise"))
      noise = std::atof(argv[++i]);
    else if (arg("--items"))
      n = size_t(std::atol(argv[++i]));
    else if (arg("--small"))
      small = size_t(std::atol(argv[++i]));
    else if (std::strcmp(argv[i], "--batching-only") == 0)
      n = 0;
    else {
      std::fprintf(stderr, "usage: bench_placement [--noise F] [--items N] "
                           "[--small N] [--batching-only]\n");
      return 2;
    }
  }
  if (noise < 0 || noise > 1) {
    std::fprintf(stderr, "bench_placement: --items must be positive and "
                         "--noise in 0..1\n");
    return 2;
  }
  std::vector<device_spec> issue_fleet{
      {"sim0", 1, 2, false},     {"sim1", 1, 2, false},
      {"sim2", 2, 2, false},     {"sim3", 4, 2, false},
      {"simcpu0", 0.5, 1, true}, {"simcpu1", 0.5, 1, true}};
  // StarPU (Debian's 1.3) runs at most 4 CPU workers: its fleet is 4
  // single-stream devices of speeds 1, 1, 2, 4.
  std::vector<device_spec> starpu_fleet{{"sim0", 1, 1, false},
                                        {"sim1", 1, 1, false},
                                        {"sim2", 2, 1, false},
                                        {"sim3", 4, 1, false}};
  std::printf("Cohort placement benchmark (simulated devices: modeled time, "
              "labelled simulated)\n");
  if (n > 0) {
    makespan_table("4 simulated GPUs (speeds 1,1,2,4; 2 streams) + 2 simulated "
                   "CPU workers (0.5)",
                   issue_fleet, n, 0, false);
    makespan_table("the same fleet", issue_fleet, n, noise, false);
    makespan_table("4 devices of speeds 1,1,2,4 (1 stream), with StarPU",
                   starpu_fleet, n, 0, true);
    makespan_table("the same 4 devices", starpu_fleet, n, noise, true);
  }
  // A launch as cheap as this host's dispatch, and one as costly as a
  // small launch with its copies and synchronization on a real GPU.
  batching_table(small, 10);
  batching_table(small, 100);
  return 0;
}
