// The kernel catalog: names, argument validation, cost and dispatch to the CPU
// implementations of every kernel of the registry (registry.hpp), built-in or
// registered at run time. Plain C++ (no CAF, no protobuf) so every backend
// can use it.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "kernels/dtype.hpp"
#include "kernels/kernel_args.hpp"
#include "kernels/small_vector.hpp"

namespace cohort::kernels {

/// Read-only views of a call's input buffers.
using input_views = std::span<const std::span<const float>>;

/// A read-only view of one input: its elements, their count and type.
struct typed_view {
  const void* data = nullptr;
  uint64_t size = 0;
  dtype type = dtype::f32;

  typed_view() = default;
  typed_view(const void* p, uint64_t n, dtype t) : data(p), size(n), type(t) {
    // nop
  }
  /// f32 elements (what the built-in kernels take).
  typed_view(std::span<const float> xs) : data(xs.data()), size(xs.size()) {
    // nop
  }
  typed_view(const std::vector<float>& xs) : typed_view(std::span{xs}) {
    // nop
  }

  template <class T> std::span<const T> as() const {
    return {static_cast<const T*>(data), static_cast<size_t>(size)};
  }
  uint64_t bytes() const { return size * element_size(type); }
};

/// The inputs of one call, typed.
using typed_inputs = std::span<const typed_view>;

/// Element counts of a call's inputs: enough to check and size a call whose
/// inputs are not on the host (a chained stage's input on a device).
using input_lengths = std::span<const uint64_t>;

/// Element counts of one call's inputs, inline for up to 8 (no allocation).
using input_shape = small_vector<uint64_t, 8>;

/// The element counts of `inputs`.
input_shape lengths(input_views inputs);

/// What a kernel produces: f32 values, and row indices for top-k; a kernel
/// whose output has another element type fills `raw` and `type` instead.
struct kernel_output {
  std::vector<float> values;
  std::vector<int64_t> indices;
  /// The output's element type; when not f32, its elements are in `raw`.
  dtype type = dtype::f32;
  std::vector<uint8_t> raw;

  /// Elements of the output.
  uint64_t elements() const {
    return type == dtype::f32 ? values.size() : raw.size() / element_size(type);
  }

  /// The output's elements, typed (topk_cosine's indices aside).
  typed_view view() const {
    if (type == dtype::f32)
      return {values.data(), values.size(), type};
    return {raw.data(), raw.size() / element_size(type), type};
  }

  /// Sizes an output of `n` elements of `t` (zeroed).
  void resize(dtype t, uint64_t n) {
    type = t;
    if (t == dtype::f32)
      values.assign(n, 0.0f);
    else
      raw.assign(n * element_size(t), 0);
  }

  /// The elements as `T` (which must be `type`'s).
  template <class T> std::span<T> as() {
    if constexpr (std::is_same_v<T, float>)
      return values;
    else
      return {reinterpret_cast<T*>(raw.data()), raw.size() / sizeof(T)};
  }
  template <class T> std::span<const T> as() const {
    if constexpr (std::is_same_v<T, float>)
      return values;
    else
      return {reinterpret_cast<const T*>(raw.data()), raw.size() / sizeof(T)};
  }
};

/// What a registered kernel's CPU implementation throws when it fails: the
/// device ends the item with kernel_error and this message.
struct kernel_failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Modeled amount of work of one call, used by simulated devices and placement.
struct kernel_cost {
  double flops = 0;
  double bytes = 0;
};

/// Returns the kernel's name ("axpy", ...), or "unknown" for a value the
/// registry does not hold.
std::string_view name(kernel_id id);

/// Returns true if the registry holds a kernel with id `raw`.
bool is_known(uint8_t raw);

/// Parses a kernel name; nullopt when the registry has no such kernel.
std::optional<kernel_id> parse_kernel(std::string_view name);

/// The element type of the kernel's output (valid ids only).
dtype output_type(kernel_id id);

/// Most float values one item's output may have (4 GiB): larger outputs are
/// refused before anything is allocated.
inline constexpr uint64_t max_output_elements = uint64_t{1} << 30;

/// Checks inputs and arguments (shapes, a finite alpha, an output of at most
/// max_output_elements); returns an empty string when valid, otherwise a
/// message naming the kernel and the mismatch. A registered kernel's rule
/// that throws throws kernel_failure (naming the kernel and the rule).
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

/// Runs kernel `id`'s CPU implementation on typed inputs (validated).
kernel_output run_cpu(kernel_id id, const kernel_args& args,
                      typed_inputs inputs);

/// As above, for at most `limit` where the kernel can be stopped (a
/// bundle's kernel in a kernel host process: past it, kernel_failure);
/// others run to their end.
kernel_output run_cpu(kernel_id id, const kernel_args& args,
                      typed_inputs inputs, std::chrono::milliseconds limit);

/// Typed views of float inputs.
small_vector<typed_view, 8> typed(input_views inputs);

/// Runs the naive reference implementation (double accumulation; a
/// registered kernel without one: its CPU implementation).
kernel_output run_reference(kernel_id id, const kernel_args& args,
                            input_views inputs);
kernel_output run_reference(kernel_id id, const kernel_args& args,
                            typed_inputs inputs);

/// Compares a result against the reference within the kernel's tolerance;
/// returns an empty string when they agree, otherwise what differs.
std::string compare(kernel_id id, const kernel_args& args, input_views inputs,
                    const kernel_output& got, const kernel_output& want);

/// Limits the CPU kernels to one thread each (the CPU workers are the
/// parallelism).
void use_single_threaded_blas();

} // namespace cohort::kernels
