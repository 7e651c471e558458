#include "devices/memory/tenant_ledger.hpp"

namespace cohort::devices::memory {

tenant_ledger::tenant_ledger(const std::map<std::string, uint64_t>& quotas) {
  for (auto& [tenant, bytes] : quotas) {
    auto e = std::make_unique<entry>();
    e->tenant = tenant;
    e->quota = bytes;
    index_.emplace(tenant, int(entries_.size()));
    entries_.push_back(std::move(e));
  }
}

int tenant_ledger::slot(const std::string& tenant) const {
  auto i = index_.find(tenant);
  return i == index_.end() ? -1 : i->second;
}

bool tenant_ledger::try_charge(int slot, uint64_t bytes) {
  auto& e = *entries_[size_t(slot)];
  auto quota = e.quota.load(std::memory_order_relaxed);
  auto cur = e.used.load(std::memory_order_relaxed);
  do {
    if (quota != 0 && (bytes > quota || cur > quota - bytes))
      return false;
  } while (!e.used.compare_exchange_weak(cur, cur + bytes,
                                         std::memory_order_relaxed));
  return true;
}

void tenant_ledger::refund(int slot, uint64_t bytes) {
  auto& used = entries_[size_t(slot)]->used;
  auto cur = used.load(std::memory_order_relaxed);
  while (!used.compare_exchange_weak(cur, cur - std::min(cur, bytes),
                                     std::memory_order_relaxed)) {
    // retry
  }
}

void tenant_ledger::set_quota(int slot, uint64_t bytes) {
  entries_[size_t(slot)]->quota = bytes;
}

uint64_t tenant_ledger::used(int slot) const {
  return entries_[size_t(slot)]->used.load(std::memory_order_relaxed);
}

uint64_t tenant_ledger::quota(int slot) const {
  return entries_[size_t(slot)]->quota.load(std::memory_order_relaxed);
}

} // namespace cohort::devices::memory
