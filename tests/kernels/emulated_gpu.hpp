// TEST ONLY: a CPU emulation of the GPU thread model, enough of the CUDA/HIP
// runtime for the shared device code in kernels/gpu/*_device.hpp to compile
// with g++ and run on the host. Include it before any device header; only
// tests/kernels/gpu_emulation_test.cpp may include it (it defines __global__,
// __shared__, threadIdx, ... in the global namespace).
//
// Model: a launch starts one std::thread per thread of a block, once; each
// of them walks the grid's blocks in the same order, so the threads of one
// block run concurrently (as __syncthreads needs) and a barrier after every
// block keeps a block's `__shared__` arrays (plain statics here) from being
// overwritten while another thread still reads them. One launch at a time.
// It checks index math and synchronization, not speed, warps or memory
// spaces: no warp shuffles, atomics or device memory are emulated.
#pragma once

#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

/// Tells kernels/gpu/vendor_runtime.hpp not to include a vendor runtime.
#define COHORT_GPU_EMULATION 1

#define __global__
#define __device__
#define __host__
#define __shared__ static
#define __launch_bounds__(...)

/// CUDA's three-component launch and index type.
struct dim3 {
  unsigned x = 1;
  unsigned y = 1;
  unsigned z = 1;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1)
      : x(x_), y(y_), z(z_) {}
};

inline thread_local dim3 threadIdx;
inline thread_local dim3 blockIdx;
inline dim3 blockDim;
inline dim3 gridDim;

namespace cohort::kernels::gpu::emulated {

/// The barrier of the running launch's block threads.
inline std::barrier<>* block_barrier = nullptr;

/// Runs kernel<<<grid, block>>>(args...) on the CPU and returns when it is
/// done. Not reentrant: launches must not overlap.
template <class Kernel, class... Args>
void launch(dim3 grid, dim3 block, Kernel kernel, Args... args) {
  gridDim = grid;
  blockDim = block;
  const unsigned threads = block.x * block.y * block.z;
  std::barrier<> barrier(threads);
  block_barrier = &barrier;
  auto run = [&](dim3 self) {
    threadIdx = self;
    for (unsigned bz = 0; bz < grid.z; ++bz)
      for (unsigned by = 0; by < grid.y; ++by)
        for (unsigned bx = 0; bx < grid.x; ++bx) {
          blockIdx = dim3(bx, by, bz);
          kernel(args...);
          // The next block reuses the __shared__ statics.
          barrier.arrive_and_wait();
        }
  };
  std::vector<std::thread> team;
  team.reserve(threads);
  for (unsigned tz = 0; tz < block.z; ++tz)
    for (unsigned ty = 0; ty < block.y; ++ty)
      for (unsigned tx = 0; tx < block.x; ++tx)
        team.emplace_back(run, dim3(tx, ty, tz));
  for (auto& t : team)
    t.join();
  block_barrier = nullptr;
}

} // namespace cohort::kernels::gpu::emulated

inline void __syncthreads() {
  cohort::kernels::gpu::emulated::block_barrier->arrive_and_wait();
}

inline uint32_t __float_as_uint(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

inline float __uint_as_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

using std::fmaf;
using std::sqrt;
