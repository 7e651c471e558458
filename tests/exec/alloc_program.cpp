// A program Cohort did not build, for the tests of `cohort exec`: it
// allocates device memory through the (fake) CUDA runtime and driver as its
// arguments say, one step per argument, and prints each step's result:
//   rt|managed|pitch|async|pool SIZE   the runtime API (cudaMalloc, ...)
//   drv|drvasync|vmm|vmmmap SIZE       the driver API, linked (vmmmap:
//                                      created, mapped and released; its
//                                      free unmaps it)
//   proc|ptsz SIZE                     the driver API through
//                                      cuGetProcAddress (ptsz: the
//                                      per-thread-stream variant)
//   free | free-all                    frees the last allocation, or all
//   in-use                             what the fake device holds
//   fork SIZE                          a child process allocates SIZE
//   threads N K SIZE                   N threads, K allocations and frees
//                                      of SIZE each, at once
//   hold                               prints "holding PID", then waits
//                                      to be killed
// SIZE is bytes, or with K or M.
#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

extern "C" {
int cudaMalloc(void**, size_t);
int cudaFree(void*);
int cudaMallocManaged(void**, size_t, unsigned int);
int cudaMallocPitch(void**, size_t*, size_t, size_t);
int cudaMallocAsync(void**, size_t, void*);
int cudaMallocFromPoolAsync(void**, size_t, void*, void*);
int cudaFreeAsync(void*, void*);
int cuMemAlloc_v2(unsigned long long*, size_t);
int cuMemFree_v2(unsigned long long);
int cuMemAllocAsync(unsigned long long*, size_t, void*);
int cuMemFreeAsync(unsigned long long, void*);
int cuMemCreate(unsigned long long*, size_t, const void*, unsigned long long);
int cuMemRelease(unsigned long long);
int cuMemMap(unsigned long long, size_t, size_t, unsigned long long,
             unsigned long long);
int cuMemUnmap(unsigned long long, size_t);
int cuMemRetainAllocationHandle(unsigned long long*, void*);
int cuGetProcAddress(const char*, void**, int, unsigned long long);
uint64_t fake_cuda_in_use();
}

namespace {

using alloc_t = int (*)(unsigned long long*, size_t);
using alloc_async_t = int (*)(unsigned long long*, size_t, void*);

struct held {
  std::string kind;
  uint64_t p;
  size_t bytes;
};

// Where the next VMM mapping goes (a made-up address range).
uint64_t next_va = uint64_t{1} << 40;

std::vector<held> allocations;

size_t size_of(const char* s) {
  char* end = nullptr;
  auto n = std::strtoull(s, &end, 10);
  if (*end == 'K')
    n <<= 10;
  else if (*end == 'M')
    n <<= 20;
  return n;
}

// The driver's entry point `name` through cuGetProcAddress, found with
// dlsym as a program that loads the driver itself finds it.
void* proc(const char* name, unsigned long long flags) {
  auto get = reinterpret_cast<decltype(&cuGetProcAddress)>(
      dlsym(RTLD_DEFAULT, "cuGetProcAddress"));
  void* fn = nullptr;
  if (get == nullptr || get(name, &fn, 12000, flags) != 0)
    return nullptr;
  return fn;
}

int allocate(const std::string& kind, size_t n) {
  void* p = nullptr;
  unsigned long long d = 0;
  int rc = -1;
  if (kind == "rt") {
    rc = cudaMalloc(&p, n);
  } else if (kind == "managed") {
    rc = cudaMallocManaged(&p, n, 1);
  } else if (kind == "pitch") {
    size_t pitch = 0;
    rc = cudaMallocPitch(&p, &pitch, n / 4, 4);
  } else if (kind == "async") {
    rc = cudaMallocAsync(&p, n, nullptr);
  } else if (kind == "pool") {
    rc = cudaMallocFromPoolAsync(&p, n, nullptr, nullptr);
  } else if (kind == "drv") {
    rc = cuMemAlloc_v2(&d, n);
  } else if (kind == "drvasync") {
    rc = cuMemAllocAsync(&d, n, nullptr);
  } else if (kind == "vmm") {
    rc = cuMemCreate(&d, n, nullptr, 0);
  } else if (kind == "vmmmap") {
    // Create, map, release: the mapping keeps it, as CUDA's samples do; a
    // second reference taken and dropped again on the way.
    unsigned long long h = 0, again = 0;
    rc = cuMemCreate(&h, n, nullptr, 0);
    if (rc == 0 && (rc = cuMemMap(next_va, n, 0, h, 0)) == 0) {
      rc =
          cuMemRetainAllocationHandle(&again, reinterpret_cast<void*>(next_va));
      if (rc == 0)
        rc = cuMemRelease(again);
      if (rc == 0)
        rc = cuMemRelease(h);
      d = next_va;
      next_va += n;
    }
  } else if (kind == "proc") {
    auto fn = reinterpret_cast<alloc_t>(proc("cuMemAlloc", 0));
    rc = fn != nullptr ? fn(&d, n) : -2;
  } else if (kind == "ptsz") {
    auto fn = reinterpret_cast<alloc_async_t>(proc("cuMemAllocAsync", 2));
    rc = fn != nullptr ? fn(&d, n, nullptr) : -2;
  }
  if (rc == 0)
    allocations.push_back(
        {kind, p != nullptr ? reinterpret_cast<uintptr_t>(p) : d, n});
  return rc;
}

int release(const held& h) {
  auto* p = reinterpret_cast<void*>(uintptr_t(h.p));
  if (h.kind == "async" || h.kind == "pool")
    return cudaFreeAsync(p, nullptr);
  if (h.kind == "rt" || h.kind == "managed" || h.kind == "pitch")
    return cudaFree(p);
  if (h.kind == "vmm")
    return cuMemRelease(h.p);
  if (h.kind == "vmmmap")
    return cuMemUnmap(h.p, h.bytes);
  if (h.kind == "drvasync")
    return cuMemFreeAsync(h.p, nullptr);
  if (h.kind == "ptsz") {
    using free_t = int (*)(unsigned long long, void*);
    auto fn = reinterpret_cast<free_t>(proc("cuMemFreeAsync", 2));
    return fn != nullptr ? fn(h.p, nullptr) : -2;
  }
  return cuMemFree_v2(h.p);
}

} // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  for (int i = 1; i < argc; ++i) {
    std::string step = argv[i];
    if (step == "free" || step == "free-all") {
      do {
        if (allocations.empty())
          break;
        auto h = allocations.back();
        allocations.pop_back();
        std::printf("free %s: %d\n", h.kind.c_str(), release(h));
      } while (step == "free-all");
    } else if (step == "in-use") {
      std::printf("in-use: %llu\n", (unsigned long long)fake_cuda_in_use());
    } else if (step == "hold") {
      std::printf("holding %d\n", int(getpid()));
      for (;;)
        pause();
    } else if (step == "threads" && i + 3 < argc) {
      // N threads, each K cudaMalloc + cudaFree pairs of SIZE at once.
      auto n = std::strtoul(argv[++i], nullptr, 10);
      auto k = std::strtoul(argv[++i], nullptr, 10);
      auto size = size_of(argv[++i]);
      std::atomic<unsigned long> failed{0};
      std::vector<std::thread> threads;
      for (unsigned long t = 0; t < n; ++t)
        threads.emplace_back([&] {
          for (unsigned long j = 0; j < k; ++j) {
            void* p = nullptr;
            if (cudaMalloc(&p, size) != 0 || cudaFree(p) != 0)
              ++failed;
          }
        });
      for (auto& t : threads)
        t.join();
      std::printf("threads: %lu failed\n", failed.load());
    } else if (step == "fork" && i + 1 < argc) {
      auto n = size_of(argv[++i]);
      auto pid = fork();
      if (pid == 0) {
        std::printf("child rt %zu: %d\n", n, allocate("rt", n));
        std::fflush(stdout);
        _exit(0);
      }
      int status = 0;
      waitpid(pid, &status, 0);
    } else if (i + 1 < argc) {
      auto n = size_of(argv[++i]);
      std::printf("%s %zu: %d\n", step.c_str(), n, allocate(step, n));
    } else {
      std::fprintf(stderr, "alloc_program: what is '%s'?\n", step.c_str());
      return 2;
    }
  }
  return 0;
}
