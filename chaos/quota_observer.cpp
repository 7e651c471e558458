#include "chaos/quota_observer.hpp"

#include <algorithm>
#include <cstring>

namespace cohort::chaos {

namespace {

bool all_zero(const void* p, size_t n) {
  static const std::vector<unsigned char> zeros(64 * 1024, 0);
  auto* b = static_cast<const unsigned char*>(p);
  for (size_t at = 0; at < n; at += zeros.size())
    if (std::memcmp(b + at, zeros.data(), std::min(zeros.size(), n - at)))
      return false;
  return true;
}

} // namespace

void quota_observer::on_allocate(const std::string& device, void* p,
                                 uint64_t bytes,
                                 const devices::memory::owner_tag& owner) {
  std::lock_guard<std::mutex> guard{mtx_};
  ++allocations_;
  auto& live = live_[device];
  auto at = reinterpret_cast<uintptr_t>(p);
  if (auto next = live.lower_bound(at);
      next != live.end() && next->first < at + bytes)
    fail(device + ": a block overlaps the next live one");
  if (auto prev = live.lower_bound(at); prev != live.begin()) {
    --prev;
    if (prev->first + prev->second.bytes > at)
      fail(device + ": a block overlaps the previous live one");
  }
  if (!all_zero(p, bytes))
    fail(device + ": a block for '" + owner.tenant +
         "' was handed out without being zeroed");
  live[at] = {bytes, owner.tenant};
  auto on_device = device_bytes_[device] += bytes;
  auto tenant_dev = tenant_device_[{owner.tenant, device}] += bytes;
  auto tenant = tenant_bytes_[owner.tenant] += bytes;
  if (auto lim = device_limit[device]; lim > 0) {
    peak_ = std::max(peak_, double(on_device) / double(lim));
    if (on_device > lim)
      fail(device + ": " + std::to_string(on_device) +
           " bytes live, past its limit of " + std::to_string(lim));
  }
  if (auto q = device_quota[{owner.tenant, device}]; q > 0 && tenant_dev > q)
    fail("'" + owner.tenant + "' past its quota on " + device);
  if (auto q = tenant_quota[owner.tenant]; q > 0 && tenant > q)
    fail("'" + owner.tenant + "' past its global quota");
}

void quota_observer::on_deallocate(const std::string& device, void* p,
                                   uint64_t bytes) {
  std::lock_guard<std::mutex> guard{mtx_};
  auto& live = live_[device];
  auto i = live.find(reinterpret_cast<uintptr_t>(p));
  if (i == live.end() || i->second.bytes != bytes) {
    fail(device + ": a free of something not live");
    return;
  }
  device_bytes_[device] -= bytes;
  tenant_device_[{i->second.tenant, device}] -= bytes;
  tenant_bytes_[i->second.tenant] -= bytes;
  live.erase(i);
}

void quota_observer::on_reset(const std::string& device) {
  std::lock_guard<std::mutex> guard{mtx_};
  for (auto& [at, b] : live_[device]) {
    tenant_device_[{b.tenant, device}] -= b.bytes;
    tenant_bytes_[b.tenant] -= b.bytes;
  }
  live_[device].clear();
  device_bytes_[device] = 0;
}

void quota_observer::fail(std::string what) {
  if (violations_.size() < 100)
    violations_.push_back(std::move(what));
}

std::vector<std::string> quota_observer::violations() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return violations_;
}

uint64_t quota_observer::allocations() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return allocations_;
}

uint64_t quota_observer::live_bytes() const {
  std::lock_guard<std::mutex> guard{mtx_};
  uint64_t n = 0;
  for (auto& [d, b] : device_bytes_)
    n += b;
  return n;
}

double quota_observer::peak() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return peak_;
}

} // namespace cohort::chaos
