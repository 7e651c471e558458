// Pinned host staging buffers of one GPU: page-locked, NUMA-local to the GPU,
// reused across launches (pinning costs milliseconds; a launch costs
// microseconds). Only the owning device (its actor) calls it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "devices/gpu/api.hpp"

namespace cohort::devices::gpu {

/// A page-locked host block.
struct staging_block {
  void* data = nullptr;
  size_t capacity = 0;
};

class staging_pool {
public:
  /// Blocks come from NUMA node `numa_node` (-1: anywhere) and are pinned
  /// through `rt`. At most `cache_bytes` of released blocks are kept.
  staging_pool(api& rt, int32_t numa_node, uint64_t cache_bytes);
  ~staging_pool();

  staging_pool(const staging_pool&) = delete;
  staging_pool& operator=(const staging_pool&) = delete;

  /// A block of at least `bytes` (rounded up to a power of two, 64 KiB at
  /// least): a cached block of that size, else a cached one up to four
  /// times larger (pinning costs far more than the memory it would save),
  /// else a new one. `data` is null when the host could not allocate or
  /// pin it.
  staging_block acquire(size_t bytes, result& rc);

  /// Returns a block for reuse. Keeping it may evict the blocks released
  /// longest ago: the sizes in use now displace the sizes of earlier work.
  /// A block larger than the whole cache is freed.
  void release(staging_block block);

  /// Frees every cached block (after a device reset: the old registrations
  /// went with the context).
  void clear(bool registered);

  /// Bytes of cached (free) blocks.
  uint64_t cached_bytes() const { return cached_; }

  /// Blocks allocated and pinned so far (for tests and statistics).
  uint64_t pinned_allocations() const { return allocations_; }

private:
  struct cached_block {
    staging_block block;
    uint64_t released = 0; // release order, for eviction
  };

  void free_block(staging_block block, bool registered);
  /// Frees the cached block released longest ago; false when none is.
  bool evict_oldest();

  api& rt_;
  int32_t numa_node_;
  uint64_t cache_limit_;
  uint64_t cached_ = 0;
  uint64_t allocations_ = 0;
  uint64_t releases_ = 0;
  /// Free blocks by size class (index = log2 of the capacity), each in
  /// release order.
  std::vector<std::vector<cached_block>> free_;
};

} // namespace cohort::devices::gpu
