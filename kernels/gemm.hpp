// Dense matrix kernels over row-major float matrices.
#pragma once

#include <cstdint>
#include <span>

namespace cohort::kernels::cpu {

/// y (m) = A (m x n) * x (n).
void gemv(uint64_t m, uint64_t n, std::span<const float> a,
          std::span<const float> x, std::span<float> y);
/// C (m x n) = A (m x k) * B (k x n), through OpenBLAS.
void gemm(uint64_t m, uint64_t n, uint64_t k, std::span<const float> a,
          std::span<const float> b, std::span<float> c);

} // namespace cohort::kernels::cpu
