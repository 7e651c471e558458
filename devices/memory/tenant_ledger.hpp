// Every tenant's device memory across all devices, against its global quota.
// Device actors charge it concurrently, so that a tenant's quota holds across
// devices exactly (each device's limiting_adaptor charges it).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace cohort::devices::memory {

/// Thread-safe: charges and refunds are lock-free; the set of tenants is
/// fixed when it is made.
class tenant_ledger {
public:
  /// Tenants and their global quotas in bytes (0: no quota).
  explicit tenant_ledger(const std::map<std::string, uint64_t>& quotas);

  /// The slot of `tenant`, or -1 for a tenant it does not know.
  int slot(const std::string& tenant) const;

  /// Adds `bytes` to the tenant's use unless that would pass its quota.
  bool try_charge(int slot, uint64_t bytes);

  /// Takes `bytes` off the tenant's use.
  void refund(int slot, uint64_t bytes);

  /// Changes the quota (0: none). Use above it stays; charges are refused
  /// until the use drops below it.
  void set_quota(int slot, uint64_t bytes);

  uint64_t used(int slot) const;
  uint64_t quota(int slot) const;
  const std::string& tenant(int slot) const {
    return entries_[size_t(slot)]->tenant;
  }
  size_t size() const { return entries_.size(); }

private:
  struct entry {
    std::string tenant;
    std::atomic<uint64_t> quota{0};
    std::atomic<uint64_t> used{0};
  };
  std::vector<std::unique_ptr<entry>> entries_;
  std::unordered_map<std::string, int> index_;
};

} // namespace cohort::devices::memory
