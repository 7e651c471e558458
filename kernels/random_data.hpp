// Reproducible input data for pipelines, tests and benchmarks.
#pragma once

#include <cstdint>
#include <vector>

namespace cohort::kernels {

/// `n` floats uniform in [-1, 1) on a grid of 2^-23, the same for the same
/// seed everywhere: element i is drawn from SplitMix64 at position i of the
/// seed's sequence, which fixes every value whatever the compiler and its
/// standard library (std::uniform_real_distribution's values are the
/// library's choice). It is also cheap: libstdc++'s distribution over a
/// 64-bit Mersenne Twister took a logarithm per value under clang, and
/// filling inputs was two fifths of the heaviest actors tests' time under
/// the sanitizers.
inline std::vector<float> random_floats(uint64_t seed, size_t n) {
  std::vector<float> out(n);
  uint64_t state = seed;
  for (auto& x : out) {
    state += 0x9e3779b97f4a7c15ull;
    uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    // The top 24 bits, 0 .. 2^24 - 1, onto -1 .. 1 - 2^-23: exact in a float.
    x = float(int64_t(z >> 40) - (int64_t(1) << 23)) * 0x1p-23f;
  }
  return out;
}

} // namespace cohort::kernels
