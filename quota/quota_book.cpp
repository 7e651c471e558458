#include "quota/quota_book.hpp"

#include <algorithm>
#include <cmath>

#include "messages/errc.hpp"

namespace cohort::quota {

quota_book::quota_book(quota_lease lease)
    : max_inflight_(lease.max_inflight), policies_(std::move(lease.policies)),
      devices_(std::move(lease.devices)) {
  auto n = devices_.size();
  for (size_t t = 0; t < policies_.size(); ++t) {
    auto& p = policies_[t];
    p.device_quota.resize(n, 0);
    p.device_reserve.resize(n, 0);
    index_.emplace(p.tenant, int(t));
    tenant_state st;
    st.on_device.assign(n, 0);
    st.tokens = p.burst > 0 ? double(p.burst) : std::max(1.0, p.rate);
    state_.push_back(std::move(st));
  }
  placed_.assign(n, 0);
  unclaimed_total_.assign(n, 0);
  for (size_t d = 0; d < n; ++d)
    for (auto& p : policies_)
      unclaimed_total_[d] += p.device_reserve[d];
}

caf::error quota_book::add_device(const quota_lease& next) {
  auto n = devices_.size();
  auto bad = [](const std::string& why) {
    return make_error(errc::invalid_arguments,
                      "a lease for an added device: " + why);
  };
  if (next.devices.size() != n + 1)
    return bad("it has " + std::to_string(next.devices.size()) +
               " devices, the book " + std::to_string(n) + " (one more)");
  if (n + 1 > 64)
    return bad("at most 64 devices");
  if (next.policies.size() != policies_.size())
    return bad("its tenants are not the book's");
  auto old = n == 64 ? ~uint64_t{0} : (uint64_t{1} << n) - 1;
  for (size_t t = 0; t < policies_.size(); ++t) {
    auto& q = next.policies[t];
    if (q.tenant != policies_[t].tenant)
      return bad("its tenants are not the book's");
    if ((q.device_mask & old) != (policies_[t].device_mask & old))
      return bad("tenant '" + q.tenant + "' has other devices in it");
  }
  devices_.push_back(next.devices.back());
  placed_.push_back(0);
  uint64_t reserved = 0;
  for (size_t t = 0; t < policies_.size(); ++t) {
    auto& p = policies_[t];
    auto& q = next.policies[t];
    p.device_mask |= q.device_mask & (uint64_t{1} << n);
    p.device_quota.push_back(q.device_quota.size() > n ? q.device_quota[n] : 0);
    p.device_reserve.push_back(q.device_reserve.size() > n ? q.device_reserve[n]
                                                           : 0);
    reserved += p.device_reserve.back();
    state_[t].on_device.push_back(0);
  }
  unclaimed_total_.push_back(reserved);
  return caf::none;
}

int quota_book::tenant_index(const std::string& tenant) const {
  auto i = index_.find(tenant);
  return i == index_.end() ? -1 : i->second;
}

void quota_book::refill(tenant_state& st, const tenant_policy& p,
                        clock::time_point now) const {
  if (p.rate <= 0)
    return;
  double cap = p.burst > 0 ? double(p.burst) : std::max(1.0, p.rate);
  if (st.refilled == clock::time_point{}) {
    st.refilled = now;
    return;
  }
  auto dt = std::chrono::duration<double>(now - st.refilled).count();
  if (dt > 0) {
    st.tokens = std::min(cap, st.tokens + dt * p.rate);
    st.refilled = now;
  }
}

caf::error quota_book::check_admit(int t, clock::time_point now) {
  auto& p = policies_[size_t(t)];
  auto& st = state_[size_t(t)];
  if (st.inflight >= p.max_inflight)
    return make_error(
        errc::over_inflight_quota,
        "tenant '" + p.tenant + "' has " + std::to_string(st.inflight) +
            " items in flight, its limit is " + std::to_string(p.max_inflight));
  if (max_inflight_ > 0 && inflight_total_ >= max_inflight_)
    return make_error(errc::over_inflight_quota,
                      "the runtime has " + std::to_string(inflight_total_) +
                          " items in flight, its limit is " +
                          std::to_string(max_inflight_));
  if (p.rate > 0) {
    refill(st, p, now);
    if (st.tokens < 1.0)
      return make_error(errc::over_rate_limit,
                        "tenant '" + p.tenant + "' is limited to " +
                            std::to_string(p.rate) + " items/s");
  }
  return caf::none;
}

void quota_book::admit(int t, clock::time_point now) {
  auto& p = policies_[size_t(t)];
  auto& st = state_[size_t(t)];
  ++st.inflight;
  ++inflight_total_;
  if (p.rate > 0) {
    refill(st, p, now);
    st.tokens -= 1.0;
  }
}

void quota_book::end(int t) {
  auto& st = state_[size_t(t)];
  if (st.inflight > 0) {
    --st.inflight;
    --inflight_total_;
  }
}

quota_book::clock::time_point quota_book::next_token(int t,
                                                     clock::time_point now) {
  auto& p = policies_[size_t(t)];
  auto& st = state_[size_t(t)];
  if (p.rate <= 0)
    return now;
  refill(st, p, now);
  if (st.tokens >= 1.0)
    return now;
  auto wait = (1.0 - st.tokens) / p.rate;
  return now + std::chrono::duration_cast<clock::duration>(
                   std::chrono::duration<double>(wait));
}

uint64_t quota_book::unclaimed(int t, size_t d) const {
  auto reserve = policies_[size_t(t)].device_reserve[d];
  auto used = state_[size_t(t)].on_device[d];
  return reserve > used ? reserve - used : 0;
}

uint64_t quota_book::reserved_for_others(int t, size_t d) const {
  return unclaimed_total_[d] - unclaimed(t, d);
}

caf::error quota_book::check_place(int t, size_t d, uint64_t bytes) const {
  auto& dev = devices_[d];
  if (!dev.has_memory)
    return caf::none;
  auto& p = policies_[size_t(t)];
  auto& st = state_[size_t(t)];
  if (auto q = p.device_quota[d]; q > 0 && st.on_device[d] + bytes > q)
    return make_error(errc::over_memory_quota,
                      "tenant '" + p.tenant + "' would hold " +
                          bytes_text(st.on_device[d] + bytes) + " on " +
                          dev.name + ", its quota there is " + bytes_text(q));
  if (p.memory_quota > 0 && st.memory + bytes > p.memory_quota)
    return make_error(errc::over_memory_quota,
                      "tenant '" + p.tenant + "' would hold " +
                          bytes_text(st.memory + bytes) +
                          " of device memory, its quota is " +
                          bytes_text(p.memory_quota));
  auto others = reserved_for_others(t, d);
  if (placed_[d] + bytes + others > dev.limit && dev.limit >= dev.capacity)
    return make_error(
        errc::out_of_memory,
        dev.name + ": " + bytes_text(bytes) + " for tenant '" + p.tenant +
            "' do not fit: " + bytes_text(placed_[d]) + " of its " +
            bytes_text(dev.capacity) + " are in use" +
            (others > 0
                 ? ", " + bytes_text(others) + " reserved for other tenants"
                 : std::string{}));
  if (placed_[d] + bytes + others > dev.limit)
    return make_error(
        errc::memory_limit,
        dev.name + ": " + bytes_text(bytes) + " for tenant '" + p.tenant +
            "' would pass its limit of " + bytes_text(dev.limit) + " (" +
            bytes_text(placed_[d]) + " in use" +
            (others > 0
                 ? ", " + bytes_text(others) + " reserved for other tenants"
                 : std::string{}) +
            ")");
  return caf::none;
}

uint64_t quota_book::room(int t, size_t d, bool idle) const {
  auto& dev = devices_[d];
  auto& p = policies_[size_t(t)];
  auto& st = state_[size_t(t)];
  uint64_t others = 0;
  if (!idle)
    others = reserved_for_others(t, d);
  else
    for (size_t u = 0; u < policies_.size(); ++u)
      if (int(u) != t)
        others += policies_[u].device_reserve[d];
  auto placed = idle ? 0 : placed_[d];
  uint64_t r = dev.limit > placed + others ? dev.limit - placed - others : 0;
  if (auto q = p.device_quota[d]; q > 0) {
    auto used = idle ? 0 : st.on_device[d];
    r = std::min(r, q > used ? q - used : 0);
  }
  if (p.memory_quota > 0) {
    auto used = idle ? 0 : st.memory;
    r = std::min(r, p.memory_quota > used ? p.memory_quota - used : 0);
  }
  if (p.max_item_bytes > 0)
    r = std::min(r, p.max_item_bytes);
  return r;
}

caf::error quota_book::check_ever(int t, uint64_t bytes, uint64_t mask) const {
  auto& p = policies_[size_t(t)];
  if (p.max_item_bytes > 0 && bytes > p.max_item_bytes)
    return make_error(errc::over_memory_quota,
                      "the item needs " + bytes_text(bytes) +
                          " of device memory; tenant '" + p.tenant +
                          "' may use at most " + bytes_text(p.max_item_bytes) +
                          " per item");
  uint64_t best = 0;
  bool any_memory = false;
  bool any_cpu = false;
  for (size_t d = 0; d < devices_.size(); ++d) {
    if (!(mask & (uint64_t{1} << d)))
      continue;
    if (!devices_[d].has_memory) {
      any_cpu = true;
      continue;
    }
    any_memory = true;
    auto r = room(t, d, true);
    if (bytes <= r)
      return caf::none;
    best = std::max(best, r);
  }
  if (!any_memory || (any_cpu && p.on_limit == limit_policy::cpu_fallback))
    return caf::none;
  return make_error(errc::over_memory_quota,
                    "the item needs " + bytes_text(bytes) +
                        " of device memory; the most tenant '" + p.tenant +
                        "' can ever hold on one of its devices is " +
                        bytes_text(best));
}

void quota_book::charge(int t, size_t d, uint64_t bytes) {
  if (!devices_[d].has_memory)
    return;
  auto before = unclaimed(t, d);
  auto& st = state_[size_t(t)];
  st.on_device[d] += bytes;
  st.memory += bytes;
  placed_[d] += bytes;
  unclaimed_total_[d] -= before - unclaimed(t, d);
}

void quota_book::refund(int t, size_t d, uint64_t bytes) {
  if (!devices_[d].has_memory)
    return;
  auto before = unclaimed(t, d);
  auto& st = state_[size_t(t)];
  bytes = std::min(bytes, st.on_device[d]);
  st.on_device[d] -= bytes;
  st.memory -= std::min(st.memory, bytes);
  placed_[d] -= std::min(placed_[d], bytes);
  unclaimed_total_[d] += unclaimed(t, d) - before;
}

caf::error quota_book::charge_outside(int t, uint64_t bytes) {
  auto& p = policies_[size_t(t)];
  auto& st = state_[size_t(t)];
  if (p.memory_quota > 0 &&
      (bytes > p.memory_quota || st.memory > p.memory_quota - bytes))
    return make_error(errc::over_memory_quota,
                      "tenant '" + p.tenant + "' would hold " +
                          bytes_text(st.memory + bytes) +
                          " of device memory, its quota is " +
                          bytes_text(p.memory_quota));
  st.memory += bytes;
  st.outside += bytes;
  return caf::none;
}

void quota_book::refund_outside(int t, uint64_t bytes) {
  auto& st = state_[size_t(t)];
  bytes = std::min(bytes, st.outside);
  st.outside -= bytes;
  st.memory -= std::min(st.memory, bytes);
}

quota_usage quota_book::usage() const {
  quota_usage u;
  for (size_t t = 0; t < policies_.size(); ++t) {
    auto& st = state_[t];
    u.tenants.push_back({policies_[t].tenant, st.inflight, 0, st.memory,
                         st.on_device, st.outside});
  }
  u.device_placed = placed_;
  return u;
}

void quota_book::set_usage(const quota_usage& u) {
  inflight_total_ = 0;
  for (auto& st : state_) {
    st.inflight = 0;
    st.memory = 0;
    st.outside = 0;
    std::fill(st.on_device.begin(), st.on_device.end(), 0);
  }
  std::fill(placed_.begin(), placed_.end(), 0);
  for (auto& tu : u.tenants) {
    auto t = tenant_index(tu.tenant);
    if (t < 0)
      continue;
    auto& st = state_[size_t(t)];
    st.inflight = tu.inflight;
    inflight_total_ += tu.inflight;
    st.memory = tu.memory;
    st.outside = std::min(tu.outside, tu.memory);
    for (size_t d = 0; d < st.on_device.size() && d < tu.on_device.size(); ++d)
      st.on_device[d] = tu.on_device[d];
  }
  for (size_t d = 0; d < placed_.size() && d < u.device_placed.size(); ++d)
    placed_[d] = u.device_placed[d];
  for (size_t d = 0; d < devices_.size(); ++d) {
    unclaimed_total_[d] = 0;
    for (size_t t = 0; t < policies_.size(); ++t)
      unclaimed_total_[d] += unclaimed(int(t), d);
  }
}

tenant_headroom quota_book::headroom(int t) const {
  auto& p = policies_[size_t(t)];
  auto& st = state_[size_t(t)];
  tenant_headroom h;
  h.tenant = p.tenant;
  h.inflight = st.inflight;
  h.max_inflight = p.max_inflight;
  h.memory = st.memory;
  h.memory_quota = p.memory_quota;
  for (size_t d = 0; d < devices_.size(); ++d) {
    if (!(p.device_mask & (uint64_t{1} << d)))
      continue;
    if (!devices_[d].has_memory) {
      ++h.cpu_workers;
      continue;
    }
    h.devices.push_back({devices_[d].name, st.on_device[d], p.device_quota[d],
                         p.device_reserve[d], room(t, d, false),
                         room(t, d, true)});
  }
  return h;
}

} // namespace cohort::quota
