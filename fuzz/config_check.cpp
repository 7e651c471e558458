#include "fuzz/config_check.hpp"

#include <map>
#include <memory>

#include "actors/alerts.hpp"
#include "actors/audit_log.hpp"
#include "actors/config_check.hpp"
#include "actors/quota.hpp"
#include "actors/runtime.hpp"
#include "devices/memory/device_memory.hpp"
#include "devices/memory/tenant_ledger.hpp"

namespace cohort::fuzz {

caf::expected<quota_lease> check_config(pb::RuntimeConfig cfg) {
  // The bounds every command and runtime::start check first.
  if (auto err = actors::check_config(cfg))
    return err;
  cfg.mutable_devices()->set_gpus(false);
  auto devs = actors::make_devices(cfg);
  if (!devs)
    return devs.error();
  std::vector<device_info> infos;
  for (auto& d : *devs)
    infos.push_back(d->info());
  auto lease = actors::compile_quotas(cfg, infos);
  if (!lease)
    return lease.error();
  std::map<std::string, uint64_t> global;
  for (auto& p : lease->policies)
    global[p.tenant] = p.memory_quota;
  auto ledger = std::make_shared<devices::memory::tenant_ledger>(global);
  auto pools = actors::pool_options_for(cfg, *lease);
  for (size_t i = 0; i < devs->size(); ++i) {
    auto* mem = (*devs)[i]->memory();
    if (mem == nullptr)
      continue;
    devices::memory::memory_options opts;
    opts.limit = lease->devices[i].limit;
    opts.pool = pools[i];
    for (auto& p : lease->policies) {
      if (p.device_quota[i] > 0)
        opts.tenant_limits[p.tenant] = p.device_quota[i];
      if (p.device_reserve[i] > 0)
        opts.reservations[p.tenant] = p.device_reserve[i];
    }
    opts.ledger = ledger;
    if (auto err = mem->configure(std::move(opts)))
      return err;
  }
  if (auto a = actors::audit_options_of(cfg); !a)
    return a.error();
  if (auto s = actors::supervision_of(cfg); !s)
    return s.error();
  if (auto r = actors::alert_rules_of(cfg); !r)
    return r.error();
  return std::move(*lease);
}

} // namespace cohort::fuzz
