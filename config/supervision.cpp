#include "config/supervision.hpp"

#include <algorithm>
#include <string>

#include "config/bounds.hpp"
#include "kernels/catalog.hpp"
#include "messages/errc.hpp"

namespace cohort::config {

using namespace actors;

namespace {

void set_timeout(supervisor_config& s, kernels::kernel_id k,
                 std::chrono::milliseconds t) {
  auto i = static_cast<size_t>(k);
  if (s.kernel_timeouts.size() <= i)
    s.kernel_timeouts.resize(i + 1, std::chrono::milliseconds{0});
  s.kernel_timeouts[i] = t;
}

/// Codes with a rule, in all rules together.
constexpr size_t max_xid_codes = 1024;

// supervision.heat: thresholds in order (degrade below drain, recover below
// both), temperatures a GPU can read, power fractions of its limit.
caf::error heat_of(const pb::HeatLimits& h, heat_limits& out) {
  auto bad = [](const std::string& what) {
    return make_error(errc::malformed_config, "supervision.heat: " + what);
  };
  for (auto c : {h.degrade_temperature_c(), h.drain_temperature_c(),
                 h.recover_temperature_c()})
    if (c > 200)
      return bad("temperatures are at most 200 C, not " + std::to_string(c));
  for (auto f : {h.degrade_power_fraction(), h.drain_power_fraction(),
                 h.recover_power_fraction()})
    if (!(f >= 0 && f <= 2))
      return bad("power fractions are 0 to 2 of the device's limit, not " +
                 std::to_string(f));
  if (h.recover_ms() > 3'600'000)
    return bad("recover_ms is at most an hour");
  out.degrade_c = int32_t(h.degrade_temperature_c());
  out.drain_c = int32_t(h.drain_temperature_c());
  out.degrade_power = h.degrade_power_fraction();
  out.drain_power = h.drain_power_fraction();
  if (out.degrade_c > 0 && out.drain_c > 0 && out.drain_c <= out.degrade_c)
    return bad("drain_temperature_c must be above degrade_temperature_c");
  if (out.degrade_power > 0 && out.drain_power > 0 &&
      out.drain_power <= out.degrade_power)
    return bad("drain_power_fraction must be above degrade_power_fraction");
  // The lowest threshold of each kind set; recover below it.
  auto lowest_c = out.degrade_c > 0 ? out.degrade_c : out.drain_c;
  auto lowest_p = out.degrade_power > 0 ? out.degrade_power : out.drain_power;
  if (h.recover_temperature_c() > 0 && lowest_c == 0)
    return bad("recover_temperature_c without a temperature threshold");
  if (h.recover_power_fraction() > 0 && lowest_p == 0)
    return bad("recover_power_fraction without a power threshold");
  out.recover_c = h.recover_temperature_c() > 0
                      ? int32_t(h.recover_temperature_c())
                      : lowest_c - 5;
  out.recover_power = h.recover_power_fraction() > 0
                          ? h.recover_power_fraction()
                          : std::max(0.0, lowest_p - 0.05);
  if (lowest_c > 0 && out.recover_c < 1)
    return bad("the lowest temperature threshold leaves no room to recover "
               "below it: set recover_temperature_c, at least 1 C");
  if (lowest_p > 0 && !(out.recover_power > 0))
    return bad("the lowest power threshold leaves no room to recover below "
               "it: set recover_power_fraction above 0");
  if (lowest_c > 0 && out.recover_c >= lowest_c)
    return bad("recover_temperature_c must be below " +
               std::to_string(lowest_c) + " C, the lowest threshold");
  if (lowest_p > 0 && out.recover_power >= lowest_p)
    return bad("recover_power_fraction must be below the lowest power "
               "threshold");
  if (h.recover_ms() > 0)
    out.recover_for = std::chrono::milliseconds{h.recover_ms()};
  return caf::none;
}

// supervision.xid: each code once, 1 to 65535, every rule with an action.
caf::error xid_policy_of(const pb::Supervision& sv, devices::xid_policy& out) {
  auto bad = [](const std::string& what) {
    return make_error(errc::malformed_config, "supervision.xid: " + what);
  };
  size_t codes = 0;
  for (auto& rule : sv.xid()) {
    devices::xid_action action;
    switch (rule.action()) {
    case pb::XID_IGNORE:
      action = devices::xid_action::ignore;
      break;
    case pb::XID_DEGRADE:
      action = devices::xid_action::degrade;
      break;
    case pb::XID_RESET:
      action = devices::xid_action::reset;
      break;
    case pb::XID_ISOLATE:
      action = devices::xid_action::isolate;
      break;
    default:
      return bad("a rule has no action (XID_IGNORE, XID_DEGRADE, XID_RESET "
                 "or XID_ISOLATE)");
    }
    if (rule.codes().empty())
      return bad(std::string{"a rule "} + to_string(action) + " has no codes");
    codes += size_t(rule.codes_size());
    if (codes > max_xid_codes)
      return bad("at most " + std::to_string(max_xid_codes) + " codes in all");
    for (auto code : rule.codes()) {
      if (code == 0 || code > 65535)
        return bad("Xid codes are 1 to 65535, not " + std::to_string(code));
      if (out.rules().count(code) != 0)
        return bad("Xid " + std::to_string(code) + " is in two rules");
      out.set(code, action);
    }
  }
  return caf::none;
}

} // namespace

caf::expected<std::pair<balancer_config, supervisor_config>>
supervision_of(const pb::RuntimeConfig& cfg) {
  using ms = std::chrono::milliseconds;
  auto bad = [](const std::string& what) {
    return make_error(errc::malformed_config, "supervision: " + what);
  };
  balancer_config b;
  supervisor_config s;
  if (cfg.max_attempts() > 0)
    b.max_attempts = cfg.max_attempts();
  if (cfg.kernel_timeout_ms() > 0)
    s.kernel_timeout = ms{cfg.kernel_timeout_ms()};
  if (cfg.max_restarts() > 0)
    s.max_restarts = cfg.max_restarts();
  if (cfg.restart_period_ms() > 0)
    s.restart_period = ms{cfg.restart_period_ms()};
  auto& sv = cfg.supervision();
  s.strategy = sv.strategy() == pb::ONE_FOR_ALL ? restart_strategy::one_for_all
                                                : restart_strategy::one_for_one;
  if (sv.restart_delay_ms() > 0)
    s.restart_delay = ms{sv.restart_delay_ms()};
  if (sv.max_restart_delay_ms() > 0)
    s.max_restart_delay = ms{sv.max_restart_delay_ms()};
  if (s.max_restart_delay < s.restart_delay)
    return bad("max_restart_delay_ms is below restart_delay_ms");
  if (sv.degraded_quiet_ms() > 0)
    s.degraded_quiet = ms{sv.degraded_quiet_ms()};
  if (sv.degraded_penalty() < 0 ||
      (sv.degraded_penalty() > 0 && sv.degraded_penalty() < 1))
    return bad("degraded_penalty must be at least 1");
  if (sv.degraded_penalty() >= 1)
    b.degraded_penalty = sv.degraded_penalty();
  if (auto err = heat_of(sv.heat(), s.heat))
    return err;
  if (auto err = xid_policy_of(sv, s.xid_policy))
    return err;
  auto& pl = cfg.placement();
  switch (pl.policy()) {
  case pb::EARLIEST_COMPLETION:
    b.policy = placement_policy::earliest_completion;
    break;
  case pb::ROUND_ROBIN:
    b.policy = placement_policy::round_robin;
    break;
  case pb::LEAST_LOADED:
    b.policy = placement_policy::least_loaded;
    break;
  default:
    return make_error(errc::malformed_config,
                      "placement: unknown policy " +
                          std::to_string(int(pl.policy())));
  }
  b.audit_fail_closed =
      cfg.audit().on_write_failure() != pb::AUDIT_KEEP_RUNNING;
  if (pl.model_window() > 64)
    return make_error(errc::malformed_config,
                      "placement: model_window is at most 64");
  if (pl.model_window() > 0)
    b.model_window = pl.model_window();
  b.gang_cross_numa = pl.gang_cross_numa();
  for (auto& rule : pl.batch()) {
    auto k = kernels::parse_kernel(rule.kernel());
    auto bad_batch = [&](const std::string& what) {
      return make_error(errc::malformed_config, "placement: batch rule for '" +
                                                    rule.kernel() +
                                                    "': " + what);
    };
    if (!k)
      return bad_batch("unknown kernel");
    if (*k != kernel_id::axpy && *k != kernel_id::gemm)
      return bad_batch("only axpy (same alpha) and gemm (same B operand) "
                       "items can share a launch");
    auto& b_rule = b.batch[static_cast<size_t>(*k)];
    if (b_rule.enabled)
      return bad_batch("given twice");
    b_rule.enabled = true;
    if (rule.preferred_batch() > 0)
      b_rule.preferred = rule.preferred_batch();
    if (rule.max_delay_us() > 10'000'000)
      return bad_batch("max_delay_us is at most 10 s");
    if (rule.max_delay_us() > 0)
      b_rule.max_delay = std::chrono::microseconds{rule.max_delay_us()};
    if (rule.max_item_elements() > 0)
      b_rule.max_item_elements = rule.max_item_elements();
  }
  auto& c = sv.circuit();
  if (c.failures() > 0)
    b.circuit.failures = c.failures();
  if (c.window_ms() > 0)
    b.circuit.window = ms{c.window_ms()};
  if (c.open_ms() > 0)
    b.circuit.open_for = ms{c.open_ms()};
  if (c.probes() > 0)
    b.circuit.probes = c.probes();
  for (auto& kt : sv.kernel_timeout()) {
    if (kt.timeout_ms() == 0)
      return bad("kernel_timeout for " + kt.kernel() + " is 0 ms");
    if (kt.timeout_ms() > config_bounds::max_ms)
      return bad("kernel_timeout for " + kt.kernel() + " is " +
                 std::to_string(kt.timeout_ms()) + " ms, at most " +
                 std::to_string(config_bounds::max_ms));
    auto k = kernels::parse_kernel(kt.kernel());
    if (k) {
      set_timeout(s, *k, ms{kt.timeout_ms()});
      continue;
    }
    // A bundle's kernel is registered once the bundle loads, after this.
    if (cfg.kernel_bundles().load_size() == 0)
      return bad("kernel_timeout names unknown kernel '" + kt.kernel() + "'");
    s.pending_kernel_timeouts.emplace_back(kt.kernel(), ms{kt.timeout_ms()});
  }
  return std::make_pair(b, s);
}

caf::error resolve_kernel_timeouts(supervisor_config& s,
                                   bool bundle_refused) {
  for (auto& [name, t] : s.pending_kernel_timeouts) {
    auto k = kernels::parse_kernel(name);
    if (k) {
      set_timeout(s, *k, t);
      continue;
    }
    // Most likely a kernel of the refused bundle: the node runs on without
    // it, as without the bundle.
    if (bundle_refused)
      continue;
    return make_error(errc::malformed_config,
                      "supervision: kernel_timeout names unknown kernel '" +
                          name + "' (not built in, not in a loaded bundle)");
  }
  s.pending_kernel_timeouts.clear();
  return {};
}

} // namespace cohort::config
