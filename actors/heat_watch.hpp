// Temperature and power that act on a GPU (docs/supervision.md, "Health
// that acts"): the level a device's health readings put it at, with
// hysteresis. A reading at a threshold raises the level at once; the level
// falls only once the readings stayed at or below the recover thresholds
// for a while, so that a device near a threshold does not flap.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include <caf/typed_actor.hpp>

#include "devices/health/health.hpp"
#include "messages/atoms.hpp"

namespace cohort::actors {

/// supervision.heat compiled (config::supervision_of). A threshold of 0 is
/// unset; the recover thresholds are always set when their kind is.
struct heat_limits {
  int32_t degrade_c = 0;
  int32_t drain_c = 0;
  int32_t recover_c = 0;
  /// Fractions of the device's power limit.
  double degrade_power = 0;
  double drain_power = 0;
  double recover_power = 0;
  std::chrono::milliseconds recover_for{30000};

  bool any() const {
    return degrade_c > 0 || drain_c > 0 || degrade_power > 0 || drain_power > 0;
  }
};

/// Where readings put a device: nothing to do, degraded, drained.
enum class heat_level : uint8_t { ok, hot, critical };

const char* to_string(heat_level x);

/// Who hears of a device's level changing (the supervisor): device
/// `index`, its new level, and why, in words for the audit log.
using heat_listener =
    caf::typed_actor<caf::reacts_to<heat_atom, uint32_t, uint8_t, std::string>>;

/// One device's level. Not thread-safe: the telemetry sampler owns it.
class heat_watch {
public:
  struct change {
    heat_level level = heat_level::ok;
    std::string why;
  };

  explicit heat_watch(const heat_limits& limits) : limits_(limits) {}

  /// The level after reading `s` at `now`, when it changed. A sample
  /// without counters changes nothing.
  std::optional<change> observe(const devices::health::gpu_sample& s,
                                std::chrono::steady_clock::time_point now);

  heat_level level() const { return level_; }

private:
  heat_level reading(const devices::health::gpu_sample& s,
                     std::string& why) const;
  bool cool(const devices::health::gpu_sample& s) const;

  heat_limits limits_;
  heat_level level_ = heat_level::ok;
  /// Since when the readings have been cool (unset while they are not).
  std::optional<std::chrono::steady_clock::time_point> cool_since_;
};

} // namespace cohort::actors
