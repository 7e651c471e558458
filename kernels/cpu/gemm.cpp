// Dense kernels on the CPU through OpenBLAS.
#include "kernels/gemm.hpp"

#include <cblas.h>

namespace cohort::kernels::cpu {

void gemv(uint64_t m, uint64_t n, std::span<const float> a,
          std::span<const float> x, std::span<float> y) {
  if (m == 0)
    return;
  if (n == 0) {
    for (auto& v : y)
      v = 0;
    return;
  }
  cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<blasint>(m),
              static_cast<blasint>(n), 1.0f, a.data(), static_cast<blasint>(n),
              x.data(), 1, 0.0f, y.data(), 1);
}

void gemm(uint64_t m, uint64_t n, uint64_t k, std::span<const float> a,
          std::span<const float> b, std::span<float> c) {
  if (m == 0 || n == 0)
    return;
  if (k == 0) {
    for (auto& v : c)
      v = 0;
    return;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans,
              static_cast<blasint>(m), static_cast<blasint>(n),
              static_cast<blasint>(k), 1.0f, a.data(), static_cast<blasint>(k),
              b.data(), static_cast<blasint>(n), 0.0f, c.data(),
              static_cast<blasint>(n));
}

} // namespace cohort::kernels::cpu
