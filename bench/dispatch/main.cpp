// bench/dispatch: tasks per second and one-in-flight latency of 100,000
// independent sums of 1,024 floats, Cohort against StarPU in the same run.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench/dispatch/dispatch.hpp"

namespace cohort::bench {

double percentile(std::vector<double>& samples, double p) {
  if (samples.empty())
    return 0;
  std::sort(samples.begin(), samples.end());
  auto idx = size_t(p / 100.0 * double(samples.size() - 1) + 0.5);
  return samples[std::min(idx, samples.size() - 1)];
}

} // namespace cohort::bench

int main(int argc, char** argv) {
  using namespace cohort::bench;
  int tasks = 100000, workers = 2, window = 4096, samples = 2000;
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
    else if (arg == "--policies") {
      policies.clear();
      std::string list = next();
      for (size_t pos = 0; pos <= list.size();) {
        auto comma = list.find(',', pos);
        if (comma != pos && pos < list.size())
          policies.push_back(list.substr(pos, comma - pos));
        pos = comma == std::string::npos ? list.size() + 1 : comma + 1;
      }
    } else {
      std::fprintf(stderr,
                   "usage: bench_dispatch [--tasks N] [--workers N] "
                   "[--window N] [--samples N] [--policies lws,eager,dmda]\n");
      return 2;
    }
  }
  if (tasks <= 0 || workers <= 0 || window <= 0 || samples <= 0) {
    std::fprintf(stderr, "bench_dispatch: counts must be positive\n");
    return 2;
  }
  std::printf("dispatch: %d tasks (sum of 1024 floats), %d CPU workers, "
              "window %d; latency over %d one-at-a-time tasks\n"
              "allocator (both systems, one process): %s\n\n",
              tasks, workers, window, samples,
#ifdef COHORT_JEMALLOC
              "jemalloc"
#else
              "glibc malloc"
#endif
  );
  std::vector<dispatch_figures> rows;
  rows.push_back(run_cohort(tasks, workers, window, samples));
  for (auto& p : policies)
    rows.push_back(run_starpu(p, tasks, workers, samples));
  double lws = 0;
  for (auto& r : rows)
    if (r.system == "starpu lws" && r.error.empty())
      lws = r.tasks_per_s;
  std::printf("%-22s %12s %14s %10s %10s\n", "system", "tasks/s",
              "vs starpu lws", "p50 us", "p99 us");
  int bad = 0;
  for (auto& r : rows) {
    if (!r.error.empty()) {
      std::printf("%-22s failed: %s\n", r.system.c_str(), r.error.c_str());
      ++bad;
      continue;
    }
    std::printf("%-22s %12.0f %13.2fx %10.1f %10.1f\n", r.system.c_str(),
                r.tasks_per_s, lws > 0 ? r.tasks_per_s / lws : 0.0, r.p50_us,
                r.p99_us);
  }
  return bad == 0 ? 0 : 1;
}
