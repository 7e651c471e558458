// Limits on a device's memory, as an adaptor over any resource: the device's
// configured limit, each tenant's quota on this device, and (through a shared
// tenant_ledger) each tenant's quota across devices. Refusals are soft OOM:
// memory_limit or over_memory_quota, never the device's own out_of_memory.
#pragma once

#include <map>
#include <memory>
#include <memory_resource>
#include <string>
#include <unordered_map>

#include "devices/memory/memory_resource.hpp"
#include "devices/memory/tenant_ledger.hpp"

namespace cohort::devices::memory {

/// Counts requested bytes per tenant. Not thread-safe (the ledger is).
class limiting_adaptor final : public memory_resource {
public:
  /// `limit` bytes at most on this device (0: no limit). With a `ledger`,
  /// tenants it does not know are refused (unknown_tenant).
  limiting_adaptor(memory_resource& upstream, std::string device,
                   uint64_t limit, std::shared_ptr<tenant_ledger> ledger);

  /// Sets the device-wide limit (0: none); use above it stays, new
  /// allocations are refused until it drops.
  void set_limit(uint64_t bytes) { limit_ = bytes; }

  /// Sets `tenant`'s quota on this device (0: none).
  void set_tenant_limit(const std::string& tenant, uint64_t bytes);

  uint64_t limit() const { return limit_; }
  uint64_t used() const { return used_; }
  uint64_t used_by(const std::string& tenant) const;
  uint64_t tenant_limit(const std::string& tenant) const;
  /// Bytes in use per tenant (tenants with none left out).
  std::map<std::string, uint64_t> used_by_tenant() const;

  /// Forgets every allocation (the device was reset), refunding the ledger.
  void forget_all();

private:
  struct tenant_use {
    uint64_t limit = 0;
    uint64_t used = 0;
    int ledger_slot = -1;
  };
  struct held {
    tenant_use* tenant;
    uint64_t bytes;
  };

  caf::expected<void*> do_allocate(size_t bytes, stream_ref stream,
                                   const owner_tag& owner) override;
  caf::error do_deallocate(void* p, size_t bytes, stream_ref stream) override;

  tenant_use& use_of(const std::string& tenant);

  memory_resource& upstream_;
  std::string device_;
  uint64_t limit_;
  uint64_t used_ = 0;
  std::shared_ptr<tenant_ledger> ledger_;
  /// Node-based: `held` points into it.
  std::unordered_map<std::string, tenant_use> tenants_;
  /// Its nodes come from a pool, not the heap (one per live block).
  std::pmr::unsynchronized_pool_resource nodes_;
  std::pmr::unordered_map<void*, held> held_{&nodes_};
};

} // namespace cohort::devices::memory
