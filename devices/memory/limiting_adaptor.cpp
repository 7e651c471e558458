#include "devices/memory/limiting_adaptor.hpp"

#include "messages/errc.hpp"

namespace cohort::devices::memory {

limiting_adaptor::limiting_adaptor(memory_resource& upstream,
                                   std::string device, uint64_t limit,
                                   std::shared_ptr<tenant_ledger> ledger)
    : upstream_(upstream), device_(std::move(device)), limit_(limit),
      ledger_(std::move(ledger)) {
  held_.reserve(1024);
}

limiting_adaptor::tenant_use&
limiting_adaptor::use_of(const std::string& tenant) {
  auto [i, added] = tenants_.try_emplace(tenant);
  if (added && ledger_)
    i->second.ledger_slot = ledger_->slot(tenant);
  return i->second;
}

void limiting_adaptor::set_tenant_limit(const std::string& tenant,
                                        uint64_t bytes) {
  use_of(tenant).limit = bytes;
}

uint64_t limiting_adaptor::used_by(const std::string& tenant) const {
  auto i = tenants_.find(tenant);
  return i == tenants_.end() ? 0 : i->second.used;
}

uint64_t limiting_adaptor::tenant_limit(const std::string& tenant) const {
  auto i = tenants_.find(tenant);
  return i == tenants_.end() ? 0 : i->second.limit;
}

std::map<std::string, uint64_t> limiting_adaptor::used_by_tenant() const {
  std::map<std::string, uint64_t> out;
  for (auto& [tenant, use] : tenants_)
    if (use.used > 0)
      out.emplace(tenant, use.used);
  return out;
}

void limiting_adaptor::forget_all() {
  for (auto& [tenant, use] : tenants_) {
    if (use.ledger_slot >= 0)
      ledger_->refund(use.ledger_slot, use.used);
    use.used = 0;
  }
  held_.clear();
  used_ = 0;
}

caf::expected<void*> limiting_adaptor::do_allocate(size_t bytes,
                                                   stream_ref stream,
                                                   const owner_tag& owner) {
  auto& use = use_of(owner.tenant);
  if (ledger_ && use.ledger_slot < 0)
    return no_grant(owner.tenant, device_);
  if (limit_ != 0 && (bytes > limit_ || used_ > limit_ - bytes))
    return make_error(
        errc::memory_limit,
        device_ + ": " + std::to_string(bytes) + " bytes for tenant '" +
            owner.tenant + "' would pass the device's memory limit of " +
            std::to_string(limit_) + " (" + std::to_string(used_) + " in use)");
  if (use.limit != 0 && (bytes > use.limit || use.used > use.limit - bytes))
    return make_error(errc::over_memory_quota,
                      device_ + ": tenant '" + owner.tenant + "' would hold " +
                          std::to_string(use.used + bytes) +
                          " bytes here, its quota on this device is " +
                          std::to_string(use.limit));
  if (use.ledger_slot >= 0 && !ledger_->try_charge(use.ledger_slot, bytes))
    return make_error(
        errc::over_memory_quota,
        device_ + ": tenant '" + owner.tenant + "' would hold " +
            std::to_string(ledger_->used(use.ledger_slot) + bytes) +
            " bytes of device memory, its quota is " +
            std::to_string(ledger_->quota(use.ledger_slot)));
  auto p = upstream_.allocate(bytes, stream, owner);
  if (!p) {
    if (use.ledger_slot >= 0)
      ledger_->refund(use.ledger_slot, bytes);
    return p;
  }
  used_ += bytes;
  use.used += bytes;
  held_.emplace(*p, held{&use, bytes});
  return p;
}

caf::error limiting_adaptor::do_deallocate(void* p, size_t bytes,
                                           stream_ref stream) {
  auto i = held_.find(p);
  if (i == held_.end() || i->second.bytes != bytes)
    return make_error(errc::invalid_free,
                      device_ + ": " + std::to_string(bytes) +
                          " bytes returned that this device did not hand out "
                          "with that size");
  // Any error but invalid_free means the memory was taken back anyway.
  auto err = upstream_.deallocate(p, bytes, stream);
  if (code_of(err) == errc::invalid_free)
    return err;
  auto& use = *i->second.tenant;
  use.used -= std::min(use.used, bytes);
  used_ -= std::min(used_, bytes);
  if (use.ledger_slot >= 0)
    ledger_->refund(use.ledger_slot, bytes);
  held_.erase(i);
  return err;
}

} // namespace cohort::devices::memory
