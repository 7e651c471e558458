// The GPU peers of the latency run, straight on the CUDA runtime: cudaMalloc
// / cudaFree (the driver's allocator; cudaFree synchronizes the device) and
// cudaMallocAsync / cudaFreeAsync on one stream (the driver's stream-ordered
// pool, told to keep its memory as RMM's cuda_async_memory_resource does).
// Built only with the CUDA backend.
#include <cstdint>
#include <string>

#include <cuda_runtime.h>

#include "bench/pool/pool.hpp"
#include "bench/pool/replay.hpp"

namespace cohort::bench {

namespace {

std::string cuda_error(cudaError_t e) {
  return std::string{cudaGetErrorName(e)} + ": " + cudaGetErrorString(e);
}

// What cudaMalloc promises.
constexpr replay_checks device_blocks{256, false, false};

} // namespace

latency_figures run_cuda_malloc(const workload& w) {
  latency_figures out;
  out.system = "cudaMalloc/cudaFree";
  if (auto e = cudaSetDevice(0); e != cudaSuccess) {
    out.error = "selecting GPU 0: " + cuda_error(e);
    return out;
  }
  cudaError_t last = cudaSuccess;
  auto ok = replay(
      w, device_blocks,
      [&](size_t bytes) -> void* {
        void* p = nullptr;
        last = cudaMalloc(&p, bytes);
        return last == cudaSuccess ? p : nullptr;
      },
      [&](void* p, size_t) { return (last = cudaFree(p)) == cudaSuccess; },
      out);
  if (!ok)
    out.error += ": " + cuda_error(last);
  return out;
}

latency_figures run_cuda_malloc_async(const workload& w) {
  latency_figures out;
  out.system = "cudaMallocAsync/cudaFreeAsync";
  auto fail = [&](const char* what, cudaError_t e) {
    out.error = std::string{what} + ": " + cuda_error(e);
    return out;
  };
  if (auto e = cudaSetDevice(0); e != cudaSuccess)
    return fail("selecting GPU 0", e);
  int pools = 0;
  if (auto e =
          cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, 0);
      e != cudaSuccess)
    return fail("asking for memory pool support", e);
  if (pools == 0) {
    out.skipped = "GPU 0 does not support stream-ordered memory pools";
    return out;
  }
  cudaMemPool_t pool = nullptr;
  if (auto e = cudaDeviceGetDefaultMemPool(&pool, 0); e != cudaSuccess)
    return fail("getting the default memory pool", e);
  // Keep freed memory in the pool across synchronizations (the default, 0,
  // gives it back to the driver at every synchronization).
  uint64_t keep = UINT64_MAX;
  if (auto e =
          cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
      e != cudaSuccess)
    return fail("setting the pool's release threshold", e);
  cudaStream_t s = nullptr;
  if (auto e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
      e != cudaSuccess)
    return fail("creating a stream", e);
  cudaError_t last = cudaSuccess;
  auto ok = replay(
      w, device_blocks,
      [&](size_t bytes) -> void* {
        void* p = nullptr;
        last = cudaMallocAsync(&p, bytes, s);
        return last == cudaSuccess ? p : nullptr;
      },
      [&](void* p, size_t) {
        return (last = cudaFreeAsync(p, s)) == cudaSuccess;
      },
      out);
  if (!ok)
    out.error += ": " + cuda_error(last);
  if (auto e = cudaStreamSynchronize(s); e != cudaSuccess && out.error.empty())
    fail("synchronizing the stream", e);
  cudaStreamDestroy(s);
  // Give the memory back for the rows after this one.
  uint64_t release = 0;
  cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &release);
  cudaMemPoolTrimTo(pool, 0);
  return out;
}

} // namespace cohort::bench
