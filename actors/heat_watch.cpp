#include "actors/heat_watch.hpp"

#include <cstdio>

namespace cohort::actors {

const char* to_string(heat_level x) {
  switch (x) {
  case heat_level::ok:
    return "ok";
  case heat_level::hot:
    return "hot";
  case heat_level::critical:
    return "critical";
  }
  return "unknown";
}

namespace {

using devices::health::gpu_sample;

bool has_power(const gpu_sample& s) {
  return s.power_w >= 0 && s.power_limit_w > 0;
}

std::string watts(double w) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f W", w);
  return buf;
}

std::string percent(double f) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f%%", 100 * f);
  return buf;
}

} // namespace

heat_level heat_watch::reading(const gpu_sample& s, std::string& why) const {
  auto& l = limits_;
  bool temp = s.temperature_c >= 0;
  bool power = has_power(s);
  auto t = std::to_string(s.temperature_c) + " C";
  auto p =
      power ? watts(s.power_w) + " of its " + watts(s.power_limit_w) + " limit"
            : std::string{};
  // At or above a level's temperature `c` or power `fraction` (0: unset),
  // the temperature first; `why` says which.
  auto past = [&](int32_t c, double fraction) {
    if (temp && c > 0 && s.temperature_c >= c) {
      why = t + ", at or above " + std::to_string(c) + " C";
      return true;
    }
    if (power && fraction > 0 && s.power_w >= fraction * s.power_limit_w) {
      why = p + ", at or above " + percent(fraction) + " of it";
      return true;
    }
    return false;
  };
  if (past(l.drain_c, l.drain_power))
    return heat_level::critical;
  if (past(l.degrade_c, l.degrade_power))
    return heat_level::hot;
  why = (temp ? t : std::string{"no temperature"}) +
        (power ? ", " + p : std::string{});
  return heat_level::ok;
}

bool heat_watch::cool(const gpu_sample& s) const {
  auto& l = limits_;
  bool temp_set = l.degrade_c > 0 || l.drain_c > 0;
  bool power_set = l.degrade_power > 0 || l.drain_power > 0;
  if (temp_set && s.temperature_c > l.recover_c)
    return false;
  if (power_set && has_power(s) &&
      s.power_w > l.recover_power * s.power_limit_w)
    return false;
  return true;
}

std::optional<heat_watch::change>
heat_watch::observe(const gpu_sample& s,
                    std::chrono::steady_clock::time_point now) {
  if (!s.available || !limits_.any())
    return std::nullopt;
  std::string why;
  auto level = reading(s, why);
  if (level > level_) {
    // Up at once.
    level_ = level;
    cool_since_.reset();
    return change{level_, why};
  }
  if (level == level_ || !cool(s)) {
    // Not cool enough to come down: the wait starts again.
    cool_since_.reset();
    return std::nullopt;
  }
  if (!cool_since_)
    cool_since_ = now;
  if (now - *cool_since_ < limits_.recover_for)
    return std::nullopt;
  level_ = level;
  cool_since_.reset();
  return change{level_, why + ", at or below its recover thresholds for " +
                            std::to_string(limits_.recover_for.count()) +
                            " ms"};
}

} // namespace cohort::actors
