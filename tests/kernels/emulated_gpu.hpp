// TEST ONLY: a CPU emulation of the GPU thread model, enough of the CUDA/HIP
// runtime for the shared device code in kernels/gpu/*_device.hpp to compile
// with g++ and run on the host. It is not a backend and never runs in the
// product. Include it before any device header; only
// tests/kernels/gpu_emulation_test.cpp may include it (it defines __global__,
// __shared__, threadIdx, ... in the global namespace).
//
// Model: one OS thread per thread of a block, all of a block's threads
// running at once (as __syncthreads needs), one block at a time: each thread
// walks the grid's blocks in the same order, and a barrier after every block
// keeps a block's `__shared__` arrays (plain statics here, one per kernel
// instantiation) from being overwritten while another thread still reads
// them. The threads are a pool started once and reused by every launch, so
// a launch costs wake-ups, not thread creation. One launch at a time.
// It checks index math and synchronization, not speed, warps or memory
// spaces: no warp shuffles, atomics or device memory are emulated.
#pragma once

#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
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

/// Threads kept for every launch: run(n, body) calls body(i) on n threads at
/// once, i = 0 .. n - 1, and returns when all have returned. Not reentrant.
class thread_team {
public:
  thread_team() = default;
  thread_team(const thread_team&) = delete;
  thread_team& operator=(const thread_team&) = delete;

  ~thread_team() {
    stop_ = true;
    generation_.fetch_add(1);
    generation_.notify_all();
    for (auto& t : threads_)
      t.join();
  }

  void run(unsigned n, const std::function<void(unsigned)>& body) {
    const uint64_t previous = generation_.load();
    while (threads_.size() < n) {
      const auto i = static_cast<unsigned>(threads_.size());
      threads_.emplace_back([this, i, previous] { work(i, previous); });
    }
    body_ = &body;
    active_ = n;
    // Every thread of the team checks in, so none can still be reading
    // body_ or active_ when the next run() writes them.
    running_.store(static_cast<unsigned>(threads_.size()));
    generation_.fetch_add(1);
    generation_.notify_all();
    for (unsigned left = running_.load(); left != 0; left = running_.load())
      running_.wait(left);
    body_ = nullptr;
  }

private:
  void work(unsigned i, uint64_t seen) {
    for (;;) {
      generation_.wait(seen);
      seen = generation_.load();
      if (stop_)
        return;
      if (i < active_)
        (*body_)(i);
      if (running_.fetch_sub(1) == 1)
        running_.notify_one();
    }
  }

  std::vector<std::thread> threads_;
  // Written by run() before generation_ moves on, read by the threads after.
  const std::function<void(unsigned)>* body_ = nullptr;
  unsigned active_ = 0;
  bool stop_ = false;
  std::atomic<uint64_t> generation_{0};
  std::atomic<unsigned> running_{0};
};

/// The team of every launch, started on first use.
inline thread_team& team() {
  static thread_team instance;
  return instance;
}

/// Runs kernel<<<grid, block>>>(args...) on the CPU and returns when it is
/// done. Not reentrant: launches must not overlap.
template <class Kernel, class... Args>
void launch(dim3 grid, dim3 block, Kernel kernel, Args... args) {
  gridDim = grid;
  blockDim = block;
  const unsigned threads = block.x * block.y * block.z;
  std::barrier<> barrier(threads);
  block_barrier = &barrier;
  team().run(threads, [&](unsigned i) {
    threadIdx = dim3(i % block.x, i / block.x % block.y, i / block.x / block.y);
    for (unsigned bz = 0; bz < grid.z; ++bz)
      for (unsigned by = 0; by < grid.y; ++by)
        for (unsigned bx = 0; bx < grid.x; ++bx) {
          blockIdx = dim3(bx, by, bz);
          kernel(args...);
          // The next block reuses the __shared__ statics.
          barrier.arrive_and_wait();
        }
  });
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
