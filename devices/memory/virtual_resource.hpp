// Address space without memory: what a pool needs to plan. Dry runs
// (`cohort simulate`, the quota actor's simulate) and the pool benchmark's
// bookkeeping figures run the real pool over it; nothing may be read or
// written at the addresses it hands out.
#pragma once

#include <cstdint>
#include <map>

#include "devices/memory/memory_resource.hpp"

namespace cohort::devices::memory {

/// Hands out non-overlapping, never-mapped address ranges, at most
/// `capacity` bytes at once; refusals are out_of_memory. Not thread-safe.
class virtual_resource final : public memory_resource {
public:
  explicit virtual_resource(std::string device, uint64_t capacity);

  uint64_t capacity() const { return capacity_; }
  uint64_t used() const { return used_; }

private:
  caf::expected<void*> do_allocate(size_t bytes, stream_ref stream,
                                   const owner_tag& owner) override;
  caf::error do_deallocate(void* p, size_t bytes, stream_ref stream) override;

  std::string device_;
  uint64_t capacity_;
  uint64_t used_ = 0;
  /// Next address handed out; ranges are never reused, so a stale pointer
  /// can never alias a new range.
  uintptr_t next_;
  std::map<uintptr_t, size_t> ranges_;
};

} // namespace cohort::devices::memory
