// A device-memory pool over large slabs from an upstream resource: address-
// ordered best fit with coalescing, size classes with per-class caches for
// small blocks, reuse in stream order, zero-on-free, reservations, a release
// threshold and defragmentation. Backend-agnostic: simulated GPUs, CUDA and
// HIP give it their upstream and their stream_ordering.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <memory_resource>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include <caf/meta/type_name.hpp>

#include "devices/memory/memory_resource.hpp"
#include "devices/memory/stream_ordering.hpp"

namespace cohort::devices::memory {

/// How a pool grows, reuses and gives back memory.
struct pool_options {
  /// Taken from the upstream when the pool is made (0: on first use).
  uint64_t initial_bytes = 0;
  /// Growth step: a new slab holds at least this much, or the request.
  uint64_t slab_bytes = uint64_t{64} << 20;
  /// Bytes of wholly free slabs kept by `trim`; the rest go back upstream.
  uint64_t release_threshold = UINT64_MAX;
  /// Zero every block as it is freed (on the stream it is freed on), so that
  /// no tenant ever reads what another left behind.
  bool zero_on_free = true;
  /// Zero every new slab before use (devices whose fresh memory is not
  /// cleared: real GPUs; fresh host mappings already are). device_memory
  /// sets it for the device it serves.
  bool zero_new_slabs = false;
  /// Fragmentation (0..1) above which `maintain` defragments.
  double defrag_threshold = 0.5;
  /// Requests up to this size are rounded to size classes; their blocks are
  /// cached per class when freed, for reuse without a search.
  uint64_t small_limit = uint64_t{1} << 20;
  /// Most bytes held in the per-class caches; frees beyond coalesce at once.
  uint64_t class_cache_bytes = uint64_t{32} << 20;
};

/// A pool's options travel to the balancer with a device a rescan adds.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, pool_options& x) {
  return f(caf::meta::type_name("pool_options"), x.initial_bytes, x.slab_bytes,
           x.release_threshold, x.zero_on_free, x.zero_new_slabs,
           x.defrag_threshold, x.small_limit, x.class_cache_bytes);
}

/// Checks `opts`: none, or invalid_arguments naming the bad option.
caf::error validate(const pool_options& opts);

/// Options sized for a device of `capacity` bytes: slabs of 1/64 of it (2 MiB
/// to 1 GiB), a quarter of it kept when trimming, caches of 1/32 of it (at
/// most 32 MiB).
pool_options sized_pool_options(uint64_t capacity);

/// A pool's shape and counters.
struct pool_stats {
  /// Bytes of slabs taken from the upstream.
  uint64_t held_bytes = 0;
  /// Bytes of blocks handed out (rounded sizes) and bytes asked for.
  uint64_t live_bytes = 0;
  uint64_t requested_bytes = 0;
  /// held - live - quarantined: in the coalescing heap or the class caches.
  uint64_t free_bytes = 0;
  uint64_t cached_bytes = 0;
  /// Blocks whose zero fill failed: never handed out again (until reset).
  uint64_t quarantined_bytes = 0;
  /// The largest block one allocation could get without growing the pool.
  uint64_t largest_free = 0;
  /// Reserved bytes not yet drawn by their tenant.
  uint64_t reserved_bytes = 0;
  uint64_t live_blocks = 0;
  uint64_t free_blocks = 0;
  uint64_t slabs = 0;
  uint64_t peak_live_bytes = 0;
  uint64_t peak_held_bytes = 0;
  uint64_t allocations = 0;
  uint64_t deallocations = 0;
  /// Allocations served from a class cache without a search.
  uint64_t cache_hits = 0;
  uint64_t slab_allocations = 0;
  uint64_t slab_releases = 0;
  uint64_t defragmentations = 0;
  /// Reuses of a block freed on another stream whose fence had not been
  /// reached: the new stream was made to wait for it on the device.
  uint64_t cross_stream_waits = 0;

  /// 1 - largest_free / free_bytes: 0 when free memory is one block, near 1
  /// when it is scattered in small pieces.
  double fragmentation() const;
};

class pool_resource final : public memory_resource {
public:
  /// Streams up to this many per device get their fences tracked per block.
  static constexpr uint32_t max_streams = 16;

  /// Slabs come from `upstream`, fences and zero fills from `streams`; both
  /// must outlive the pool. `opts` must pass `validate`.
  pool_resource(memory_resource& upstream, stream_ordering& streams,
                pool_options opts);
  ~pool_resource() override;

  pool_resource(const pool_resource&) = delete;
  pool_resource& operator=(const pool_resource&) = delete;

  /// Reserves `bytes` for `tenant` (a declared peak): grows the pool so that
  /// they are free, and keeps other owners from taking them. The tenant's
  /// allocations draw on the reservation first. Replaces an earlier
  /// reservation of the tenant; 0 drops it. Errors: out_of_memory when the
  /// upstream cannot provide the memory (the old reservation then stays).
  caf::error reserve(const std::string& tenant, uint64_t bytes);

  /// The tenant's reservation (0 if none) and what of it is not drawn.
  uint64_t reservation(const std::string& tenant) const;

  /// Returns cached small blocks to the coalescing heap and trims. Returns
  /// the fragmentation after it.
  double defragment();

  /// Gives wholly free slabs whose fences were reached back to the upstream
  /// while more than `release_threshold` bytes of them are held (and never
  /// memory that reservations need). Returns the bytes released.
  uint64_t trim();

  /// Periodic upkeep (the device's health tick): defragments when the
  /// fragmentation is above the threshold and the class caches hold at least
  /// an eighth of the free memory, then trims.
  void maintain();

  /// Forgets every block and slab (quarantined ones too). With `upstream_gone`
  /// (the device context was destroyed, taking the memory with it) slabs are
  /// not returned to the upstream. Reservations are kept and taken again on the
  /// next allocation. Returns the blocks that were still handed out.
  uint64_t reset(bool upstream_gone);

  /// The size a request of `bytes` occupies (its class or its alignment).
  uint64_t rounded_size(uint64_t bytes) const;

  pool_stats stats() const;

  const pool_options& options() const { return opts_; }

  /// Walks every slab and checks that its blocks tile it without overlap,
  /// that no two free heap blocks touch (full coalescing) and that the
  /// counters add up. Empty when all holds, otherwise the first violation.
  /// O(blocks); for tests.
  std::string check_invariants() const;

private:
  /// Fence numbers each stream must pass before a block may be reused on
  /// another stream (0: nothing to wait for).
  using fence_set = std::array<uint64_t, max_streams>;

  struct slab {
    uintptr_t base = 0;
    uint64_t size = 0;
    /// Bytes of this slab handed out or in class caches.
    uint64_t busy = 0;
    bool in_use = false;
  };
  struct free_block {
    uint64_t size = 0;
    uint32_t slab = 0;
    fence_set fences{};
  };
  struct live_block {
    uint64_t size = 0;
    uint64_t requested = 0;
    uint32_t slab = 0;
    /// Size class + 1 for small blocks, 0 for heap blocks.
    uint16_t cls = 0;
    /// Bytes drawn from the owner's reservation.
    uint64_t from_reservation = 0;
    std::string tenant;
  };
  struct cached_block {
    uintptr_t addr = 0;
    uint32_t slab = 0;
    fence_set fences{};
  };
  struct reservation_entry {
    uint64_t bytes = 0;
    uint64_t drawn = 0;
  };
  struct quarantined_block {
    uintptr_t addr = 0;
    uint64_t size = 0;
    uint32_t slab = 0;
  };
  using free_map = std::pmr::map<uintptr_t, free_block>;

  caf::expected<void*> do_allocate(size_t bytes, stream_ref stream,
                                   const owner_tag& owner) override;
  caf::error do_deallocate(void* p, size_t bytes, stream_ref stream) override;

  /// Index of the class of `bytes` (small requests only).
  uint16_t class_of(uint64_t bytes) const;
  /// Class index + 1 of a small request, 0 for one served by the heap.
  uint16_t class_index(uint64_t bytes) const;
  uint64_t class_size(uint16_t cls) const { return class_sizes_[cls]; }

  /// Takes a block of `size` from the heap: best fit, lowest address first.
  bool take_from_heap(uint64_t size, uintptr_t& addr, uint32_t& slab,
                      fence_set& fences);
  /// Puts a free range into the heap, merging it with free neighbours.
  void give_to_heap(uintptr_t addr, uint64_t size, uint32_t slab,
                    const fence_set& fences);
  void erase_free(free_map::iterator i);
  /// Empties the class caches into the heap.
  void flush_caches();
  /// Takes a new slab of at least `size` from the upstream.
  caf::error grow(uint64_t size);
  void release_slab(uint32_t index);
  /// Makes `stream` safe to use a block with `fences` (records and waits on
  /// fences of other streams as needed).
  caf::error order_for(stream_ref stream, const fence_set& fences);
  /// True when every fence of `fences` is known reached (records the ones
  /// not recorded yet, so that a later call can find them reached).
  bool settled(const fence_set& fences);
  /// The fences a block freed now on `stream` must wait for.
  fence_set fences_after(stream_ref stream) const;
  /// Bytes of free memory an allocation of `owner` may not take because
  /// other tenants reserved them.
  uint64_t reserved_for_others(const std::string& tenant) const;
  uint64_t unclaimed_reservations() const;
  /// Bytes free in the heap and caches.
  uint64_t free_bytes() const {
    return held_bytes_ - live_bytes_ - quarantined_bytes_;
  }
  /// Takes the fence numbers from the ordering (a new or reset pool).
  void sync_fences();
  uint64_t largest_free() const;
  caf::error out_of_memory(uint64_t bytes, const std::string& why) const;

  memory_resource& upstream_;
  stream_ordering& streams_;
  /// Under AddressSanitizer, with host memory upstream: every byte of a slab
  /// not handed out (free, cached, quarantined, a block's rounding) stays
  /// poisoned, so that an overflow inside simulated device memory is caught.
  bool poison_ = false;
  pool_options opts_;
  std::vector<uint64_t> class_sizes_;

  // Node storage for the maps below: one bump-and-reuse pool instead of a
  // malloc per node (the bookkeeping target is well under a microsecond).
  std::pmr::unsynchronized_pool_resource nodes_;
  std::vector<slab> slabs_;
  free_map free_by_addr_;
  std::pmr::set<std::pair<uint64_t, uintptr_t>> free_by_size_;
  std::pmr::unordered_map<uintptr_t, live_block> live_;
  std::vector<std::vector<cached_block>> caches_;
  std::vector<quarantined_block> quarantined_;
  std::map<std::string, reservation_entry, std::less<>> reservations_;

  /// Per stream: fences recorded so far, and the highest known reached.
  std::array<uint64_t, max_streams> recorded_{};
  std::array<uint64_t, max_streams> reached_{};

  uint64_t held_bytes_ = 0;
  uint64_t live_bytes_ = 0;
  uint64_t requested_bytes_ = 0;
  uint64_t cached_bytes_ = 0;
  uint64_t quarantined_bytes_ = 0;
  pool_stats counters_;
};

} // namespace cohort::devices::memory
