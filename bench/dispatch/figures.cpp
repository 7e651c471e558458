// Figures shared by the dispatch and fleet benchmarks.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

#include "bench/dispatch/dispatch.hpp"

namespace cohort::bench {

double percentile(std::vector<double>& samples, double p) {
  if (samples.empty())
    return 0;
  std::sort(samples.begin(), samples.end());
  auto idx = size_t(p / 100.0 * double(samples.size() - 1) + 0.5);
  return samples[std::min(idx, samples.size() - 1)];
}

double load_average() {
  double load = -1;
  if (auto* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(f, "%lf", &load) != 1)
      load = -1;
    std::fclose(f);
  }
  return load;
}

std::string spread(std::vector<double> v, int digits) {
  std::sort(v.begin(), v.end());
  char buf[128];
  std::snprintf(buf, sizeof(buf), "%.*f / %.*f / %.*f", digits, v.front(),
                digits, v[v.size() / 2], digits, v.back());
  return buf;
}

dispatch_figures machine_floor(double work_us, int samples) {
  using clock = std::chrono::steady_clock;
  dispatch_figures out;
  out.system = "machine floor";
  auto work = std::chrono::nanoseconds{int64_t(std::max(0.0, work_us) * 1e3)};
  // Odd: the first thread's turn is over; even: the second thread's.
  std::atomic<int64_t> turn{0};
  std::thread second{[&] {
    for (int64_t seen = 0;;) {
      int64_t now;
      while ((now = turn.load(std::memory_order_acquire)) == seen)
        ;
      if (now < 0)
        return;
      auto start = clock::now();
      while (clock::now() - start < work)
        ;
      seen = now + 1;
      turn.store(seen, std::memory_order_release);
    }
  }};
  std::vector<double> lat;
  lat.reserve(size_t(samples));
  for (int64_t i = 0; i < samples; ++i) {
    auto t0 = clock::now();
    turn.store(2 * i + 1, std::memory_order_release);
    while (turn.load(std::memory_order_acquire) != 2 * i + 2)
      ;
    lat.push_back(
        std::chrono::duration<double, std::micro>(clock::now() - t0).count());
  }
  turn.store(-1, std::memory_order_release);
  second.join();
  out.p50_us = percentile(lat, 50);
  out.p99_us = percentile(lat, 99);
  return out;
}

} // namespace cohort::bench
