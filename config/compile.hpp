// The runtime config compiled and checked once, in one place: its bounds
// first, then each section into the settings of the part that uses it.
// runtime::start, every command and the fuzzers go through here, so a
// config one of them refuses, every one refuses, with the same message,
// before anything is allocated or started. One file per section:
// bounds, supervision (and placement), alerts, quotas (grants, limits,
// pools); the audit section is the audit library's (audit_options_of).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <caf/expected.hpp>

#include "actors/alerts.hpp"
#include "actors/balancer/balancer.hpp"
#include "actors/supervisor.hpp"
#include "audit/audit_log.hpp"
#include "devices/memory/pool_resource.hpp"
#include "exec/session_server.hpp"
#include "kernels/bundle/bundle.hpp"
#include "kernels/bundle/isolation.hpp"
#include "messages/cohort.pb.h"
#include "messages/quota.hpp"

namespace cohort::config {

/// What the sections that need no devices compile into.
struct settings {
  actors::balancer_config balancer;
  actors::supervisor_config supervisor;
  audit::audit_options audit;
  /// Where the audit log goes ("cohort-audit.log" when the config says
  /// nothing).
  std::string audit_path;
  actors::alert_rules alerts;
  /// Whom kernel bundles must be signed by (its key files read), and the
  /// bundles to load at start.
  std::shared_ptr<const kernels::bundle::trust_store> trust;
  std::vector<std::string> bundles;
  /// How long a bundle's load in isolation may take.
  std::chrono::milliseconds bundle_load_timeout =
      kernels::bundle::default_probe_timeout;
  /// Where bundles' CPU code runs: kernel host processes (with this
  /// address space each), or this process (kernel_bundles.cpu_code).
  bool bundle_cpu_in_process = false;
  uint64_t bundle_host_memory = kernels::bundle::default_host_memory;
  /// The exec socket (docs/exec.md); none when the config names none.
  std::optional<exec::session_options> exec_sessions;
};

/// Checks the bounds of `cfg` and compiles every section that needs no
/// devices. malformed_config names the first problem.
caf::expected<settings> compile(const pb::RuntimeConfig& cfg);

/// As `compile`, keeping only the verdict.
caf::error check_config(const pb::RuntimeConfig& cfg);

/// What the grants and pools compile into for a set of devices.
struct fleet_terms {
  quota_lease lease;
  /// Every device's pool, by index (defaults for devices without device
  /// memory).
  std::vector<devices::memory::pool_options> pools;
};

/// Compiles the grants, limits and pools of `cfg` for `devices`.
caf::expected<fleet_terms>
compile_fleet(const pb::RuntimeConfig& cfg,
              const std::vector<device_info>& devices);

} // namespace cohort::config
