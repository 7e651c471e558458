// An independent check of device memory: sees every allocation of every
// device (from inside each device's memory stack) and records any that takes
// a device past its limit or a tenant past a quota, overlaps a live block, or
// hands out memory that is not zeroed.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "devices/memory/device_memory.hpp"

namespace cohort::chaos {

/// Thread-safe: device actors call it from their threads. Set the limits
/// before the devices allocate.
class quota_observer final : public devices::memory::memory_observer {
public:
  /// Bytes each device may hand out, by device name (0: unchecked).
  std::map<std::string, uint64_t> device_limit;
  /// Global quota of each tenant (0: none).
  std::map<std::string, uint64_t> tenant_quota;
  /// Quota of each (tenant, device).
  std::map<std::pair<std::string, std::string>, uint64_t> device_quota;

  void on_allocate(const std::string& device, void* p, uint64_t bytes,
                   const devices::memory::owner_tag& owner) override;
  void on_deallocate(const std::string& device, void* p,
                     uint64_t bytes) override;
  void on_reset(const std::string& device) override;

  /// What went wrong, in order (at most 100 entries).
  std::vector<std::string> violations() const;
  uint64_t allocations() const;
  /// Bytes live now, over all devices.
  uint64_t live_bytes() const;
  /// The fullest any device got, as a share of its limit.
  double peak() const;

private:
  struct block {
    uint64_t bytes;
    std::string tenant;
  };

  void fail(std::string what);

  mutable std::mutex mtx_;
  std::map<std::string, std::map<uintptr_t, block>> live_;
  std::map<std::string, uint64_t> device_bytes_;
  std::map<std::pair<std::string, std::string>, uint64_t> tenant_device_;
  std::map<std::string, uint64_t> tenant_bytes_;
  std::vector<std::string> violations_;
  uint64_t allocations_ = 0;
  double peak_ = 0;
};

} // namespace cohort::chaos
