// Every live allocation with its owner, as an adaptor over any resource: the
// leak report (what is still held, by whom, since when), and a guard that
// turns double and foreign frees into errors before they reach the resource.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory_resource>
#include <string>
#include <unordered_map>
#include <vector>

#include "devices/memory/memory_resource.hpp"

namespace cohort::devices::memory {

/// One allocation still held.
struct allocation_record {
  void* p = nullptr;
  uint64_t bytes = 0;
  owner_tag owner;
  /// Order of allocation (1, 2, ...) and when it happened.
  uint64_t seq = 0;
  std::chrono::steady_clock::time_point at;
};

/// Not thread-safe.
class tracking_adaptor final : public memory_resource {
public:
  explicit tracking_adaptor(memory_resource& upstream, std::string device);

  /// Live allocations, oldest first.
  std::vector<allocation_record> live() const;
  size_t live_count() const { return live_.size(); }
  uint64_t live_bytes() const { return bytes_; }

  /// What is still held, grouped by owner: empty when nothing is.
  std::string leak_report(size_t max_lines = 20) const;

  /// Forgets every allocation (the device was reset and took them along);
  /// returns how many there were.
  size_t forget_all();

private:
  caf::expected<void*> do_allocate(size_t bytes, stream_ref stream,
                                   const owner_tag& owner) override;
  caf::error do_deallocate(void* p, size_t bytes, stream_ref stream) override;

  memory_resource& upstream_;
  std::string device_;
  uint64_t seq_ = 0;
  uint64_t bytes_ = 0;
  /// Its nodes come from a pool, not the heap (one per live block).
  std::pmr::unsynchronized_pool_resource nodes_;
  std::pmr::unordered_map<void*, allocation_record> live_{&nodes_};
};

} // namespace cohort::devices::memory
