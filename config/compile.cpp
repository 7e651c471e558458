#include "config/compile.hpp"

#include "config/alerts.hpp"
#include "config/bounds.hpp"
#include "config/exec_sessions.hpp"
#include "config/quotas.hpp"
#include "config/supervision.hpp"

namespace cohort::config {

caf::expected<settings> compile(const pb::RuntimeConfig& cfg) {
  if (auto err = check_bounds(cfg))
    return err;
  settings out;
  auto sup = supervision_of(cfg);
  if (!sup)
    return sup.error();
  out.balancer = std::move(sup->first);
  out.supervisor = std::move(sup->second);
  auto audit = audit::audit_options_of(cfg);
  if (!audit)
    return audit.error();
  out.audit = std::move(*audit);
  out.audit_path =
      cfg.audit_path().empty() ? "cohort-audit.log" : cfg.audit_path();
  auto alerts = alert_rules_of(cfg);
  if (!alerts)
    return alerts.error();
  out.alerts = std::move(*alerts);
  auto trust = kernels::bundle::trust_from_config(cfg.kernel_bundles());
  if (!trust)
    return trust.error();
  out.trust =
      std::make_shared<const kernels::bundle::trust_store>(std::move(*trust));
  auto& load = cfg.kernel_bundles().load();
  out.bundles.assign(load.begin(), load.end());
  if (auto ms = cfg.kernel_bundles().load_timeout_ms(); ms != 0)
    out.bundle_load_timeout = std::chrono::milliseconds{ms};
  out.bundle_cpu_in_process =
      cfg.kernel_bundles().cpu_code() == pb::KernelBundles::IN_PROCESS;
  if (auto mb = cfg.kernel_bundles().host_memory_mb(); mb != 0)
    out.bundle_host_memory = uint64_t{mb} << 20;
  auto exec = exec_sessions_of(cfg);
  if (!exec)
    return exec.error();
  out.exec_sessions = std::move(*exec);
  return out;
}

caf::error check_config(const pb::RuntimeConfig& cfg) {
  auto s = compile(cfg);
  return s ? caf::error{} : s.error();
}

caf::expected<fleet_terms>
compile_fleet(const pb::RuntimeConfig& cfg,
              const std::vector<device_info>& devices) {
  auto lease = compile_quotas(cfg, devices);
  if (!lease)
    return lease.error();
  fleet_terms out;
  out.pools = pool_options_for(cfg, *lease);
  out.lease = std::move(*lease);
  return out;
}

} // namespace cohort::config
