// Vector kernels: axpy, dot, nrm2, reduce_sum, inclusive_scan.
#pragma once

#include <span>

namespace cohort::kernels::cpu {

/// out[i] = alpha * x[i] + y[i].
void axpy(float alpha, std::span<const float> x, std::span<const float> y,
          std::span<float> out);
/// Sum of x[i] * y[i].
float dot(std::span<const float> x, std::span<const float> y);
/// Euclidean norm of x, scaled to avoid overflow.
float nrm2(std::span<const float> x);
/// Sum of x[i].
float reduce_sum(std::span<const float> x);
/// out[i] = x[0] + ... + x[i].
void inclusive_scan(std::span<const float> x, std::span<float> out);

} // namespace cohort::kernels::cpu
