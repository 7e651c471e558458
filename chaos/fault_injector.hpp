// Applies one fault or operator action of a chaos timeline (or a pipeline's
// fault list) to a running runtime.
#pragma once

#include <chrono>

#include <string>

#include <caf/error.hpp>

#include "actors/runtime.hpp"
#include "messages/cohort.pb.h"

namespace cohort::chaos {

/// One fault, with what each kind needs.
struct fault {
  pb::FaultKind kind = pb::FAULT_UNSPECIFIED;
  std::string device;
  uint32_t xid = 0;
  uint32_t allocations = 1;
  double factor = 1.0;
  uint32_t stream = 0;
  /// CUT_CONNECTION: how long a remote host's network stays down.
  std::chrono::milliseconds hold{0};
  /// HEAT: degrees above the device's model (0: as modeled).
  int32_t degrees = 0;
};

/// True for the kinds that take a device down (their recovery is timed):
/// an Xid when `xids` resets or isolates its device.
bool is_loss(const fault& f, const devices::xid_policy& xids);

/// Checks that `f` names a device of `rt` it can apply to (faults need a
/// simulated GPU; operator actions take any device); invalid_fault or
/// unknown_device otherwise.
caf::error check(const actors::runtime& rt, const fault& f);

/// Applies `f` now. Operator actions may fail (invalid_transition); the
/// error says why and nothing changed.
caf::error inject(actors::runtime& rt, const fault& f);

/// "sim0: RAISE_XID 79", for reports.
std::string describe(const fault& f);

} // namespace cohort::chaos
