// Device code of the dense kernels shared by CUDA and HIP: a one-block-per-row
// reduction (HIP's gemv, row norms of topk_cosine) and a shared-memory tiled
// GEMM (HIP's gemm, the similarities of topk_cosine). CUDA runs gemm and gemv
// through cuBLAS instead. All matrices are row-major.
#pragma once

#include <cstdint>

#include "kernels/gpu/block_sum_device.hpp"
#include "kernels/gpu/geometry.hpp"
#include "kernels/gpu/vendor_runtime.hpp"

namespace cohort::kernels::gpu {

/// For each row r of a rows x cols index space, one block adds term(r, c) over
/// the columns in double and calls store(r, sum) once. Launch with
/// block_threads threads; blocks stride over the rows.
template <class Term, class Store>
__global__ void __launch_bounds__(block_threads)
    row_sums(uint64_t rows, uint64_t cols, Term term, Store store) {
  for (uint64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    double acc = 0;
    for (uint64_t c = threadIdx.x; c < cols; c += block_threads)
      acc += term(r, c);
    const double total = block_sum(acc);
    if (threadIdx.x == 0)
      store(r, total);
  }
}

/// A[r][c] * x[c] of a row-major matrix with `cols` columns, exact in double.
struct gemv_term {
  const float* a;
  const float* x;
  uint64_t cols;
  __device__ double operator()(uint64_t r, uint64_t c) const {
    return static_cast<double>(a[r * cols + c]) * x[c];
  }
};

/// M[r][c]^2 of a row-major matrix with `cols` columns, exact in double.
struct row_square_term {
  const float* m;
  uint64_t cols;
  __device__ double operator()(uint64_t r, uint64_t c) const {
    const double v = m[r * cols + c];
    return v * v;
  }
};

/// out[r] = sum, rounded once to float.
struct store_sum {
  float* out;
  __device__ void operator()(uint64_t r, double sum) const {
    out[r] = static_cast<float>(sum);
  }
};

/// out[r] = sqrt(sum) taken in double, rounded once to float: the same norm
/// the CPU nrm2 computes.
struct store_root {
  float* out;
  __device__ void operator()(uint64_t r, double sum) const {
    out[r] = static_cast<float>(sqrt(sum));
  }
};

/// C = A * B for A (m x k, row-major) and B (k x n): row-major when
/// `TransposedB` is false; when true, `b` holds B's transpose (n x k,
/// row-major), i.e. B[p][c] = b[c * k + p]. Calls store(r, c, C[r][c]) once
/// for every r < m, c < n; accumulates in float, like BLAS.
///
/// Launch with gemm_side x gemm_side threads. C is cut into gemm_tile x
/// gemm_tile tiles; block (x, y) computes the tiles in tile rows y + i *
/// gridDim.y and tile columns x + j * gridDim.x, and thread (tx, ty) the
/// elements (ty + gemm_side * i, tx + gemm_side * j) of a tile, which keeps
/// the global loads and the shared reads contiguous along tx.
template <bool TransposedB, class Store>
__global__ void __launch_bounds__(gemm_threads)
    gemm_tiles(uint64_t m, uint64_t n, uint64_t k, const float* a,
               const float* b, Store store) {
  constexpr unsigned side = gemm_side;
  constexpr unsigned per = gemm_tile / gemm_side; // outputs per thread per axis
  constexpr unsigned depth = gemm_side;           // k-slice staged per step
  static_assert(gemm_tile % gemm_side == 0, "tiles split evenly on threads");
  // One column of padding spreads the column accesses over all banks.
  __shared__ float as[gemm_tile][depth + 1]; // as[row][p]
  __shared__ float bs[depth][gemm_tile + 1]; // bs[p][col]
  const unsigned tx = threadIdx.x;
  const unsigned ty = threadIdx.y;
  const uint64_t tiles_m = (m + gemm_tile - 1) / gemm_tile;
  const uint64_t tiles_n = (n + gemm_tile - 1) / gemm_tile;
  for (uint64_t tm = blockIdx.y; tm < tiles_m; tm += gridDim.y) {
    for (uint64_t tn = blockIdx.x; tn < tiles_n; tn += gridDim.x) {
      const uint64_t row0 = tm * gemm_tile;
      const uint64_t col0 = tn * gemm_tile;
      float acc[per][per] = {};
      for (uint64_t p0 = 0; p0 < k; p0 += depth) {
        // Stage A[row0 .. +tile][p0 .. +depth] and B[p0 .. +depth][col0 ..
        // +tile], zero outside the matrices so the edges need no branch.
        for (unsigned i = 0; i < per; ++i) {
          const uint64_t r = row0 + ty + side * i;
          const uint64_t p = p0 + tx;
          as[ty + side * i][tx] = r < m && p < k ? a[r * k + p] : 0.0f;
        }
        for (unsigned j = 0; j < per; ++j) {
          if constexpr (TransposedB) {
            // Read along p, which is contiguous in b.
            const uint64_t c = col0 + ty + side * j;
            const uint64_t p = p0 + tx;
            bs[tx][ty + side * j] = c < n && p < k ? b[c * k + p] : 0.0f;
          } else {
            const uint64_t p = p0 + ty;
            const uint64_t c = col0 + tx + side * j;
            bs[ty][tx + side * j] = p < k && c < n ? b[p * n + c] : 0.0f;
          }
        }
        __syncthreads();
        for (unsigned p = 0; p < depth; ++p) {
          float av[per];
          float bv[per];
          for (unsigned i = 0; i < per; ++i)
            av[i] = as[ty + side * i][p];
          for (unsigned j = 0; j < per; ++j)
            bv[j] = bs[p][tx + side * j];
          for (unsigned i = 0; i < per; ++i)
            for (unsigned j = 0; j < per; ++j)
              acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
        }
        __syncthreads();
      }
      for (unsigned i = 0; i < per; ++i) {
        const uint64_t r = row0 + ty + side * i;
        for (unsigned j = 0; j < per; ++j) {
          const uint64_t c = col0 + tx + side * j;
          if (r < m && c < n)
            store(r, c, acc[i][j]);
        }
      }
    }
  }
}

/// c[r * cols + col] = v: a row-major output matrix.
struct store_matrix {
  float* c;
  uint64_t cols;
  __device__ void operator()(uint64_t r, uint64_t col, float v) const {
    c[r * cols + col] = v;
  }
};

} // namespace cohort::kernels::gpu
