// bench/fleet: dispatch throughput as the fleet grows. The dispatch
// benchmark's workload (sums of 1,024 floats, quota and audit on, the time
// including the audit log's catching up) on 2 CPU workers plus simulated
// GPUs, at 4, 16 and 64 devices; each size's runs interleaved with the
// others'. Placement's cost per item should not grow with the fleet: the
// ratio to the smallest fleet says how far it does.
//
//   bench_fleet [--devices 4,16,64] [--tasks N] [--window N] [--runs N]
//               [--samples N]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "bench/dispatch/dispatch.hpp"

int main(int argc, char** argv) {
  using namespace cohort::bench;
  int tasks = 100000, window = 4096, runs = 3, samples = 200, cpu_workers = 2;
  bool zero_on_free = true;
  std::vector<int> sizes{4, 16, 64};
  for (int i = 1; i < argc; ++i) {
    auto arg = std::string{argv[i]};
    auto next = [&] { return i + 1 < argc ? argv[++i] : ""; };
    if (arg == "--tasks") {
      tasks = std::atoi(next());
    } else if (arg == "--window") {
      window = std::atoi(next());
    } else if (arg == "--runs") {
      runs = std::atoi(next());
    } else if (arg == "--samples") {
      samples = std::atoi(next());
    } else if (arg == "--cpu-workers") {
      cpu_workers = std::atoi(next());
    } else if (arg == "--no-zero-on-free") {
      zero_on_free = false;
    } else if (arg == "--devices") {
      sizes.clear();
      std::string list = next();
      for (size_t pos = 0; pos < list.size();) {
        auto comma = list.find(',', pos);
        sizes.push_back(std::atoi(list.substr(pos, comma - pos).c_str()));
        pos = comma == std::string::npos ? list.size() : comma + 1;
      }
    } else {
      std::fprintf(stderr, "usage: bench_fleet [--devices 4,16,64] [--tasks "
                           "N] [--window N] [--runs N] [--samples N] "
                           "[--cpu-workers N] [--no-zero-on-free]\n");
      return 2;
    }
  }
  if (tasks <= 0 || window <= 0 || runs <= 0 || samples <= 0 ||
      cpu_workers < 0 || sizes.empty()) {
    std::fprintf(stderr, "bench_fleet: counts must be positive "
                         "(--cpu-workers: 0 or more)\n");
    return 2;
  }
  for (int n : sizes)
    if (n < std::max(cpu_workers, 1) || n > 64) {
      std::fprintf(stderr,
                   "bench_fleet: a fleet has %d to 64 devices (%d CPU "
                   "workers and simulated GPUs)\n",
                   std::max(cpu_workers, 1), cpu_workers);
      return 2;
    }
  std::printf("fleet: %d tasks (sum of 1024 floats) per run, window %d, %d "
              "CPU workers + SIMULATED GPUs (speeds 1-4, 2 streams); %d "
              "interleaved run(s) per size; pools zero freed blocks: %s; "
              "load average %.2f\n\n",
              tasks, window, cpu_workers, runs, zero_on_free ? "yes" : "no",
              load_average());
  std::printf("%-4s %8s %12s %10s %10s %8s\n", "run", "devices", "tasks/s",
              "p50 us", "p99 us", "on sim");
  std::map<int, std::vector<double>> tput;
  int bad = 0;
  for (int run = 1; run <= runs; ++run)
    for (int n : sizes) {
      auto f =
          run_cohort(tasks, {cpu_workers, n - cpu_workers, {}, 0, zero_on_free},
                     window, samples);
      if (!f.error.empty()) {
        std::printf("%-4d %8d failed: %s\n", run, n, f.error.c_str());
        ++bad;
        continue;
      }
      std::printf("%-4d %8d %12.0f %10.1f %10.1f %7.0f%%\n", run, n,
                  f.tasks_per_s, f.p50_us, f.p99_us, 100 * f.simulated_share);
      tput[n].push_back(f.tasks_per_s);
    }
  std::printf("\ntasks/s over %d run(s): min / median / max, and the median "
              "against the %d-device fleet's\n",
              runs, sizes.front());
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  double base = tput.count(sizes.front()) ? median(tput[sizes.front()]) : 0;
  for (int n : sizes)
    if (!tput[n].empty())
      std::printf("%3d devices: %s  (%.2fx)\n", n, spread(tput[n]).c_str(),
                  base > 0 ? median(tput[n]) / base : 0.0);
  std::printf("load average at the end: %.2f\n", load_average());
  return bad == 0 ? 0 : 1;
}
