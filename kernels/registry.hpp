// The kernel registry: every kernel the process can run, the built-in
// catalog and the kernels applications and signed bundles register at run
// time, each described the same way (kernel_def). Plain C++: no CAF, no
// protobuf. Process-wide: kernel code is loaded into the process, so every
// runtime of the process sees the same kernels under the same ids.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/catalog.hpp"
#include "kernels/dtype.hpp"

namespace cohort::kernels {

/// One buffer a kernel takes or produces: its name (for messages and
/// documentation) and element type.
struct buffer_param {
  std::string name;
  dtype type = dtype::f32;
};

/// What a kernel takes and produces.
struct kernel_signature {
  /// Input buffers, in order.
  std::vector<buffer_param> inputs;
  /// The output buffer.
  buffer_param output{"out", dtype::f32};
  /// The kernel_args fields it reads ("alpha", "m", "n", "k", "top_k"):
  /// documentation, and the only scalars a bundle's rules may name.
  std::vector<std::string> scalars;
};

/// Where a kernel's GPU code is for one backend: a module image (CUDA PTX,
/// cubin or fatbin; a HIP code object) and how to launch its entry point.
struct gpu_code {
  enum class format : uint8_t { none, ptx, cubin, fatbin, hip_code_object };
  format kind = format::none;
  /// The image, as the driver's module load takes it.
  std::shared_ptr<const std::vector<uint8_t>> image;
  /// The entry point's (unmangled, extern "C") name.
  std::string function;
  /// Threads per block; the grid covers `launch_elements` threads.
  uint32_t block = 256;
  /// How many threads the launch needs (one per output element when
  /// empty).
  std::function<uint64_t(const kernel_args&, input_lengths)> launch_elements;

  bool present() const {
    return kind != format::none && image && !function.empty();
  }
};

/// Everything Cohort needs to check, size, place and run a kernel.
struct kernel_def {
  /// Unique in the process: [a-z0-9_.]+, at most 64 characters.
  std::string name;
  kernel_signature signature;
  /// Checks the inputs' lengths and the arguments (counts and types are
  /// checked before it runs); empty when valid, else what is wrong. Optional.
  std::function<std::string(const kernel_args&, input_lengths)> check;
  /// Elements of the output for valid inputs. Required.
  std::function<uint64_t(const kernel_args&, input_lengths)> output_elements;
  /// Modeled work of a call; when empty, the bytes the call moves and no
  /// flops (the measured model learns its run time).
  std::function<kernel_cost(const kernel_args&, input_lengths)> cost;
  /// The CPU implementation: CPU workers, simulated GPUs and fallback run
  /// it. Required. Called from several threads at once.
  std::function<kernel_output(const kernel_args&, typed_inputs)> cpu;
  /// `cpu` for at most the given time, for CPU code that can be stopped
  /// (a bundle's kernel in a kernel host process); optional.
  std::function<kernel_output(const kernel_args&, typed_inputs,
                              std::chrono::milliseconds)>
      cpu_within;
  /// A reference to compare results with (tests, `cohort run --check`);
  /// when empty, results are compared with `cpu`'s.
  std::function<kernel_output(const kernel_args&, typed_inputs)> reference;
  /// GPU code; a kernel without code for a backend is never placed on its
  /// devices.
  gpu_code cuda;
  gpu_code hip;
  /// Where it came from: "built-in", "application", "bundle NAME VERSION
  /// (key ID)".
  std::string origin = "application";
  /// For a bundle's kernels, the SHA-256 of its manifest: loading the same
  /// bundle again finds its kernels instead of clashing with them.
  std::string source;
  /// A node's kernel in a device host process (register_node_kernel): GPU
  /// code alone. Its rules and CPU code are in the node's process, so each
  /// launch brings its sizes (devices::stage_view::sized) and nothing here
  /// may call `check`, `output_elements`, `cost`, `cpu` or `reference`.
  bool sized_by_caller = false;
};

/// A registered kernel as listings show it.
struct kernel_info {
  kernel_id id{};
  std::string name;
  std::string origin;
  kernel_signature signature;
  bool builtin = false;
  bool cuda = false;
  bool hip = false;
};

/// Most kernels a process may hold, built-in ones included (ids 1..255).
inline constexpr unsigned max_kernels = 255;

/// Registers `def`; returns its id, or an empty optional with `why` set
/// (a bad name or signature, a missing function, a name taken by another
/// kernel, the registry full). Thread-safe.
std::optional<kernel_id> register_kernel(kernel_def def, std::string& why);

/// Registers all of `defs` or none: returns their ids in order, or an empty
/// optional with `why` set. A definition whose name is registered with the
/// same non-empty `source` gets the registered kernel's id (a bundle loaded
/// twice). Thread-safe.
std::optional<std::vector<kernel_id>>
register_kernels(std::vector<kernel_def> defs, std::string& why);

/// Registers, in a device host process, a kernel of its node's process at
/// the node's id (docs/device-hosts.md, "Kernels"): `def` names the kernel,
/// gives its signature and its GPU code, and has `sized_by_caller` set (its
/// functions may be empty). Registering the same name at the same id again
/// does nothing. Returns what is wrong, empty on success: a bad definition,
/// or the id taken by another kernel. Thread-safe.
std::string register_node_kernel(kernel_id id, kernel_def def);

/// True for a C identifier of at most 128 characters: a GPU entry point, a
/// shared object's symbol.
bool valid_c_identifier(std::string_view s);

/// True for the kernels compiled into Cohort (the named kernel_id values).
bool is_builtin(kernel_id id);

/// The kernel with id `id`, or null. Lock-free; the definition lives as
/// long as the process.
const kernel_def* find(kernel_id id);

/// The registered kernels, by id.
std::vector<kernel_info> registered_kernels();

/// True if the kernel has GPU code for CUDA (`cuda`) or HIP; the
/// built-in kernels are compiled into the GPU backends.
bool has_gpu_code(kernel_id id, bool cuda);

/// Checks a call's input types against the signature; empty when they
/// match.
std::string check_types(kernel_id id, std::span<const dtype> types);

} // namespace cohort::kernels
