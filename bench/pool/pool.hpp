// The pool benchmark's shared shape: a seeded trace of allocations and frees
// that every competitor replays, the figures each reports, and the
// fragmentation run of the Cohort pool at a fixed occupancy.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace cohort::devices::gpu {
class api;
} // namespace cohort::devices::gpu

namespace cohort::bench {

/// How request sizes are drawn.
struct size_distribution {
  uint64_t min_bytes = 256;
  uint64_t max_bytes = uint64_t{16} << 20;
  /// Uniform in [min, max] instead of log-uniform.
  bool uniform = false;
};

/// A random allocate/free workload in the manner of RMM's
/// random_allocations benchmark.
struct workload_options {
  /// Allocations in the trace; each is freed once, so also the pairs.
  uint64_t pairs = 0;
  size_distribution sizes;
  /// Requested bytes live at once never pass this.
  uint64_t cap_bytes = 0;
  uint64_t seed = 0;
  /// Timed passes over the trace; the least disturbed one is kept.
  uint32_t repeat = 1;
};

/// One call of the trace: allocate `bytes` into `slot`, or free the block in
/// `slot` (which was allocated with `bytes`).
struct pool_op {
  uint64_t bytes = 0;
  uint32_t slot = 0;
  bool allocate = false;
};

struct workload {
  std::vector<pool_op> ops;
  /// Size of the replay's pointer table (most blocks live at once).
  uint32_t slots = 0;
  uint64_t pairs = 0;
  /// Most requested bytes live at once.
  uint64_t peak_live_bytes = 0;
  uint32_t repeat = 1;
};

/// The trace: at each step, with live memory empty or on a coin flip that
/// keeps live bytes under the cap, allocate a new random size; otherwise
/// free a random live block. Whatever is live at the end is freed in random
/// order. Deterministic for one seed on one build.
workload make_workload(const workload_options& opts);

/// Draws one request size.
uint64_t draw_size(const size_distribution& d, std::mt19937_64& rng);

/// One competitor's figures in the latency run (host time of the calls).
struct latency_figures {
  std::string system;
  uint64_t pairs = 0;
  /// Mean of allocate + deallocate, from the fastest of the passes with no
  /// per-call timing.
  double mean_ns = 0;
  /// Per pair (a block's allocate plus its deallocate), from the pass timing
  /// every call with the lowest median.
  double p50_ns = 0;
  double p99_ns = 0;
  /// Means of the calls alone, from the same pass.
  double allocate_ns = 0;
  double deallocate_ns = 0;
  /// Empty when every call succeeded and every check held.
  std::string error;
  /// Non-empty when the system could not run here (no GPU, say): why.
  std::string skipped;
};

/// Cohort's pool over address space alone: bookkeeping only.
latency_figures run_pool_virtual(const workload& w, uint64_t capacity);

/// The full per-device stack (statistics, tracking, fault injection,
/// limiting, pool) over address space alone.
latency_figures run_device_stack_virtual(const workload& w, uint64_t capacity);

/// Cohort's pool over mapped host memory with zero-on-free (memset).
latency_figures run_pool_host(const workload& w, uint64_t capacity);

/// std::malloc / std::free of this binary.
latency_figures run_system_malloc(const workload& w);

/// Cohort's pool over cudaMalloc slabs through gpu::api, on one stream of
/// GPU 0, with or without zero-on-free (cudaMemsetAsync on the stream).
latency_figures run_pool_gpu(const workload& w,
                             std::shared_ptr<devices::gpu::api> rt,
                             bool zero_on_free);

/// cudaMalloc / cudaFree and cudaMallocAsync / cudaFreeAsync on one stream,
/// on GPU 0. Only built with the CUDA backend.
latency_figures run_cuda_malloc(const workload& w);
latency_figures run_cuda_malloc_async(const workload& w);

/// The fragmentation run: fill a pool of `capacity` (over address space) to
/// `occupancy` of it, then churn.
struct fragmentation_options {
  uint64_t capacity = uint64_t{1} << 30;
  double occupancy = 0.8;
  uint64_t steps = 0;
  size_distribution sizes;
  uint64_t seed = 0;
  /// Growth step of the pool; 0 keeps sized_pool_options(capacity)'s.
  uint64_t slab_bytes = 0;
  /// Churn steps between two calls of the pool's maintain() (the device's
  /// health tick); 0 never calls it.
  uint64_t maintain_every = 0;
};

struct fragmentation_figures {
  std::string config;
  uint64_t slab_bytes = 0;
  /// Sampled after every churn step.
  double occupancy_mean = 0;
  /// pool_stats::fragmentation(): 1 - largest free / free.
  double fragmentation_mean = 0;
  double fragmentation_max = 0;
  /// The largest free block, mean bytes.
  double largest_free_mean = 0;
  /// 1 - live / held: what the pool holds from the device and does not use.
  double overhead_mean = 0;
  double overhead_max = 0;
  /// 1 - requested / live: what size classes and alignment add.
  double rounding_mean = 0;
  uint64_t slabs_max = 0;
  /// Allocations tried in the fill and the churn, refused, and refused
  /// although the device's free bytes (capacity - live) could hold the
  /// rounded request.
  uint64_t attempts = 0;
  uint64_t refused = 0;
  uint64_t refused_with_room = 0;
  std::string error;
};

fragmentation_figures run_fragmentation(const fragmentation_options& opts);

/// p-th percentile (0..100) of `samples` (reordered in place).
double percentile(std::vector<double>& samples, double p);

} // namespace cohort::bench
