// Launch geometry shared by the CUDA and HIP wrappers: block sizes, grid caps
// and scratch alignment. Plain C++17 with no vendor header, so both hipcc and
// nvcc host code (and plain g++) can include it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace cohort::kernels::gpu {

/// Threads per block of every 1-D kernel: 8 warps on NVIDIA, 4 wavefronts on
/// AMD. Block reductions assume exactly this many threads.
inline constexpr unsigned block_threads = 256;

/// Grid cap of element-wise kernels; they stride over the rest. 8192 blocks
/// of 256 threads fill any current GPU several times over.
inline constexpr uint64_t max_elementwise_blocks = 8192;

/// Grid cap of the first pass of a two-pass reduction: enough blocks to fill
/// the GPU, few enough partial sums for a single block to add up.
inline constexpr uint64_t max_reduction_blocks = 1024;

/// Grid cap of the kernels that loop over rows or tiles (CUDA limits the y
/// dimension to 65535; x uses the same cap for symmetry).
inline constexpr uint64_t max_grid_dim = 65535;

/// Output tile of the shared-memory GEMM (gemm_tile x gemm_tile).
inline constexpr unsigned gemm_tile = 64;
/// Threads per side of a GEMM block; each thread computes
/// (gemm_tile / gemm_side)^2 outputs.
inline constexpr unsigned gemm_side = 16;
/// Threads of a GEMM block.
inline constexpr unsigned gemm_threads = gemm_side * gemm_side;

/// Alignment of every buffer carved out of a launch's scratch.
inline constexpr size_t scratch_align = 256;

inline constexpr uint64_t ceil_div(uint64_t a, uint64_t b) {
  return a / b + (a % b != 0);
}

inline constexpr size_t align_scratch(size_t bytes) {
  return ceil_div(bytes, scratch_align) * scratch_align;
}

/// Blocks of a grid-stride element-wise kernel over `count` items (0 when
/// there is nothing to do: a grid may not be empty, so do not launch then).
inline unsigned elementwise_blocks(uint64_t count) {
  return static_cast<unsigned>(
      std::min(ceil_div(count, block_threads), max_elementwise_blocks));
}

/// Blocks, hence partial sums, of the first pass of a reduction over `count`
/// items; at least one, so an empty input still yields a sum of 0.
inline unsigned reduction_blocks(uint64_t count) {
  return static_cast<unsigned>(std::clamp<uint64_t>(
      ceil_div(count, block_threads), 1, max_reduction_blocks));
}

/// Scratch of a two-pass reduction: one double per first-pass block.
inline size_t reduction_scratch_bytes(uint64_t count) {
  return align_scratch(reduction_blocks(count) * sizeof(double));
}

/// Blocks of a one-block-per-row kernel over `rows` rows (rows > 0).
inline unsigned row_blocks(uint64_t rows) {
  return static_cast<unsigned>(std::min(rows, max_grid_dim));
}

/// Blocks along one dimension of the tiled GEMM covering `extent` (> 0).
inline unsigned gemm_blocks(uint64_t extent) {
  return static_cast<unsigned>(
      std::min(ceil_div(extent, gemm_tile), max_grid_dim));
}

} // namespace cohort::kernels::gpu
