// A stand-in for libcudart.so in the tests of `cohort exec`'s shim. Like
// the real runtime it reaches the driver by dlopen and cuGetProcAddress
// (never through the driver's exported symbols), so an allocation made
// here passes through the shim twice: once as a runtime call, once as the
// driver calls inside it, and must be charged once.
#include <dlfcn.h>

#include <cstdlib>

namespace {

using cudaError_t = int;
using CUresult = int;
using CUdeviceptr = unsigned long long;
using proc_t = CUresult (*)(const char*, void**, int, unsigned long long);

constexpr cudaError_t cudaSuccess = 0;
constexpr cudaError_t cudaErrorMemoryAllocation = 2;
constexpr cudaError_t cudaErrorInitializationError = 3;

// The driver's entry point `name`, as CUDA 12.0 asks for it.
template <class F> F driver(const char* name) {
  static proc_t proc = [] {
    auto* lib = std::getenv("COHORT_FAKE_CUDA_LIB");
    void* h = dlopen(lib != nullptr ? lib : "libfake_cuda.so",
                     RTLD_NOW | RTLD_GLOBAL);
    return h != nullptr ? reinterpret_cast<proc_t>(dlsym(h, "cuGetProcAddress"))
                        : nullptr;
  }();
  void* fn = nullptr;
  if (proc == nullptr || proc(name, &fn, 12000, 0) != 0)
    return nullptr;
  return reinterpret_cast<F>(fn);
}

cudaError_t of(CUresult rc) {
  return rc == 0   ? cudaSuccess
         : rc == 2 ? cudaErrorMemoryAllocation
                   : cudaErrorInitializationError;
}

} // namespace

extern "C" {

cudaError_t cudaMalloc(void** p, size_t n) {
  static auto alloc = driver<CUresult (*)(CUdeviceptr*, size_t)>("cuMemAlloc");
  if (alloc == nullptr)
    return cudaErrorInitializationError;
  CUdeviceptr d = 0;
  auto rc = alloc(&d, n);
  *p = reinterpret_cast<void*>(d);
  return of(rc);
}

cudaError_t cudaFree(void* p) {
  static auto free = driver<CUresult (*)(CUdeviceptr)>("cuMemFree");
  if (free == nullptr)
    return cudaErrorInitializationError;
  return of(free(reinterpret_cast<CUdeviceptr>(p)));
}

cudaError_t cudaMallocManaged(void** p, size_t n, unsigned int flags) {
  static auto alloc = driver<CUresult (*)(CUdeviceptr*, size_t, unsigned int)>(
      "cuMemAllocManaged");
  if (alloc == nullptr)
    return cudaErrorInitializationError;
  CUdeviceptr d = 0;
  auto rc = alloc(&d, n, flags);
  *p = reinterpret_cast<void*>(d);
  return of(rc);
}

cudaError_t cudaMallocPitch(void** p, size_t* pitch, size_t w, size_t h) {
  static auto alloc =
      driver<CUresult (*)(CUdeviceptr*, size_t*, size_t, size_t, unsigned int)>(
          "cuMemAllocPitch");
  if (alloc == nullptr)
    return cudaErrorInitializationError;
  CUdeviceptr d = 0;
  auto rc = alloc(&d, pitch, w, h, 4);
  *p = reinterpret_cast<void*>(d);
  return of(rc);
}

cudaError_t cudaMallocAsync(void** p, size_t n, void* stream) {
  static auto alloc =
      driver<CUresult (*)(CUdeviceptr*, size_t, void*)>("cuMemAllocAsync");
  if (alloc == nullptr)
    return cudaErrorInitializationError;
  CUdeviceptr d = 0;
  auto rc = alloc(&d, n, stream);
  *p = reinterpret_cast<void*>(d);
  return of(rc);
}

cudaError_t cudaMallocFromPoolAsync(void** p, size_t n, void* pool,
                                    void* stream) {
  static auto alloc = driver<CUresult (*)(CUdeviceptr*, size_t, void*, void*)>(
      "cuMemAllocFromPoolAsync");
  if (alloc == nullptr)
    return cudaErrorInitializationError;
  CUdeviceptr d = 0;
  auto rc = alloc(&d, n, pool, stream);
  *p = reinterpret_cast<void*>(d);
  return of(rc);
}

cudaError_t cudaFreeAsync(void* p, void* stream) {
  static auto free = driver<CUresult (*)(CUdeviceptr, void*)>("cuMemFreeAsync");
  if (free == nullptr)
    return cudaErrorInitializationError;
  return of(free(reinterpret_cast<CUdeviceptr>(p), stream));
}

} // extern "C"
