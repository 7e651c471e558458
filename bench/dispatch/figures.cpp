// Figures shared by the dispatch and fleet benchmarks.
#include <algorithm>
#include <cstdio>

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

} // namespace cohort::bench
