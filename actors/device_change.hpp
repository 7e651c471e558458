// What the supervisor tells the balancer when a device's life cycle moves:
// one message per change, saying the device's new generation, status and
// cause. The supervisor alone owns the life cycle (device_lifecycle); the
// balancer only places work by what it is told.
#pragma once

#include <cstdint>
#include <string>

#include <caf/error.hpp>
#include <caf/meta/load_callback.hpp>
#include <caf/meta/type_name.hpp>

#include "actors/device_actor.hpp"
#include "messages/stats.hpp"

namespace cohort::actors {

/// Why a device's life cycle moved.
enum class device_cause : uint8_t {
  /// Its actor (re)started: `handle` is the new one.
  started = 1,
  /// Its status changed while its actor runs on (a warning, a quiet
  /// period, an operator's drain or online).
  health = 2,
  /// Its actor ended on a device fault (a kernel fault or timeout, a lost
  /// device, a poisoned context): a loss, counted against its circuit. It
  /// is being reset and restarted.
  fault = 3,
  /// Its actor ended for another reason: a loss; it is being restarted.
  crashed = 4,
  /// Taken down on purpose to be restarted (a sibling's restart under
  /// one_for_all, an operator's offline then online): not its loss.
  restarting = 5,
  /// Taken out of service by an operator, who may bring it back.
  offline = 6,
  /// Out of service for good: its restart limit was reached or its reset
  /// failed. Its memory was released first.
  gave_up = 7,
  /// Gone from the machine, as rescans found (docs/gpu.md, "Rescanning at
  /// run time"): out of service until a rescan finds it again. Its memory
  /// was released first.
  removed = 8,
};

/// Returns "started", "health", "fault", "crashed", "restarting",
/// "offline", "gave_up" or "removed".
const char* to_string(device_cause x);

/// One change of device `index`.
struct device_change {
  uint32_t index = 0;
  /// How many times its actor has started; a change about an older
  /// generation than the balancer knows is stale and dropped.
  uint32_t generation = 0;
  device_status status = device_status::resetting;
  device_cause cause = device_cause::health;
  /// What the items that move on because of it are told (losses, restarts,
  /// offline), and what the audit log says.
  caf::error reason;
  std::string why;
  /// The new actor (cause started).
  device_actor handle;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, device_change& x) {
  auto status = static_cast<uint8_t>(x.status);
  auto cause = static_cast<uint8_t>(x.cause);
  auto load = caf::meta::load_callback([&]() -> caf::error {
    x.status = static_cast<device_status>(status);
    x.cause = static_cast<device_cause>(cause);
    return caf::none;
  });
  return f(caf::meta::type_name("device_change"), x.index, x.generation,
           status, cause, x.reason, x.why, x.handle, load);
}

} // namespace cohort::actors
