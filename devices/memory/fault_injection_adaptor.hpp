// Allocation failures on purpose, as an adaptor over any resource: what the
// chaos harness and the tests use to make a device run out of memory. The
// failures are hard OOM (out_of_memory), marked as injected.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <random>
#include <string>

#include "devices/memory/memory_resource.hpp"

namespace cohort::devices::memory {

/// The fault settings are thread-safe (set from any thread while the owner
/// allocates); allocation itself is as thread-safe as the upstream.
class fault_injection_adaptor final : public memory_resource {
public:
  fault_injection_adaptor(memory_resource& upstream, std::string device);

  /// Fails the next `n` allocations.
  void fail_next(uint32_t n);

  /// Fails each allocation with `probability` (0 turns it off), drawn from a
  /// generator seeded with `seed` (reproducible).
  void fail_randomly(double probability, uint64_t seed);

  /// Fails every allocation larger than `bytes` (0 turns it off).
  void fail_above(uint64_t bytes);

  /// Turns every fault off.
  void clear();

  /// Allocations failed on purpose so far.
  uint64_t injected() const { return injected_.load(); }

private:
  caf::expected<void*> do_allocate(size_t bytes, stream_ref stream,
                                   const owner_tag& owner) override;
  caf::error do_deallocate(void* p, size_t bytes, stream_ref stream) override;

  caf::error injected_error(size_t bytes, const char* why);

  memory_resource& upstream_;
  std::string device_;
  /// True while any fault is set: the common case costs one load.
  std::atomic<bool> armed_{false};
  std::atomic<uint32_t> fail_next_{0};
  std::atomic<uint64_t> fail_above_{0};
  std::atomic<uint64_t> injected_{0};
  std::mutex rng_mtx_;
  double probability_ = 0;
  std::mt19937_64 rng_;
};

} // namespace cohort::devices::memory
