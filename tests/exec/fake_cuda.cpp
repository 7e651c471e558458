// A stand-in for libcuda.so.1 in the tests of `cohort exec`'s shim: the
// driver's allocation entry points over malloc, with a device of
// COHORT_FAKE_CUDA_MEMORY bytes (default 1 GiB), and cuGetProcAddress
// answering them as the real driver does (by base name, the per-thread
// stream variants on request).
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

namespace {

using CUresult = int;
using CUdeviceptr = unsigned long long;
using handle_t = unsigned long long;

constexpr CUresult CUDA_SUCCESS = 0;
constexpr CUresult CUDA_ERROR_INVALID_VALUE = 1;
constexpr CUresult CUDA_ERROR_OUT_OF_MEMORY = 2;
constexpr CUresult CUDA_ERROR_NOT_FOUND = 500;
constexpr unsigned long long CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM = 2;

std::mutex mtx;
std::map<CUdeviceptr, size_t> blocks;
// VMM allocations: their bytes and references (the handle, mappings).
struct vmm {
  size_t bytes = 0;
  unsigned refs = 0;
};
std::map<handle_t, vmm> handles;
std::map<CUdeviceptr, handle_t> mappings;
handle_t next_handle = 1;
uint64_t in_use = 0;

// Read once: a getenv per call would cost more with every variable in the
// environment, and the shim's session adds some (bench/exec).
uint64_t capacity() {
  static const uint64_t bytes = [] {
    auto* v = std::getenv("COHORT_FAKE_CUDA_MEMORY");
    return v != nullptr ? std::strtoull(v, nullptr, 10) : uint64_t{1} << 30;
  }();
  return bytes;
}

CUresult take(CUdeviceptr* p, size_t n) {
  if (p == nullptr)
    return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> guard{mtx};
  if (in_use + n > capacity())
    return CUDA_ERROR_OUT_OF_MEMORY;
  auto* block = std::malloc(n == 0 ? 1 : n);
  if (block == nullptr)
    return CUDA_ERROR_OUT_OF_MEMORY;
  *p = reinterpret_cast<uintptr_t>(block);
  blocks[*p] = n;
  in_use += n;
  return CUDA_SUCCESS;
}

CUresult give(CUdeviceptr p) {
  std::lock_guard<std::mutex> guard{mtx};
  auto i = blocks.find(p);
  if (i == blocks.end())
    return CUDA_ERROR_INVALID_VALUE;
  in_use -= i->second;
  std::free(reinterpret_cast<void*>(uintptr_t(p)));
  blocks.erase(i);
  return CUDA_SUCCESS;
}

} // namespace

extern "C" {

/// Bytes held by the fake device now.
uint64_t fake_cuda_in_use() {
  std::lock_guard<std::mutex> guard{mtx};
  return in_use;
}

CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t n) {
  return take(p, n);
}

CUresult cuMemFree_v2(CUdeviceptr p) {
  return give(p);
}

CUresult cuMemAllocPitch_v2(CUdeviceptr* p, size_t* pitch, size_t w, size_t h,
                            unsigned int) {
  if (pitch == nullptr)
    return CUDA_ERROR_INVALID_VALUE;
  *pitch = (w + 511) / 512 * 512;
  return take(p, *pitch * h);
}

CUresult cuMemAllocManaged(CUdeviceptr* p, size_t n, unsigned int) {
  return take(p, n);
}

CUresult cuMemAllocAsync(CUdeviceptr* p, size_t n, void*) {
  return take(p, n);
}

CUresult cuMemAllocAsync_ptsz(CUdeviceptr* p, size_t n, void*) {
  return take(p, n);
}

CUresult cuMemAllocFromPoolAsync(CUdeviceptr* p, size_t n, void*, void*) {
  return take(p, n);
}

CUresult cuMemFreeAsync(CUdeviceptr p, void*) {
  return give(p);
}

CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, void*) {
  return give(p);
}

CUresult cuMemCreate(handle_t* h, size_t n, const void*, unsigned long long) {
  if (h == nullptr)
    return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> guard{mtx};
  if (in_use + n > capacity())
    return CUDA_ERROR_OUT_OF_MEMORY;
  *h = next_handle++;
  handles[*h] = {n, 1};
  in_use += n;
  return CUDA_SUCCESS;
}

namespace {

// Drops a reference of `h`; its memory goes with the last.
CUresult drop(handle_t h) {
  auto i = handles.find(h);
  if (i == handles.end())
    return CUDA_ERROR_INVALID_VALUE;
  if (--i->second.refs == 0) {
    in_use -= i->second.bytes;
    handles.erase(i);
  }
  return CUDA_SUCCESS;
}

} // namespace

CUresult cuMemRelease(handle_t h) {
  std::lock_guard<std::mutex> guard{mtx};
  return drop(h);
}

CUresult cuMemMap(CUdeviceptr va, size_t, size_t, handle_t h,
                  unsigned long long) {
  std::lock_guard<std::mutex> guard{mtx};
  auto i = handles.find(h);
  if (i == handles.end() || mappings.contains(va))
    return CUDA_ERROR_INVALID_VALUE;
  ++i->second.refs;
  mappings[va] = h;
  return CUDA_SUCCESS;
}

CUresult cuMemUnmap(CUdeviceptr va, size_t size) {
  std::lock_guard<std::mutex> guard{mtx};
  auto i = mappings.lower_bound(va);
  if (i == mappings.end() || i->first >= va + size)
    return CUDA_ERROR_INVALID_VALUE;
  while (i != mappings.end() && i->first < va + size) {
    drop(i->second);
    i = mappings.erase(i);
  }
  return CUDA_SUCCESS;
}

CUresult cuMemRetainAllocationHandle(handle_t* h, void* addr) {
  std::lock_guard<std::mutex> guard{mtx};
  auto i = mappings.find(reinterpret_cast<uintptr_t>(addr));
  if (h == nullptr || i == mappings.end())
    return CUDA_ERROR_INVALID_VALUE;
  *h = i->second;
  ++handles[*h].refs;
  return CUDA_SUCCESS;
}

CUresult cuGetProcAddress(const char* symbol, void** pfn, int version,
                          unsigned long long flags);

CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version,
                             unsigned long long flags, void* status) {
  if (status != nullptr)
    std::memset(status, 0, sizeof(int));
  return cuGetProcAddress(symbol, pfn, version, flags);
}

CUresult cuGetProcAddress(const char* symbol, void** pfn, int version,
                          unsigned long long flags) {
  if (symbol == nullptr || pfn == nullptr)
    return CUDA_ERROR_INVALID_VALUE;
  bool ptsz = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  struct entry {
    const char* name;
    void* fn;
    void* per_thread;
  };
  const entry table[] = {
      {"cuMemAlloc", reinterpret_cast<void*>(&cuMemAlloc_v2), nullptr},
      {"cuMemFree", reinterpret_cast<void*>(&cuMemFree_v2), nullptr},
      {"cuMemAllocPitch", reinterpret_cast<void*>(&cuMemAllocPitch_v2),
       nullptr},
      {"cuMemAllocManaged", reinterpret_cast<void*>(&cuMemAllocManaged),
       nullptr},
      {"cuMemAllocAsync", reinterpret_cast<void*>(&cuMemAllocAsync),
       reinterpret_cast<void*>(&cuMemAllocAsync_ptsz)},
      {"cuMemAllocFromPoolAsync",
       reinterpret_cast<void*>(&cuMemAllocFromPoolAsync), nullptr},
      {"cuMemFreeAsync", reinterpret_cast<void*>(&cuMemFreeAsync),
       reinterpret_cast<void*>(&cuMemFreeAsync_ptsz)},
      {"cuMemCreate", reinterpret_cast<void*>(&cuMemCreate), nullptr},
      {"cuMemRelease", reinterpret_cast<void*>(&cuMemRelease), nullptr},
      {"cuMemMap", reinterpret_cast<void*>(&cuMemMap), nullptr},
      {"cuMemUnmap", reinterpret_cast<void*>(&cuMemUnmap), nullptr},
      {"cuMemRetainAllocationHandle",
       reinterpret_cast<void*>(&cuMemRetainAllocationHandle), nullptr},
      {"cuGetProcAddress",
       version >= 12050 ? reinterpret_cast<void*>(&cuGetProcAddress_v2)
                        : reinterpret_cast<void*>(&cuGetProcAddress),
       nullptr},
  };
  for (auto& e : table)
    if (std::strcmp(symbol, e.name) == 0) {
      *pfn = ptsz && e.per_thread != nullptr ? e.per_thread : e.fn;
      return CUDA_SUCCESS;
    }
  *pfn = nullptr;
  return CUDA_ERROR_NOT_FOUND;
}

} // extern "C"
