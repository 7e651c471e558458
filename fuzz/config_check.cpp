#include "fuzz/config_check.hpp"

#include "actors/alerts.hpp"
#include "audit/audit_log.hpp"
#include "actors/config_check.hpp"
#include "actors/quota.hpp"
#include "actors/runtime.hpp"

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
  if (auto memory = actors::configure_memory(*devs, cfg, *lease); !memory)
    return memory.error();
  if (auto a = audit::audit_options_of(cfg); !a)
    return a.error();
  if (auto s = actors::supervision_of(cfg); !s)
    return s.error();
  if (auto r = actors::alert_rules_of(cfg); !r)
    return r.error();
  return std::move(*lease);
}

} // namespace cohort::fuzz
