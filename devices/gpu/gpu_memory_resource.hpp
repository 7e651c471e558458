// The upstream of a GPU's pool: device memory straight from the vendor
// runtime (cudaMalloc / hipMalloc through gpu::api). Only the pool calls it,
// for slabs, so the driver's allocation and its synchronizing free stay off
// the per-launch path.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "devices/gpu/api.hpp"
#include "devices/memory/memory_resource.hpp"

namespace cohort::devices::gpu {

/// Not thread-safe; calls act on GPU `ordinal`.
class gpu_memory_resource final : public memory::memory_resource {
public:
  gpu_memory_resource(std::shared_ptr<api> rt, int ordinal, std::string device);

  /// Bytes allocated from the driver and not freed.
  uint64_t used() const { return used_; }

private:
  caf::expected<void*> do_allocate(size_t bytes, memory::stream_ref stream,
                                   const memory::owner_tag& owner) override;
  caf::error do_deallocate(void* p, size_t bytes,
                           memory::stream_ref stream) override;
  void do_forget_all() override;
  caf::expected<memory::shared_region> do_share(const void* p) override;

  std::shared_ptr<api> rt_;
  int ordinal_;
  std::string device_;
  uint64_t used_ = 0;
  /// By address, to find the slab holding a pointer.
  std::map<void*, size_t> blocks_;
};

} // namespace cohort::devices::gpu
