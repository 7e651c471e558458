// The built-in kernels' definitions: the functions registry.cpp registers
// for each of them, like an application's kernel_def. Internal to kernels/.
#pragma once

#include <string>

#include "kernels/catalog.hpp"

namespace cohort::kernels::builtin {

/// The built-in kernels, in catalog order.
inline constexpr kernel_id all[] = {
    kernel_id::axpy,           kernel_id::dot,
    kernel_id::nrm2,           kernel_id::reduce_sum,
    kernel_id::inclusive_scan, kernel_id::gemv,
    kernel_id::gemm,           kernel_id::topk_cosine,
};

/// The kernel's name.
std::string_view name(kernel_id id);

/// Inputs it takes.
size_t input_count(kernel_id id);

/// kernel_args fields it reads.
std::vector<std::string> scalars(kernel_id id);

/// Checks lengths (their count is right) and arguments.
std::string check(kernel_id id, const kernel_args& args, input_lengths inputs);

/// Output elements of valid inputs.
uint64_t output_elements(kernel_id id, const kernel_args& args,
                         input_lengths inputs);

/// Modeled work.
kernel_cost cost(kernel_id id, const kernel_args& args, input_lengths inputs);

/// The optimized CPU implementation.
kernel_output run_cpu(kernel_id id, const kernel_args& args,
                      input_views inputs);

/// The double-precision reference.
kernel_output run_reference(kernel_id id, const kernel_args& args,
                            input_views inputs);

/// Compares with the reference within the kernel's rounding bound.
std::string compare(kernel_id id, const kernel_args& args, input_views inputs,
                    const kernel_output& got, const kernel_output& want);

} // namespace cohort::kernels::builtin
