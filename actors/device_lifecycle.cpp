#include "actors/device_lifecycle.hpp"

#include <string>

#include "actors/device_change.hpp"
#include "messages/errc.hpp"

namespace cohort::actors {

const char* to_string(lifecycle_event x) {
  switch (x) {
  case lifecycle_event::warning:
    return "warning";
  case lifecycle_event::quiet:
    return "quiet";
  case lifecycle_event::lost:
    return "lost";
  case lifecycle_event::restarted:
    return "restarted";
  case lifecycle_event::gave_up:
    return "gave_up";
  case lifecycle_event::drain:
    return "drain";
  case lifecycle_event::offline:
    return "offline";
  case lifecycle_event::online:
    return "online";
  }
  return "unknown";
}

const char* to_string(device_cause x) {
  switch (x) {
  case device_cause::started:
    return "started";
  case device_cause::health:
    return "health";
  case device_cause::fault:
    return "fault";
  case device_cause::crashed:
    return "crashed";
  case device_cause::restarting:
    return "restarting";
  case device_cause::offline:
    return "offline";
  case device_cause::gave_up:
    return "gave_up";
  case device_cause::removed:
    return "removed";
  }
  return "unknown";
}

caf::expected<device_status> device_lifecycle::apply(lifecycle_event ev) {
  using st = device_status;
  auto refuse = [&](const char* why) {
    return make_error(errc::invalid_transition,
                      std::string{"cannot "} + to_string(ev) + " a " +
                          to_string(status_) + " device: " + why);
  };
  switch (ev) {
  case lifecycle_event::warning:
    if (status_ == st::available)
      status_ = st::degraded;
    break;
  case lifecycle_event::quiet:
    if (status_ == st::degraded)
      status_ = st::available;
    break;
  case lifecycle_event::lost:
    if (status_ != st::offline)
      status_ = st::resetting;
    break;
  case lifecycle_event::restarted:
    if (status_ == st::resetting)
      status_ = drain_ ? st::draining : st::available;
    break;
  case lifecycle_event::gave_up:
    status_ = st::offline;
    drain_ = false;
    break;
  case lifecycle_event::drain:
    if (status_ == st::offline)
      return refuse("it runs nothing; bring it online first");
    drain_ = true;
    if (status_ != st::resetting)
      status_ = st::draining;
    break;
  case lifecycle_event::offline:
    status_ = st::offline;
    drain_ = false;
    break;
  case lifecycle_event::online:
    if (status_ == st::resetting)
      return refuse("it is being reset and comes back by itself");
    drain_ = false;
    if (status_ == st::draining)
      status_ = st::available;
    else if (status_ == st::offline)
      status_ = st::resetting; // the supervisor resets and restarts it
    break;
  }
  return status_;
}

} // namespace cohort::actors
