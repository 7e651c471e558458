// Top-k cosine similarity on the CPU: one pass of row norms, one dot product
// per (query, row) through OpenBLAS sgemv, then a partial sort per query.
#include "kernels/topk_cosine.hpp"

#include <algorithm>
#include <cblas.h>
#include <cmath>
#include <numeric>
#include <vector>

#include "kernels/blas1.hpp"

namespace cohort::kernels::cpu {

void topk_cosine(uint64_t count, uint64_t dim, uint32_t top_k,
                 std::span<const float> rows, std::span<const float> queries,
                 std::span<int64_t> indices, std::span<float> scores) {
  const uint64_t q = dim == 0 ? 0 : queries.size() / dim;
  std::vector<float> row_norm(count);
  for (uint64_t r = 0; r < count; ++r)
    row_norm[r] = nrm2(rows.subspan(r * dim, dim));
  std::vector<float> sim(count);
  std::vector<int64_t> order(count);
  for (uint64_t j = 0; j < q; ++j) {
    auto query = queries.subspan(j * dim, dim);
    const float qn = nrm2(query);
    cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<blasint>(count),
                static_cast<blasint>(dim), 1.0f, rows.data(),
                static_cast<blasint>(dim), query.data(), 1, 0.0f, sim.data(),
                1);
    for (uint64_t r = 0; r < count; ++r) {
      const float denom = row_norm[r] * qn;
      sim[r] = denom > 0 ? sim[r] / denom : 0.0f;
    }
    std::iota(order.begin(), order.end(), int64_t{0});
    auto better = [&](int64_t a, int64_t b) {
      return sim[a] > sim[b] || (sim[a] == sim[b] && a < b);
    };
    std::partial_sort(order.begin(), order.begin() + top_k, order.end(),
                      better);
    for (uint32_t t = 0; t < top_k; ++t) {
      indices[j * top_k + t] = order[t];
      scores[j * top_k + t] = sim[order[t]];
    }
  }
}

} // namespace cohort::kernels::cpu
