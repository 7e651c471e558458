// In-process alerts: rules evaluated over the runtime's own counters at a
// fixed interval. Each alert that starts or stops firing is audited; the
// firing set is what `cohort_alerts_firing` and the admin API show.
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <caf/typed_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "actors/audit.hpp"
#include "actors/balancer/balancer.hpp"
#include "actors/quota.hpp"
#include "actors/supervisor.hpp"
#include "messages/alert.hpp"
#include "messages/cohort.pb.h"

namespace cohort::actors {

/// Thresholds, defaults filled in (see `cohort.pb.AlertRules`).
struct alert_rules {
  std::chrono::milliseconds interval{1000};
  double vram_high_fraction = 0.9;
  double allocation_failure_rate = 1;
  std::chrono::milliseconds device_unavailable{5000};
  double fallback_fraction = 0.1;
  uint64_t fallback_min_items = 10;
  double tenant_quota_fraction = 0.9;
  /// xid_errors: this many Xids of one device within the window.
  uint32_t xid_count = 3;
  std::chrono::milliseconds xid_window{600'000};
  bool enabled = true;
};

/// A device's Xid errors so far (devices::device::xid_errors) and the last.
struct device_xids {
  std::string device;
  uint64_t count = 0;
  uint32_t last = 0;
};

/// Where the alert actor reads the devices' Xid counts (thread-safe).
using xid_source = std::function<std::vector<device_xids>()>;

/// What one evaluation looks at.
struct alert_inputs {
  std::chrono::steady_clock::time_point now;
  balancer_stats stats;
  std::vector<memory_snapshot> memory;
  headroom_report headroom;
  cohort::audit_stats audit;
  std::vector<device_xids> xids;
};

/// The rules' memory between evaluations (rates need the previous counters,
/// device_unavailable how long a device has been down) and the firing set.
/// Not thread-safe: lives in the alert actor's state; tests drive it with
/// made-up inputs.
class alert_evaluator {
public:
  explicit alert_evaluator(alert_rules rules) : rules_(rules) {
    // nop
  }

  /// A change of the firing set.
  struct change {
    cohort::alert what;
    /// True: started firing; false: resolved.
    bool firing = false;
  };

  /// Evaluates every rule; returns what started or stopped firing.
  std::vector<change> evaluate(const alert_inputs& in);

  /// Alerts firing now, ordered by name and subject.
  std::vector<cohort::alert> firing() const;

  /// A kernel bundle was refused (kernel_bundle_refused fires for `bundle`
  /// from the next evaluation on) or, with `why` empty, loaded (it stops).
  void bundle_outcome(const std::string& bundle, std::string why);

  const alert_rules& rules() const { return rules_; }

private:
  alert_rules rules_;
  bool first_ = true;
  std::chrono::steady_clock::time_point last_{};
  std::map<std::string, uint64_t> refused_before_;
  uint64_t fallbacks_before_ = 0;
  uint64_t ended_before_ = 0;
  std::map<std::string, std::chrono::steady_clock::time_point> down_since_;
  /// Per device: its Xid count at the last evaluation, and when the Xids
  /// within the window came (one entry per Xid, at most xid_count kept).
  std::map<std::string, uint64_t> xids_before_;
  std::map<std::string, std::deque<std::chrono::steady_clock::time_point>>
      xid_times_;
  std::map<std::pair<std::string, std::string>, cohort::alert> firing_;
  /// Refused bundles and why, until the same bundle loads.
  std::map<std::string, std::string> refused_bundles_;
};

using alert_actor = caf::typed_actor<
    /// Internal: evaluate the rules now.
    caf::reacts_to<tick_atom>,
    /// A kernel bundle (its directory) was refused, and why; loaded when
    /// the reason is empty.
    caf::reacts_to<bundle_atom, std::string, std::string>,
    /// The alerts firing now.
    caf::replies_to<alerts_atom>::with<std::vector<cohort::alert>>>;

struct alert_state {
  alert_evaluator eval{alert_rules{}};
  balancer_actor balancer;
  supervisor_actor supervisor;
  quota_actor quota;
  audit_actor audit;
  xid_source xids;
  bool busy = false;
  static inline const char* name = "cohort.alerts";
};

/// Evaluates `rules` every interval over the balancer's counters, the
/// devices' memory and Xids and the tenants' headroom, and audits each
/// change.
alert_actor::behavior_type
alert_impl(alert_actor::stateful_pointer<alert_state> self, alert_rules rules,
           balancer_actor balancer, supervisor_actor supervisor,
           quota_actor quota, audit_actor audit, xid_source xids);

} // namespace cohort::actors
