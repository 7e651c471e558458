#include "config/alerts.hpp"

#include <string>

#include "messages/errc.hpp"

namespace cohort::config {

using actors::alert_rules;

namespace {

// The evaluator keeps the time of each of the last xid_count Xids.
constexpr uint32_t max_xid_count = 10'000;

} // namespace

caf::expected<alert_rules> alert_rules_of(const pb::RuntimeConfig& cfg) {
  alert_rules r;
  auto& a = cfg.alerts();
  r.enabled = !a.disabled();
  if (a.eval_interval_ms() > 0)
    r.interval = std::chrono::milliseconds{a.eval_interval_ms()};
  if (a.device_unavailable_ms() > 0)
    r.device_unavailable = std::chrono::milliseconds{a.device_unavailable_ms()};
  if (a.fallback_min_items() > 0)
    r.fallback_min_items = a.fallback_min_items();
  if (a.xid_count() > max_xid_count)
    return make_error(errc::malformed_config,
                      "alerts.xid_count must be at most " +
                          std::to_string(max_xid_count) + ", got " +
                          std::to_string(a.xid_count()));
  if (a.xid_count() > 0)
    r.xid_count = a.xid_count();
  if (a.xid_window_ms() > 0)
    r.xid_window = std::chrono::milliseconds{a.xid_window_ms()};
  auto fraction = [](double x, double& out, const char* what) -> caf::error {
    if (x == 0)
      return caf::none;
    if (!(x > 0 && x <= 1))
      return make_error(errc::malformed_config,
                        std::string{"alerts."} + what +
                            " must be a fraction in (0, 1], got " +
                            std::to_string(x));
    out = x;
    return caf::none;
  };
  if (auto err = fraction(a.vram_high_fraction(), r.vram_high_fraction,
                          "vram_high_fraction"))
    return err;
  if (auto err = fraction(a.fallback_fraction(), r.fallback_fraction,
                          "fallback_fraction"))
    return err;
  if (auto err = fraction(a.tenant_quota_fraction(), r.tenant_quota_fraction,
                          "tenant_quota_fraction"))
    return err;
  if (a.allocation_failure_rate() < 0)
    return make_error(errc::malformed_config,
                      "alerts.allocation_failure_rate must not be negative");
  if (a.allocation_failure_rate() > 0)
    r.allocation_failure_rate = a.allocation_failure_rate();
  return r;
}

} // namespace cohort::config
