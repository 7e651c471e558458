// The kernel catalog: names, argument validation, cost and dispatch to the CPU
// implementations. Plain C++ (no CAF, no protobuf) so every backend can use it.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/kernel_args.hpp"
#include "kernels/small_vector.hpp"

namespace cohort::kernels {

/// Read-only views of a call's input buffers.
using input_views = std::span<const std::span<const float>>;

/// Element counts of a call's inputs: enough to check and size a call whose
/// inputs are not on the host (a chained stage's input on a device).
using input_lengths = std::span<const uint64_t>;

/// Element counts of one call's inputs, inline for up to 8 (no allocation).
using input_shape = small_vector<uint64_t, 8>;

/// The element counts of `inputs`.
input_shape lengths(input_views inputs);

/// What a kernel produces: values, and row indices for top-k.
struct kernel_output {
  std::vector<float> values;
  std::vector<int64_t> indices;
};

/// Modeled amount of work of one call, used by simulated devices and placement.
struct kernel_cost {
  double flops = 0;
  double bytes = 0;
};

/// Returns the kernel's name ("axpy", ...), or "unknown" for a value outside
/// the catalog.
std::string_view name(kernel_id id);

/// Returns true if `raw` names a kernel of the catalog.
bool is_known(uint8_t raw);

/// Parses a kernel name; nullopt when the catalog has no such kernel.
std::optional<kernel_id> parse_kernel(std::string_view name);

/// Most float values one item's output may have (4 GiB): larger outputs are
/// refused before anything is allocated.
inline constexpr uint64_t max_output_elements = uint64_t{1} << 30;

/// Checks inputs and arguments (shapes, a finite alpha, an output of at most
/// max_output_elements); returns an empty string when valid, otherwise a
/// message naming the kernel and the mismatch.
std::string validate(kernel_id id, const kernel_args& args, input_views inputs);
std::string validate(kernel_id id, const kernel_args& args,
                     input_lengths inputs);

/// Float values of the kernel's output (valid arguments only).
uint64_t output_elements(kernel_id id, const kernel_args& args,
                         input_lengths inputs);

/// Number of input buffers the kernel takes.
size_t input_count(kernel_id id);

/// Bytes the kernel's output needs (valid arguments only).
uint64_t output_bytes(kernel_id id, const kernel_args& args,
                      input_views inputs);
uint64_t output_bytes(kernel_id id, const kernel_args& args,
                      input_lengths inputs);

/// Modeled work of a call (valid arguments only).
kernel_cost cost(kernel_id id, const kernel_args& args, input_views inputs);
kernel_cost cost(kernel_id id, const kernel_args& args, input_lengths inputs);

/// Runs the optimized CPU implementation. Arguments must have been validated.
kernel_output run_cpu(kernel_id id, const kernel_args& args,
                      input_views inputs);

/// Runs the naive reference implementation (double accumulation).
kernel_output run_reference(kernel_id id, const kernel_args& args,
                            input_views inputs);

/// Compares a result against the reference within the kernel's tolerance;
/// returns an empty string when they agree, otherwise what differs.
std::string compare(kernel_id id, const kernel_args& args, input_views inputs,
                    const kernel_output& got, const kernel_output& want);

/// Limits the CPU kernels to one thread each (the CPU workers are the
/// parallelism).
void use_single_threaded_blas();

} // namespace cohort::kernels
