#include "config/quotas.hpp"

#include <cmath>
#include <limits>
#include <set>
#include <string>

#include "kernels/catalog.hpp"
#include "messages/errc.hpp"
#include "quota/quota_book.hpp"

namespace cohort::config {

using quota::bytes_text;

namespace {

constexpr uint64_t MiB = uint64_t{1} << 20;

// The share of a device's memory the runtime hands out.
double memory_fraction(const pb::RuntimeConfig& cfg, const device_info& d) {
  if (cfg.limits().device_memory_fraction() > 0)
    return cfg.limits().device_memory_fraction();
  // Real GPUs keep room for the driver's context and the libraries' own
  // workspaces; a simulated GPU has nothing else on it.
  return d.simulated ? 1.0 : 0.95;
}

// Checks one grant entry against the catalog and devices.
caf::error compile_one(const pb::TenantGrant& g,
                       const std::vector<device_info>& devices,
                       const std::vector<device_budget>& budgets,
                       tenant_policy& out) {
  auto bad = [&](const std::string& what) {
    return make_error(errc::malformed_config,
                      "grant for tenant '" + g.tenant() + "': " + what);
  };
  out.tenant = g.tenant();
  for (auto& k : g.kernels()) {
    if (k == "*") {
      out.kernels.all = true;
    } else if (auto id = kernels::parse_kernel(k)) {
      out.kernels.add(*id);
    } else {
      return bad("unknown kernel '" + k +
                 "' (not built in, not registered: a bundle's kernels are "
                 "known once the runtime config's bundles are loaded)");
    }
  }
  for (auto& d : g.devices()) {
    uint64_t mask = 0;
    for (size_t i = 0; i < devices.size(); ++i)
      if (d == "*" || d == devices[i].name || d == to_string(devices[i].kind))
        mask |= uint64_t{1} << i;
    if (mask == 0)
      return bad("unknown device '" + d + "'");
    out.device_mask |= mask;
  }
  if (out.kernels.empty())
    return bad("grants no kernel (default-deny: list kernels or \"*\")");
  if (out.device_mask == 0)
    return bad("grants no device (default-deny: list devices or \"*\")");
  if (g.max_inflight() > 0)
    out.max_inflight = g.max_inflight();
  auto n = devices.size();
  out.device_quota.assign(n, 0);
  out.device_reserve.assign(n, 0);
  out.memory_quota = g.memory_quota_bytes();
  uint64_t granted_memory = 0;
  for (size_t i = 0; i < n; ++i)
    if ((out.device_mask & (uint64_t{1} << i)) && budgets[i].has_memory)
      granted_memory += budgets[i].capacity;
  if (out.memory_quota > 0 && granted_memory > 0 &&
      out.memory_quota > granted_memory)
    return bad("memory_quota_bytes of " + quota::bytes_text(out.memory_quota) +
               " is above the memory of its granted devices (" +
               quota::bytes_text(granted_memory) + ")");
  std::set<std::string> seen;
  for (auto& q : g.device_quota()) {
    size_t i = 0;
    while (i < n && devices[i].name != q.device())
      ++i;
    if (i == n)
      return bad("device_quota names unknown device '" + q.device() + "'");
    if (!seen.insert(q.device()).second)
      return bad("device_quota for '" + q.device() + "' is given twice");
    if (!(out.device_mask & (uint64_t{1} << i)))
      return bad("device_quota for '" + q.device() +
                 "', which the grant does not include");
    if (!budgets[i].has_memory)
      return bad("device_quota for '" + q.device() +
                 "': a CPU worker has no device memory");
    if (q.memory_quota_bytes() > budgets[i].capacity)
      return bad("quota of " + quota::bytes_text(q.memory_quota_bytes()) +
                 " on " + q.device() + " is above its memory (" +
                 quota::bytes_text(budgets[i].capacity) + ")");
    if (q.memory_quota_bytes() > 0 &&
        q.reserve_bytes() > q.memory_quota_bytes())
      return bad("reserve_bytes on " + q.device() + " (" +
                 quota::bytes_text(q.reserve_bytes()) +
                 ") is above its quota there (" +
                 quota::bytes_text(q.memory_quota_bytes()) + ")");
    if (out.memory_quota > 0 && q.reserve_bytes() > out.memory_quota)
      return bad("reserve_bytes on " + q.device() +
                 " is above the tenant's memory_quota_bytes");
    out.device_quota[i] = q.memory_quota_bytes();
    out.device_reserve[i] = q.reserve_bytes();
  }
  out.max_item_bytes = g.max_item_bytes();
  auto& rl = g.rate_limit();
  if (!std::isfinite(rl.items_per_second()) || rl.items_per_second() < 0)
    return bad("rate_limit.items_per_second must be a finite number >= 0");
  out.rate = rl.items_per_second();
  out.burst = rl.burst();
  switch (g.on_limit()) {
  case pb::REJECT:
    out.on_limit = limit_policy::reject;
    break;
  case pb::QUEUE:
    out.on_limit = limit_policy::queue;
    break;
  case pb::CPU_FALLBACK:
    out.on_limit = limit_policy::cpu_fallback;
    break;
  default:
    return bad("unknown on_limit policy " + std::to_string(g.on_limit()));
  }
  if (g.queue_limit() > 0)
    out.queue_limit = g.queue_limit();
  if (g.queue_timeout_ms() > 0)
    out.queue_timeout_ms = g.queue_timeout_ms();
  out.fallback_budget_ms = g.fallback_budget_ms();
  switch (g.on_over_budget()) {
  case pb::FALLBACK_ALLOW:
    out.on_over_budget = fallback_policy::allow;
    break;
  case pb::FALLBACK_WAIT:
    out.on_over_budget = fallback_policy::wait;
    break;
  case pb::FALLBACK_FAIL:
    out.on_over_budget = fallback_policy::fail;
    break;
  default:
    return bad("unknown on_over_budget policy " +
               std::to_string(g.on_over_budget()));
  }
  if (out.on_over_budget != fallback_policy::allow &&
      g.fallback_budget_ms() == 0)
    return bad(std::string{"on_over_budget: FALLBACK_"} +
               (out.on_over_budget == fallback_policy::wait ? "WAIT" : "FAIL") +
               " needs a fallback_budget_ms");
  if (g.weight() < 0 || !std::isfinite(g.weight()))
    return bad("weight must be a positive number, not " +
               std::to_string(g.weight()));
  if (g.weight() > 0)
    out.weight = g.weight();
  return caf::none;
}

} // namespace

devices::memory::pool_options pool_options_for(const pb::RuntimeConfig& cfg,
                                               uint64_t capacity) {
  auto p = devices::memory::sized_pool_options(capacity);
  auto& pc = cfg.pool();
  // A slab never exceeds the device (a larger one would be asked of it and
  // refused on every growth).
  if (pc.slab_mib() > 0)
    p.slab_bytes =
        std::min(pc.slab_mib() * MiB, std::max<uint64_t>(capacity, 2 * MiB));
  p.initial_bytes = pc.initial_mib() * MiB;
  if (pc.has_release_threshold_mib())
    p.release_threshold = pc.release_threshold_mib() * MiB;
  if (pc.has_zero_on_free())
    p.zero_on_free = pc.zero_on_free();
  if (pc.defrag_threshold() != 0)
    p.defrag_threshold = pc.defrag_threshold();
  return p;
}

std::vector<devices::memory::pool_options>
pool_options_for(const pb::RuntimeConfig& cfg, const quota_lease& lease) {
  std::vector<devices::memory::pool_options> out(lease.devices.size());
  for (size_t i = 0; i < out.size(); ++i)
    if (lease.devices[i].has_memory)
      out[i] = pool_options_for(cfg, lease.devices[i].capacity);
  return out;
}

caf::expected<quota_lease>
compile_quotas(const pb::RuntimeConfig& cfg,
               const std::vector<device_info>& devices) {
  auto bad = [](const std::string& what) {
    return make_error(errc::malformed_config, what);
  };
  quota_lease lease;
  auto fraction = cfg.limits().device_memory_fraction();
  if (!(fraction >= 0 && fraction <= 1))
    return bad("limits.device_memory_fraction must lie in (0, 1], got " +
               std::to_string(fraction));
  for (auto& d : devices) {
    device_budget b;
    b.name = d.name;
    b.has_memory = d.kind != device_kind::cpu;
    b.capacity = b.has_memory ? d.memory_bytes : 0;
    b.limit = uint64_t(double(b.capacity) * memory_fraction(cfg, d));
    if (b.has_memory)
      if (auto err =
              devices::memory::validate(pool_options_for(cfg, b.capacity)))
        return bad("pool settings for " + d.name + ": " + describe(err));
    lease.devices.push_back(std::move(b));
  }
  if (cfg.pool().initial_mib() * MiB > std::numeric_limits<uint64_t>::max() / 2)
    return bad("pool.initial_mib is too large");
  lease.max_inflight = cfg.limits().max_inflight();
  for (auto& g : cfg.tenant()) {
    if (g.tenant().empty())
      return bad("a grant has no tenant name");
    for (auto& p : lease.policies)
      if (p.tenant == g.tenant())
        return bad("tenant '" + g.tenant() + "' is granted twice");
    tenant_policy p;
    if (auto err = compile_one(g, devices, lease.devices, p))
      return err;
    lease.policies.push_back(std::move(p));
  }
  for (size_t i = 0; i < devices.size(); ++i) {
    uint64_t reserved = 0;
    for (auto& p : lease.policies)
      reserved += p.device_reserve[i];
    if (reserved > lease.devices[i].limit)
      return bad("reservations on " + devices[i].name + " add up to " +
                 quota::bytes_text(reserved) + ", above the " +
                 quota::bytes_text(lease.devices[i].limit) +
                 " the runtime may hand out there");
  }
  return lease;
}

} // namespace cohort::config
