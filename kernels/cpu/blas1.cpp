// Vector kernels on the CPU. Reductions accumulate in double over four
// independent lanes: accurate to the last float bit for the sizes we run, and
// the lanes let the compiler pipeline the adds.
#include "kernels/blas1.hpp"

#include <cmath>
#include <cstddef>

namespace cohort::kernels::cpu {

void axpy(float alpha, std::span<const float> x, std::span<const float> y,
          std::span<float> out) {
  const float* xs = x.data();
  const float* ys = y.data();
  float* os = out.data();
  const size_t n = x.size();
  for (size_t i = 0; i < n; ++i)
    os[i] = alpha * xs[i] + ys[i];
}

namespace {

template <class Term> double lane_sum(size_t n, Term term) {
  double acc[4] = {0, 0, 0, 0};
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    acc[0] += term(i);
    acc[1] += term(i + 1);
    acc[2] += term(i + 2);
    acc[3] += term(i + 3);
  }
  for (; i < n; ++i)
    acc[0] += term(i);
  return (acc[0] + acc[1]) + (acc[2] + acc[3]);
}

} // namespace

float dot(std::span<const float> x, std::span<const float> y) {
  const float* xs = x.data();
  const float* ys = y.data();
  return static_cast<float>(lane_sum(
      x.size(), [=](size_t i) { return static_cast<double>(xs[i]) * ys[i]; }));
}

float nrm2(std::span<const float> x) {
  const float* xs = x.data();
  // Squares of floats cannot overflow a double, so no scaling pass is needed.
  return static_cast<float>(std::sqrt(lane_sum(
      x.size(), [=](size_t i) { return static_cast<double>(xs[i]) * xs[i]; })));
}

float reduce_sum(std::span<const float> x) {
  const float* xs = x.data();
  return static_cast<float>(
      lane_sum(x.size(), [=](size_t i) { return static_cast<double>(xs[i]); }));
}

void inclusive_scan(std::span<const float> x, std::span<float> out) {
  double running = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    running += x[i];
    out[i] = static_cast<float>(running);
  }
}

} // namespace cohort::kernels::cpu
