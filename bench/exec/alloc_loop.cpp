// The program bench/exec runs with and without the shim: N allocations and
// frees through the (fake) CUDA runtime or driver, timed.
//   alloc_loop rt|drv PAIRS BYTES   prints "ns_per_pair X"
//   alloc_loop hold BYTES           allocates, prints "holding", waits
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

extern "C" {
int cudaMalloc(void**, size_t);
int cudaFree(void*);
int cuMemAlloc_v2(unsigned long long*, size_t);
int cuMemFree_v2(unsigned long long);
}

namespace {

// One allocation and its free; false when either failed.
bool pair(bool runtime, size_t bytes) {
  if (runtime) {
    void* p = nullptr;
    return cudaMalloc(&p, bytes) == 0 && cudaFree(p) == 0;
  }
  unsigned long long d = 0;
  return cuMemAlloc_v2(&d, bytes) == 0 && cuMemFree_v2(d) == 0;
}

} // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "hold" && argc == 3) {
    void* p = nullptr;
    if (cudaMalloc(&p, std::strtoull(argv[2], nullptr, 10)) != 0)
      return 1;
    std::printf("holding\n");
    for (;;)
      pause();
  }
  if ((mode != "rt" && mode != "drv") || argc != 4) {
    std::fprintf(stderr, "usage: alloc_loop rt|drv PAIRS BYTES | hold BYTES\n");
    return 2;
  }
  bool runtime = mode == "rt";
  auto pairs = std::strtoull(argv[2], nullptr, 10);
  auto bytes = std::strtoull(argv[3], nullptr, 10);
  for (int i = 0; i < 1000; ++i)
    if (!pair(runtime, bytes))
      return 1;
  auto t0 = std::chrono::steady_clock::now();
  for (unsigned long long i = 0; i < pairs; ++i)
    if (!pair(runtime, bytes))
      return 1;
  auto ns = std::chrono::duration<double, std::nano>(
                std::chrono::steady_clock::now() - t0)
                .count();
  std::printf("ns_per_pair %.1f\n", ns / double(pairs));
  return 0;
}
