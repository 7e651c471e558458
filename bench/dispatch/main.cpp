// bench/dispatch: tasks per second and one-in-flight latency of 100,000
// independent sums of 1,024 floats, Cohort against StarPU in the same
// process, the systems' runs interleaved (--runs rounds of each).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "bench/dispatch/dispatch.hpp"

namespace {

std::vector<std::string> split_list(const std::string& list) {
  std::vector<std::string> out;
  for (size_t pos = 0; pos <= list.size();) {
    auto comma = list.find(',', pos);
    if (comma != pos && pos < list.size())
      out.push_back(list.substr(pos, comma - pos));
    pos = comma == std::string::npos ? list.size() + 1 : comma + 1;
  }
  return out;
}

} // namespace

int main(int argc, char** argv) {
  using namespace cohort::bench;
  int tasks = 100000, workers = 2, window = 4096, samples = 2000, runs = 3;
  int batch = 0;
  bool public_api = true;
  std::string scheduler;
  std::vector<std::string> policies{"lws", "eager", "dmda"};
  for (int i = 1; i < argc; ++i) {
    auto arg = std::string{argv[i]};
    auto next = [&] { return i + 1 < argc ? argv[++i] : ""; };
    if (arg == "--tasks")
      tasks = std::atoi(next());
    else if (arg == "--workers")
      workers = std::atoi(next());
    else if (arg == "--window")
      window = std::atoi(next());
    else if (arg == "--samples")
      samples = std::atoi(next());
    else if (arg == "--runs")
      runs = std::atoi(next());
    else if (arg == "--scheduler")
      scheduler = next();
    else if (arg == "--batch")
      batch = std::atoi(next());
    else if (arg == "--policies")
      policies = split_list(next());
    else if (arg == "--no-public")
      public_api = false;
    else {
      std::fprintf(stderr, "usage: bench_dispatch [--tasks N] [--workers N] "
                           "[--window N] [--samples N] [--runs N] "
                           "[--scheduler K=V,...] [--batch N] "
                           "[--policies lws,eager,dmda] [--no-public]\n");
      return 2;
    }
  }
  if (tasks <= 0 || workers <= 0 || window <= 0 || samples <= 0 || runs <= 0 ||
      batch < 0) {
    std::fprintf(stderr, "bench_dispatch: counts must be positive\n");
    return 2;
  }
  std::printf("dispatch: %d tasks (sum of 1024 floats), %d CPU workers, "
              "window %d; latency over %d one-at-a-time tasks; %d "
              "interleaved run(s) of each system\n"
              "allocator (both systems, one process): %s; load average "
              "%.2f\n\n",
              tasks, workers, window, samples, runs,
#ifdef COHORT_JEMALLOC
              "jemalloc",
#else
              "glibc malloc",
#endif
              load_average());
  std::printf("%-4s %-22s %12s %14s %10s %10s\n", "run", "system", "tasks/s",
              "vs starpu lws", "p50 us", "p99 us");
  int bad = 0;
  // Per system, the figures of every run; and Cohort's ratio per run.
  std::map<std::string, std::vector<dispatch_figures>> all;
  std::vector<std::string> order;
  std::vector<double> ratios;
  for (int run = 1; run <= runs; ++run) {
    std::vector<dispatch_figures> rows;
    rows.push_back(run_cohort(tasks, {workers, 0, scheduler}, window, samples));
    if (batch > 0)
      rows.push_back(
          run_cohort(tasks, {workers, 0, scheduler, batch}, window, samples));
    if (public_api) {
      rows.push_back(run_public(tasks, workers, window, samples, false));
      rows.push_back(run_public(tasks, workers, window, samples, true));
      rows.push_back(run_public(tasks, workers, window, samples, false, true));
    }
    for (auto& p : policies)
      rows.push_back(run_starpu(p, tasks, workers, samples));
    // The machine's floor at Cohort's median: the same work in one spin.
    if (rows.front().error.empty())
      rows.push_back(machine_floor(rows.front().p50_us, samples));
    double lws = 0;
    for (auto& r : rows)
      if (r.system == "starpu lws" && r.error.empty())
        lws = r.tasks_per_s;
    for (auto& r : rows) {
      if (!r.error.empty()) {
        std::printf("%-4d %-22s failed: %s\n", run, r.system.c_str(),
                    r.error.c_str());
        ++bad;
        continue;
      }
      if (r.tasks_per_s > 0)
        std::printf("%-4d %-22s %12.0f %13.2fx %10.1f %10.1f\n", run,
                    r.system.c_str(), r.tasks_per_s,
                    lws > 0 ? r.tasks_per_s / lws : 0.0, r.p50_us, r.p99_us);
      else
        std::printf("%-4d %-22s %12s %14s %10.1f %10.1f\n", run,
                    r.system.c_str(), "-", "-", r.p50_us, r.p99_us);
      if (all.count(r.system) == 0)
        order.push_back(r.system);
      all[r.system].push_back(r);
      if (lws > 0 && &r == &rows.front())
        ratios.push_back(r.tasks_per_s / lws);
    }
  }
  std::printf("\nspread over %d run(s): min / median / max\n", runs);
  for (auto& name : order) {
    std::vector<double> tput, p50, p99;
    for (auto& r : all[name]) {
      tput.push_back(r.tasks_per_s);
      p50.push_back(r.p50_us);
      p99.push_back(r.p99_us);
    }
    if (tput.front() > 0)
      std::printf("%-22s tasks/s %s; p50 us %s; p99 us %s\n", name.c_str(),
                  spread(tput).c_str(), spread(p50, 1).c_str(),
                  spread(p99, 1).c_str());
    else
      std::printf("%-22s p50 us %s; p99 us %s\n", name.c_str(),
                  spread(p50, 1).c_str(), spread(p99, 1).c_str());
  }
  if (!ratios.empty())
    std::printf("cohort / starpu lws: %s\n", spread(ratios, 2).c_str());
  std::printf("load average at the end: %.2f\n", load_average());
  return bad == 0 ? 0 : 1;
}
