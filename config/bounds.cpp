#include "config/bounds.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <string_view>
#include <tuple>

#include "messages/errc.hpp"

namespace cohort::config {

namespace {

using bounds = config_bounds;

caf::error bad(const std::string& what) {
  return make_error(errc::malformed_config, what);
}

// `x` is finite and in [lo, hi].
bool within(double x, double lo, double hi) {
  return std::isfinite(x) && x >= lo && x <= hi;
}

caf::error too_long(const std::string& what, uint32_t ms) {
  return bad(what + " is " + std::to_string(ms) + " ms, at most " +
             std::to_string(bounds::max_ms) + " (one hour)");
}

caf::error check_sim_gpu(const pb::SimGpu& g) {
  auto where = "simulated GPU '" + g.name() + "': ";
  if (g.memory_mib() > bounds::max_sim_memory_mib)
    return bad(where + "memory_mib is " + std::to_string(g.memory_mib()) +
               ", at most " + std::to_string(bounds::max_sim_memory_mib) +
               " (1 TiB)");
  if (g.streams() > bounds::max_streams)
    return bad(where + "streams is " + std::to_string(g.streams()) +
               ", at most " + std::to_string(bounds::max_streams));
  if (g.speed() != 0 &&
      !within(g.speed(), bounds::min_speed, bounds::max_speed))
    return bad(where + "speed must be a finite number in 0.001..1000000");
  for (auto [name, x] : {std::pair{"gflops", g.gflops()},
                         std::pair{"gbytes_per_s", g.gbytes_per_s()},
                         std::pair{"spike_factor", g.spike_factor()}})
    if (!within(x, 0, 1e9))
      return bad(where + name + " must be a finite number in 0..1e9");
  if (!within(g.spike_fraction(), 0, 1))
    return bad(where + "spike_fraction must be in 0..1");
  if (g.nvlink_size() > 64 || g.p2p_size() > 64)
    return bad(where + "at most 64 links of each kind (nvlink, p2p)");
  return caf::none;
}

caf::error check_tenant(const pb::TenantGrant& t) {
  auto where = "tenant '" + t.tenant() + "': ";
  if (t.max_inflight() > bounds::max_inflight)
    return bad(where + "max_inflight is " + std::to_string(t.max_inflight()) +
               ", at most " + std::to_string(bounds::max_inflight));
  if (t.queue_limit() > bounds::max_queue_limit)
    return bad(where + "queue_limit is " + std::to_string(t.queue_limit()) +
               ", at most " + std::to_string(bounds::max_queue_limit));
  if (t.queue_timeout_ms() > bounds::max_ms)
    return too_long(where + "queue_timeout_ms", t.queue_timeout_ms());
  if (t.fallback_budget_ms() > bounds::max_ms)
    return too_long(where + "fallback_budget_ms", t.fallback_budget_ms());
  if (!within(t.weight(), 0, 1e6))
    return bad(where + "weight must be a finite number in 0..1000000");
  auto& r = t.rate_limit();
  if (!within(r.items_per_second(), 0, 1e9))
    return bad(where + "rate_limit.items_per_second must be a finite number "
                       "in 0..1e9");
  if (t.on_limit() != pb::REJECT && t.on_limit() != pb::QUEUE &&
      t.on_limit() != pb::CPU_FALLBACK)
    return bad(where + "on_limit " + std::to_string(int(t.on_limit())) +
               " is not REJECT, QUEUE or CPU_FALLBACK");
  return caf::none;
}

caf::error check_scheduler(const pb::Scheduler& s) {
  auto where = std::string{"scheduler: "};
  if (!s.policy().empty() && s.policy() != "stealing" &&
      s.policy() != "caf_stealing" && s.policy() != "sharing")
    return bad(where + "policy is '" + s.policy() +
               "', not \"stealing\", \"caf_stealing\" or \"sharing\"");
  auto range = [&](const char* name, bool has, uint32_t x, uint32_t lo,
                   uint32_t hi) -> caf::error {
    if (has && (x < lo || x > hi))
      return bad(where + name + " is " + std::to_string(x) + ", not in " +
                 std::to_string(lo) + ".." + std::to_string(hi));
    return caf::none;
  };
  // A steal interval divides a counter: 0 is refused.
  for (auto err :
       {range("threads", s.has_threads(), s.threads(), 1, bounds::max_threads),
        range("max_throughput", s.has_max_throughput(), s.max_throughput(), 1,
              bounds::max_throughput),
        range("aggressive_poll_attempts", s.has_aggressive_poll_attempts(),
              s.aggressive_poll_attempts(), 0, bounds::max_poll_attempts),
        range("aggressive_steal_interval", s.has_aggressive_steal_interval(),
              s.aggressive_steal_interval(), 1, bounds::max_poll_attempts),
        range("moderate_poll_attempts", s.has_moderate_poll_attempts(),
              s.moderate_poll_attempts(), 0, bounds::max_poll_attempts),
        range("moderate_steal_interval", s.has_moderate_steal_interval(),
              s.moderate_steal_interval(), 1, bounds::max_poll_attempts),
        range("moderate_sleep_us", s.has_moderate_sleep_us(),
              s.moderate_sleep_us(), 0, bounds::max_sleep_us),
        range("relaxed_steal_interval", s.has_relaxed_steal_interval(),
              s.relaxed_steal_interval(), 1, bounds::max_poll_attempts),
        range("relaxed_sleep_us", s.has_relaxed_sleep_us(),
              s.relaxed_sleep_us(), 1, bounds::max_sleep_us)})
    if (err)
      return err;
  return caf::none;
}

// A real GPU's name: its backend and its ordinal ("cuda0", "hip12").
// 1 to 3 digits.
bool is_index(std::string_view s) {
  return !s.empty() && s.size() <= 3 &&
         std::all_of(s.begin(), s.end(),
                     [](char c) { return c >= '0' && c <= '9'; });
}

// cuda0, hip1, or a MIG instance: mig0.1 (docs/device-hosts.md).
bool is_gpu_name(std::string_view name) {
  for (std::string_view prefix : {"cuda", "hip"})
    if (name.starts_with(prefix) && is_index(name.substr(prefix.size())))
      return true;
  if (!name.starts_with("mig"))
    return false;
  auto dot = name.find('.');
  return dot != std::string_view::npos && is_index(name.substr(3, dot - 3)) &&
         is_index(name.substr(dot + 1));
}

} // namespace

caf::error check_bounds(const pb::RuntimeConfig& cfg) {
  auto& d = cfg.devices();
  if (d.has_cpu_workers() && d.cpu_workers() > 64)
    return bad("cpu_workers is " + std::to_string(d.cpu_workers()) +
               ", at most 64 devices are supported");
  if (d.sim_gpu_size() > 64)
    return bad("the config has " + std::to_string(d.sim_gpu_size()) +
               " simulated GPUs, at most 64 devices are supported");
  // A GPU has one more stream than it launches on: its pool's fill stream.
  if (d.gpu_streams() > bounds::max_gpu_streams)
    return bad("gpu_streams is " + std::to_string(d.gpu_streams()) +
               ", at most " + std::to_string(bounds::max_gpu_streams) +
               " are supported");
  for (auto& g : d.sim_gpu())
    if (auto err = check_sim_gpu(g))
      return err;
  if (d.host_binary().size() > 4096)
    return bad("devices.host_binary is longer than 4096 bytes");
  if (d.gpu_host_process_size() > 64)
    return bad("devices.gpu_host_process names " +
               std::to_string(d.gpu_host_process_size()) +
               " GPUs, at most 64 devices are supported");
  for (auto& [name, hosted] : d.gpu_host_process())
    if (!is_gpu_name(name))
      return bad("devices.gpu_host_process: '" + name.substr(0, 64) +
                 "' is not a GPU's name (cuda0, cuda1, ..., hip0, ..., "
                 "mig0.0, ...)");
  if (cfg.tenant_size() > bounds::max_tenants)
    return bad("the config has " + std::to_string(cfg.tenant_size()) +
               " tenants, at most " + std::to_string(bounds::max_tenants));
  for (auto& t : cfg.tenant())
    if (auto err = check_tenant(t))
      return err;
  auto& kb = cfg.kernel_bundles();
  for (auto [name, n, most] :
       {std::tuple{"trusted_key", kb.trusted_key_size(),
                   bounds::max_bundle_keys},
        std::tuple{"load", kb.load_size(), bounds::max_bundles},
        std::tuple{"revoked_key", kb.revoked_key_size(), bounds::max_revoked},
        std::tuple{"revoked_bundle", kb.revoked_bundle_size(),
                   bounds::max_revoked}})
    if (n > most)
      return bad(std::string{"kernel_bundles."} + name + " has " +
                 std::to_string(n) + " entries, at most " +
                 std::to_string(most));
  if (auto mb = kb.host_memory_mb(); mb != 0 && (mb < 64 || mb > 1048576))
    return bad("kernel_bundles.host_memory_mb is " + std::to_string(mb) +
               ", not in 64..1048576 (0: 4096)");
  if (!pb::KernelBundles::CpuCode_IsValid(kb.cpu_code()))
    return bad("kernel_bundles.cpu_code is " + std::to_string(kb.cpu_code()) +
               ", not KERNEL_HOST or IN_PROCESS");
  if (cfg.max_attempts() > bounds::max_attempts)
    return bad("max_attempts is " + std::to_string(cfg.max_attempts()) +
               ", at most " + std::to_string(bounds::max_attempts));
  for (auto [name, ms] :
       {std::pair{"kernel_timeout_ms", cfg.kernel_timeout_ms()},
        std::pair{"restart_period_ms", cfg.restart_period_ms()},
        std::pair{"shutdown_drain_ms", cfg.shutdown_drain_ms()},
        std::pair{"supervision.restart_delay_ms",
                  cfg.supervision().restart_delay_ms()},
        std::pair{"supervision.max_restart_delay_ms",
                  cfg.supervision().max_restart_delay_ms()},
        std::pair{"supervision.degraded_quiet_ms",
                  cfg.supervision().degraded_quiet_ms()},
        std::pair{"supervision.telemetry_interval_ms",
                  cfg.supervision().telemetry_interval_ms()},
        std::pair{"supervision.circuit.window_ms",
                  cfg.supervision().circuit().window_ms()},
        std::pair{"supervision.circuit.open_ms",
                  cfg.supervision().circuit().open_ms()},
        std::pair{"alerts.eval_interval_ms", cfg.alerts().eval_interval_ms()},
        std::pair{"alerts.device_unavailable_ms",
                  cfg.alerts().device_unavailable_ms()},
        std::pair{"alerts.xid_window_ms", cfg.alerts().xid_window_ms()},
        std::pair{"kernel_bundles.load_timeout_ms",
                  cfg.kernel_bundles().load_timeout_ms()},
        std::pair{"devices.host_start_timeout_ms",
                  cfg.devices().host_start_timeout_ms()},
        std::pair{"devices.rescan_interval_ms",
                  cfg.devices().rescan_interval_ms()},
        std::pair{"devices.rescan_timeout_ms",
                  cfg.devices().rescan_timeout_ms()}})
    if (ms > bounds::max_ms)
      return too_long(name, ms);
  if (auto ms = cfg.devices().rescan_interval_ms(); ms > 0 && ms < 100)
    return bad("devices.rescan_interval_ms is " + std::to_string(ms) +
               ": 0 (only when asked) or at least 100");
  if (cfg.devices().rescan_missing_scans() > 100)
    return bad("devices.rescan_missing_scans is " +
               std::to_string(cfg.devices().rescan_missing_scans()) +
               ", at most 100");
  if (auto err = check_scheduler(cfg.scheduler()))
    return err;
  if (!within(cfg.supervision().degraded_penalty(), 0, 1e6))
    return bad("supervision: degraded_penalty must be a finite number in "
               "0..1000000");
  return caf::none;
}

} // namespace cohort::config
