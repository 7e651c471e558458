// Allocation counters, as an adaptor over any resource: results of every
// allocation (by error code), bytes in use, peak and total.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>

#include "devices/memory/memory_resource.hpp"

namespace cohort::devices::memory {

/// What a statistics_adaptor counted.
struct allocation_counts {
  uint64_t allocations = 0;
  uint64_t deallocations = 0;
  /// Deallocations refused (invalid_free and the like).
  uint64_t failed_deallocations = 0;
  uint64_t current_bytes = 0;
  uint64_t peak_bytes = 0;
  uint64_t total_bytes = 0;
  /// Refused allocations by error name ("out_of_memory", "memory_limit").
  std::map<std::string, uint64_t> refused;
};

/// Not thread-safe.
class statistics_adaptor final : public memory_resource {
public:
  explicit statistics_adaptor(memory_resource& upstream);

  allocation_counts counts() const;

  /// Forgets the bytes in use (the device was reset); keeps the counters.
  void forget_all() { current_ = 0; }

private:
  caf::expected<void*> do_allocate(size_t bytes, stream_ref stream,
                                   const owner_tag& owner) override;
  caf::error do_deallocate(void* p, size_t bytes, stream_ref stream) override;

  memory_resource& upstream_;
  uint64_t allocations_ = 0;
  uint64_t deallocations_ = 0;
  uint64_t failed_deallocations_ = 0;
  uint64_t current_ = 0;
  uint64_t peak_ = 0;
  uint64_t total_ = 0;
  /// Indexed by the error code (errc is one byte).
  std::array<uint64_t, 256> refused_{};
};

} // namespace cohort::devices::memory
