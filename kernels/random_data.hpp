// Reproducible input data for pipelines, tests and benchmarks.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace cohort::kernels {

/// `n` floats uniform in [-1, 1), the same for the same seed everywhere.
inline std::vector<float> random_floats(uint64_t seed, size_t n) {
  std::mt19937_64 rng{seed};
  std::uniform_real_distribution<float> dist{-1.0f, 1.0f};
  std::vector<float> out(n);
  for (auto& x : out)
    x = dist(rng);
  return out;
}

} // namespace cohort::kernels
