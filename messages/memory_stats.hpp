// A device's memory as reported to the balancer, the CLI and tests: the plain
// C++ form the device actor sends (registered in system_config.cpp).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include <caf/meta/type_name.hpp>

namespace cohort {

/// One device's memory at one moment.
struct memory_snapshot {
  std::string device;
  bool simulated = false;
  /// The device's memory, and the configured limit on its use.
  uint64_t capacity = 0;
  uint64_t limit = 0;
  /// Bytes handed out (as requested) now, and at most so far.
  uint64_t used = 0;
  uint64_t peak_used = 0;
  /// Bytes the pool holds from the device (its slabs), now and at most.
  uint64_t held = 0;
  uint64_t peak_held = 0;
  /// Free bytes inside the pool and the largest free block.
  uint64_t free_in_pool = 0;
  uint64_t largest_free = 0;
  /// 1 - largest_free / free_in_pool.
  double fragmentation = 0;
  /// Reserved bytes not yet drawn by their tenants.
  uint64_t reserved = 0;
  uint64_t live_allocations = 0;
  uint64_t allocations = 0;
  uint64_t deallocations = 0;
  /// Frees refused as double, foreign or of the wrong size.
  uint64_t invalid_frees = 0;
  uint64_t cache_hits = 0;
  uint64_t slab_allocations = 0;
  uint64_t slab_releases = 0;
  uint64_t defragmentations = 0;
  uint64_t cross_stream_waits = 0;
  uint64_t injected_failures = 0;
  /// Allocations a device reset took along (their launches were re-placed).
  uint64_t dropped_at_reset = 0;
  /// Refused allocations by error name ("out_of_memory", "memory_limit").
  std::map<std::string, uint64_t> refused;
  /// Bytes in use per tenant.
  std::map<std::string, uint64_t> used_by_tenant;
  /// Freed blocks are zeroed before reuse (tenant isolation).
  bool zero_on_free = false;
  /// What is still held, by owner (empty when nothing is).
  std::string leak_report;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, memory_snapshot& x) {
  return f(caf::meta::type_name("memory_snapshot"), x.device, x.simulated,
           x.capacity, x.limit, x.used, x.peak_used, x.held, x.peak_held,
           x.free_in_pool, x.largest_free, x.fragmentation, x.reserved,
           x.live_allocations, x.allocations, x.deallocations, x.invalid_frees,
           x.cache_hits, x.slab_allocations, x.slab_releases,
           x.defragmentations, x.cross_stream_waits, x.injected_failures,
           x.dropped_at_reset, x.refused, x.used_by_tenant, x.zero_on_free,
           x.leak_report);
}

} // namespace cohort
