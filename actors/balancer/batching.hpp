// Dynamic batching without actors: many small items of one kernel become one
// work item (one launch), and its output is split back into the output each
// item would have had alone (bit for bit for axpy; see merge for gemm). The
// balancer decides when to batch; this module only decides what may share a
// launch and does the copying.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <caf/expected.hpp>

#include "messages/work.hpp"

namespace cohort::actors::balancer::batching {

/// What items must share to go in one launch. `alpha` compares by its bits:
/// axpy with alpha +0 and -0 differ in the sign of zero results, and a NaN
/// alpha must still equal itself to work as a hash key.
struct batch_key {
  kernel_id kernel = kernel_id::axpy;
  float alpha = 1.0f;
  uint64_t n = 0;
  uint64_t k = 0;
  /// The identity of the shared operand (gemm's B), null for axpy.
  const void* shared = nullptr;

  bool operator==(const batch_key& other) const;
};

/// Hashes every field of a key (alpha by its bits, as `==` compares it).
struct batch_key_hash {
  size_t operator()(const batch_key& key) const;
};

/// The key of a valid item that can be merged with others, or nullopt. Only
/// single-stage, single-device items (no `then`, no gang) merge: axpy (key:
/// alpha; elementwise, so the inputs concatenate) and gemm whose B operand is
/// shared by identity (the same host_buffer values: many requests against one
/// weight matrix; key: alpha, n, k and B's identity; the A operands stack by
/// rows and m adds up). Every other kernel, chained, gang or invalid item:
/// nullopt.
std::optional<batch_key> key_of(const work_item& item);

/// Elements of a valid item's output (of its last stage): what `split` hands
/// back for it, and what bounds the size of a batch.
uint64_t output_elements(const work_item& item);

/// One item doing the work of all `members`, with id `id` and tenant
/// `tenant`. Precondition: at least one member, all with the same key_of.
/// The caller bounds the batch (by output_elements) so that the merged
/// shape stays within the kernel's limits; then the result is valid.
/// Split back, axpy outputs are bit-identical to each item run alone. gemm
/// outputs are bit-identical only with a kernel that computes every row
/// alike (run_reference): OpenBLAS picks a row's micro-kernel by its place in
/// the register tiling and in the thread split, so with run_cpu they agree
/// within the kernel's tolerance, as one gemm run with one and with two BLAS
/// threads does.
work_item merge(std::span<const work_item* const> members, uint64_t id,
                std::string tenant);

/// Splits the output of `merge(members, ...)` into one output per member,
/// in order. Fails with invalid_arguments, saying the sizes, if `merged`
/// does not have exactly the values the members need (or carries indices,
/// which no batchable kernel produces); nothing is split then.
caf::expected<std::vector<kernels::kernel_output>>
split(const kernels::kernel_output& merged,
      std::span<const work_item* const> members);

} // namespace cohort::actors::balancer::batching
