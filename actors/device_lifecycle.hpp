// One device's life cycle as the supervisor drives it: available, degraded,
// draining, resetting, offline, and the events that move it between them.
#pragma once

#include <cstdint>

#include <caf/expected.hpp>

#include "messages/stats.hpp"

namespace cohort::actors {

/// What can happen to a device.
enum class lifecycle_event : uint8_t {
  /// A warning that does not take it down (an Xid the policy degrades on,
  /// a corrected ECC error, thermal throttling).
  warning,
  /// No warning for the quiet period.
  quiet,
  /// Lost: an Xid the policy resets on, a sticky error, a hang, a crashed
  /// actor.
  lost,
  /// Reset and restarted with a new actor.
  restarted,
  /// The supervisor gave up on it (restart limit, failed reset).
  gave_up,
  /// Operator actions.
  drain,
  offline,
  online,
};

/// Returns the event's name ("warning", "lost", ...).
const char* to_string(lifecycle_event x);

/// Not thread-safe: lives in the supervisor's state.
class device_lifecycle {
public:
  /// Starts as resetting: a device is not available before its actor runs.
  device_lifecycle() = default;

  device_status status() const { return status_; }

  /// True while an operator's drain holds (it survives a loss and restart).
  bool drain_requested() const { return drain_; }

  /// Applies `ev`. Returns the new status, or invalid_transition saying why
  /// the event does not apply (an operator draining an offline device, or
  /// bringing online one that is being reset); then nothing changed.
  caf::expected<device_status> apply(lifecycle_event ev);

  /// Drops a drain a restart would carry over (one asked for by heat, on
  /// a device that is being reset and cooled meanwhile).
  void forget_drain() { drain_ = false; }

private:
  device_status status_ = device_status::resetting;
  bool drain_ = false;
};

} // namespace cohort::actors
