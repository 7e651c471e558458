#include "actors/balancer/accounting.hpp"

namespace cohort::actors::balancer {

namespace {

uint64_t metered_of(const quota_lease& lease) {
  uint64_t out = 0;
  for (size_t d = 0; d < lease.devices.size() && d < 64; ++d)
    if (lease.devices[d].has_memory)
      out |= uint64_t{1} << d;
  return out;
}

} // namespace

accounting::accounting(quota_lease lease)
    : lease_(lease), book_(std::move(lease)), metered_(metered_of(lease_)),
      stranded_(lease_.devices.size()) {
  // nop
}

bool accounting::renew(quota_lease lease) {
  bool same = lease.policies.size() == book_.tenants() &&
              lease.devices.size() == lease_.devices.size();
  for (size_t t = 0; same && t < lease.policies.size(); ++t)
    same = lease.policies[t].tenant == book_.policy(int(t)).tenant;
  if (!same)
    return false;
  auto usage = book_.usage();
  lease_ = lease;
  metered_ = metered_of(lease_);
  book_ = quota::quota_book{std::move(lease)};
  book_.set_usage(usage);
  return true;
}

caf::error accounting::add_device(quota_lease lease) {
  if (auto err = book_.add_device(lease))
    return err;
  lease_ = std::move(lease);
  metered_ = metered_of(lease_);
  stranded_.resize(lease_.devices.size());
  return caf::none;
}

caf::error accounting::check(charges cs, size_t d) {
  if (cs.size() == 1)
    return book_.check_place(cs[0].tenant, d, cs[0].bytes);
  // Together: each charge is checked with the ones before it taken.
  caf::error out;
  size_t taken = 0;
  for (; taken < cs.size(); ++taken) {
    out = book_.check_place(cs[taken].tenant, d, cs[taken].bytes);
    if (out)
      break;
    book_.charge(cs[taken].tenant, d, cs[taken].bytes);
  }
  refund(cs.first(taken), d);
  return out;
}

void accounting::charge_to(charges cs, size_t d) {
  for (auto& c : cs)
    book_.charge(c.tenant, d, c.bytes);
}

void accounting::refund(charges cs, size_t d) {
  for (auto& c : cs)
    book_.refund(c.tenant, d, c.bytes);
}

void accounting::strand(charges cs, size_t d) {
  if (!metered(d))
    return;
  for (auto& c : cs) {
    if (c.bytes == 0)
      continue;
    book_.charge(c.tenant, d, c.bytes);
    stranded_[d].push_back(c);
  }
}

void accounting::release(size_t d) {
  if (d >= stranded_.size())
    return;
  refund(stranded_[d], d);
  stranded_[d].clear();
}

uint64_t accounting::stranded(size_t d) const {
  uint64_t out = 0;
  if (d < stranded_.size())
    for (auto& c : stranded_[d])
      out += c.bytes;
  return out;
}

} // namespace cohort::actors::balancer
