// Device memory of a simulated GPU: real host memory, mapped in slabs and
// metered against the simulated capacity. Because the memory is real, the
// pool's bookkeeping (no overlap, zero-on-free) is checked by reading it.
#pragma once

#include <cstdint>
#include <map>

#include "devices/memory/memory_resource.hpp"

namespace cohort::devices::memory {

/// Host mappings of memfds, one per slab (pages are only backed once
/// touched), at most `capacity` bytes at once; refusals are out_of_memory.
/// Being memfds, the slabs can be mapped by another process (`share`, as a
/// real GPU's allocations are through CUDA IPC); where memfd_create is
/// refused the slabs are anonymous and cannot be shared. Not thread-safe.
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
  caf::expected<shared_region> do_share(const void* p) override;

  struct slab {
    size_t bytes = 0;
    /// The memfd behind it; -1 for an anonymous mapping.
    int fd = -1;
  };

  std::string device_;
  uint64_t capacity_;
  uint64_t used_ = 0;
  /// By address, to find the slab holding a pointer.
  std::map<char*, slab> maps_;
};

} // namespace cohort::devices::memory
