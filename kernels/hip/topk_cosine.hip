// topk_cosine on HIP. Row and query norms (one block per vector, double
// sums), then per batch of queries: the tiled GEMM of queries and rows with
// an epilogue that writes cosine similarities as sort keys, one stable
// rocPRIM radix sort of the batch (keys group by query, similarities
// descending, ties in row order), and a copy of each query's first top_k.
// Scratch layout: kernels/gpu/topk_cosine_plan.hpp.
// rocPRIM 5.3's headers (Debian) use std::cout without including <iostream>.
#include <iostream>

#include <algorithm>
#include <rocprim/device/device_radix_sort.hpp>

#include "kernels/gpu/blas1_device.hpp"
#include "kernels/gpu/dense_device.hpp"
#include "kernels/gpu/topk_cosine_device.hpp"
#include "kernels/gpu/topk_cosine_plan.hpp"
#include "kernels/hip/wrappers.hpp"

namespace cohort::kernels::hip {

namespace {

// Sorts (or, with null temporary storage, sizes the sort of) the batch of
// `queries` queries in `keys` / `index`.
hipError_t sort_batch(void* temp, size_t& temp_bytes,
                      const gpu::topk_cosine_plan& p, uint64_t queries,
                      rocprim::double_buffer<uint64_t>& keys,
                      rocprim::double_buffer<int32_t>& index,
                      hipStream_t stream) {
  return rocprim::radix_sort_pairs(temp, temp_bytes, keys, index,
                                   static_cast<uint32_t>(queries * p.rows), 0u,
                                   gpu::topk_key_bits(queries), stream);
}

} // namespace

hipError_t topk_cosine_scratch_bytes(const gpu::launch_args& a, size_t& bytes) {
  bytes = 0;
  const auto p = gpu::plan_topk_cosine(a);
  if (p.empty())
    return hipSuccess;
  // rocPRIM sizes the double-buffer sort only when the other buffers are not
  // null (with null ones it adds room for copies of its own); a size query
  // never dereferences them, so any non-null address will do.
  auto* some_keys = reinterpret_cast<uint64_t*>(gpu::scratch_align);
  auto* some_index = reinterpret_cast<int32_t*>(gpu::scratch_align);
  rocprim::double_buffer<uint64_t> keys{some_keys, some_keys};
  rocprim::double_buffer<int32_t> index{some_index, some_index};
  size_t full = 0;
  size_t last = 0;
  if (auto err = sort_batch(nullptr, full, p, p.batch, keys, index, nullptr);
      err != hipSuccess)
    return err;
  if (auto err = sort_batch(nullptr, last, p, p.last_batch_queries(), keys,
                            index, nullptr);
      err != hipSuccess)
    return err;
  bytes = p.sort_temp + gpu::align_scratch(std::max(full, last));
  return hipSuccess;
}

hipError_t topk_cosine(const gpu::launch_args& a, const stream_context& ctx) {
  const auto p = gpu::plan_topk_cosine(a);
  if (p.empty())
    return hipSuccess;
  auto* scratch = static_cast<char*>(a.scratch);
  auto* row_norm = reinterpret_cast<float*>(scratch + p.row_norm);
  auto* query_norm = reinterpret_cast<float*>(scratch + p.query_norm);
  uint64_t* keys[2];
  int32_t* index[2];
  for (int i = 0; i < 2; ++i) {
    keys[i] = reinterpret_cast<uint64_t*>(scratch + p.keys[i]);
    index[i] = reinterpret_cast<int32_t*>(scratch + p.index[i]);
  }
  const float* rows = a.in[0];
  const float* queries = a.in[1];

  gpu::row_sums<<<gpu::row_blocks(p.rows), gpu::block_threads, 0, ctx.stream>>>(
      p.rows, p.dim, gpu::row_square_term{rows, p.dim},
      gpu::store_root{row_norm});
  if (auto err = hipGetLastError(); err != hipSuccess)
    return err;
  gpu::row_sums<<<gpu::row_blocks(p.queries), gpu::block_threads, 0,
                  ctx.stream>>>(p.queries, p.dim,
                                gpu::row_square_term{queries, p.dim},
                                gpu::store_root{query_norm});
  if (auto err = hipGetLastError(); err != hipSuccess)
    return err;

  for (uint64_t first = 0; first < p.queries; first += p.batch) {
    const uint64_t nq = p.batch_queries(first);
    // similarity[q][r] = dot(query first + q, row r) / norms.
    const dim3 grid{gpu::gemm_blocks(p.rows), gpu::gemm_blocks(nq)};
    const dim3 block{gpu::gemm_side, gpu::gemm_side};
    gpu::gemm_tiles<true><<<grid, block, 0, ctx.stream>>>(
        nq, p.rows, p.dim, queries + first * p.dim, rows,
        gpu::cosine_keys{query_norm + first, row_norm, p.rows, keys[0],
                         index[0]});
    if (auto err = hipGetLastError(); err != hipSuccess)
      return err;
    rocprim::double_buffer<uint64_t> sorted_keys{keys[0], keys[1]};
    rocprim::double_buffer<int32_t> sorted_index{index[0], index[1]};
    size_t temp_bytes = a.scratch_bytes - p.sort_temp;
    if (auto err = sort_batch(scratch + p.sort_temp, temp_bytes, p, nq,
                              sorted_keys, sorted_index, ctx.stream);
        err != hipSuccess)
      return err;
    const uint64_t count = nq * p.top_k;
    gpu::for_each_index<<<gpu::elementwise_blocks(count), gpu::block_threads, 0,
                          ctx.stream>>>(
        count, gpu::take_top{p.rows, p.top_k, sorted_keys.current(),
                             sorted_index.current(), a.out + first * p.top_k,
                             a.out_indices + first * p.top_k});
    if (auto err = hipGetLastError(); err != hipSuccess)
      return err;
  }
  return hipSuccess;
}

} // namespace cohort::kernels::hip
