// Device memory of a simulated GPU: real host memory, mapped in slabs and
// metered against the simulated capacity. Because the memory is real, the
// pool's bookkeeping (no overlap, zero-on-free) is checked by reading it.
#pragma once

#include <cstdint>
#include <unordered_map>

#include "devices/memory/memory_resource.hpp"

namespace cohort::devices::memory {

/// Anonymous host mappings (pages are only backed once touched), at most
/// `capacity` bytes at once; refusals are out_of_memory. Not thread-safe.
class host_slab_resource final : public memory_resource {
public:
  /// `device` names the owner in error messages.
  host_slab_resource(std::string device, uint64_t capacity);
  ~host_slab_resource() override;

  host_slab_resource(const host_slab_resource&) = delete;
  host_slab_resource& operator=(const host_slab_resource&) = delete;

  uint64_t capacity() const { return capacity_; }
  uint64_t used() const { return used_; }

private:
  caf::expected<void*> do_allocate(size_t bytes, stream_ref stream,
                                   const owner_tag& owner) override;
  caf::error do_deallocate(void* p, size_t bytes, stream_ref stream) override;
  bool do_host_memory() const override { return true; }

  std::string device_;
  uint64_t capacity_;
  uint64_t used_ = 0;
  std::unordered_map<void*, size_t> maps_;
};

} // namespace cohort::devices::memory
