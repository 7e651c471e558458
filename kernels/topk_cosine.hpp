// Top-k rows of a matrix by cosine similarity to each query vector.
#pragma once

#include <cstdint>
#include <span>

namespace cohort::kernels::cpu {

/// For each of the q = queries.size() / dim queries, writes the top_k row
/// indices of `rows` (count x dim) with the highest cosine similarity, best
/// first (ties: lower index first), and their similarities. A zero vector has
/// similarity 0 to everything. `indices` and `scores` hold q * top_k entries.
void topk_cosine(uint64_t count, uint64_t dim, uint32_t top_k,
                 std::span<const float> rows, std::span<const float> queries,
                 std::span<int64_t> indices, std::span<float> scores);

} // namespace cohort::kernels::cpu
