// Which kernel to run and its scalar arguments. Split out of catalog.hpp and
// kept to C++17 so that hipcc, which builds the HIP kernels as C++17 (rocPRIM
// needs it), can include it; catalog.hpp needs C++20 (<span>).
#pragma once

#include <cstdint>

namespace cohort::kernels {

/// A kernel of the registry (kernels/registry.hpp). The named values are the
/// built-in catalog and match `cohort.pb.Kernel`; kernels registered at run
/// time get the next free values, which hold only in their process.
enum class kernel_id : uint8_t {
  axpy = 1,
  dot = 2,
  nrm2 = 3,
  reduce_sum = 4,
  inclusive_scan = 5,
  gemv = 6,
  gemm = 7,
  topk_cosine = 8,
};

/// The built-in kernels, in catalog order (registered_kernels() lists them
/// all).
inline constexpr kernel_id all_kernels[] = {
    kernel_id::axpy,           kernel_id::dot,
    kernel_id::nrm2,           kernel_id::reduce_sum,
    kernel_id::inclusive_scan, kernel_id::gemv,
    kernel_id::gemm,           kernel_id::topk_cosine,
};

/// One past the largest kernel_id value: the size of tables indexed by it.
inline constexpr unsigned kernel_id_limit = 256;

/// Scalar and shape arguments; which fields a kernel reads is in
/// docs/kernels.md.
struct kernel_args {
  float alpha = 1.0f;
  uint64_t m = 0;
  uint64_t n = 0;
  uint64_t k = 0;
  uint32_t top_k = 0;
};

} // namespace cohort::kernels
