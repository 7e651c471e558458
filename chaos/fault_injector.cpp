#include "chaos/fault_injector.hpp"

#include "devices/device.hpp"
#include "messages/errc.hpp"

namespace cohort::chaos {

// Errors are described by cohort::describe, faults by ours.
using cohort::describe;

namespace {

bool is_operator_action(pb::FaultKind k) {
  return k == pb::DRAIN_DEVICE || k == pb::TAKE_OFFLINE ||
         k == pb::BRING_ONLINE || k == pb::CRASH_ACTOR;
}

} // namespace

bool is_loss(const fault& f) {
  switch (f.kind) {
  case pb::LOSE:
  case pb::LOSE_PERMANENTLY:
  case pb::STICKY_ERROR:
  case pb::CRASH_ACTOR:
  case pb::HANG_STREAM:
  case pb::TAKE_OFFLINE:
    return true;
  case pb::RAISE_XID:
    return devices::is_device_level_xid(f.xid);
  default:
    return false;
  }
}

caf::error check(const actors::runtime& rt, const fault& f) {
  if (f.kind == pb::FAULT_UNSPECIFIED || !pb::FaultKind_IsValid(f.kind))
    return make_error(errc::invalid_fault,
                      "a fault on '" + f.device + "' has no kind");
  bool known = false;
  for (auto& info : rt.devices())
    known |= info.name == f.device;
  if (!known)
    return make_error(errc::unknown_device, "fault " + describe(f) +
                                                ": no device is named '" +
                                                f.device + "'");
  if (!is_operator_action(f.kind) && !rt.sim_device(f.device))
    return make_error(errc::invalid_fault,
                      "fault " + describe(f) +
                          ": faults are injected into simulated GPUs only");
  if (f.kind == pb::SLOW_DOWN && !(f.factor > 0))
    return make_error(errc::invalid_fault,
                      "fault " + describe(f) + ": factor must be positive");
  if (f.kind == pb::RAISE_XID && f.xid == 0)
    return make_error(errc::invalid_fault,
                      "fault " + describe(f) + ": needs an xid");
  if (f.kind == pb::HANG_STREAM) {
    for (auto& info : rt.devices())
      if (info.name == f.device && f.stream >= info.streams)
        return make_error(errc::invalid_fault,
                          "fault " + describe(f) + ": " + f.device + " has " +
                              std::to_string(info.streams) + " streams");
  }
  return caf::none;
}

caf::error inject(actors::runtime& rt, const fault& f) {
  if (auto err = check(rt, f))
    return err;
  auto dev = rt.sim_device(f.device);
  switch (f.kind) {
  case pb::LOSE:
    dev->lose(false);
    break;
  case pb::LOSE_PERMANENTLY:
    dev->lose(true);
    break;
  case pb::FAIL_ALLOCATIONS:
    dev->fail_next_allocations(std::max(1u, f.allocations));
    break;
  case pb::RAISE_XID:
    dev->raise_xid(f.xid);
    break;
  case pb::HANG_STREAM:
    dev->hang_stream(f.stream);
    break;
  case pb::SLOW_DOWN:
    dev->slow_down(f.factor);
    break;
  case pb::STICKY_ERROR:
    dev->poison();
    break;
  case pb::ECC_CORRECTED:
    dev->warn("corrected ECC error");
    break;
  case pb::THERMAL:
    dev->warn("thermal throttling");
    break;
  case pb::CRASH_ACTOR:
    return rt.crash_device_actor(f.device);
  case pb::DRAIN_DEVICE:
    return rt.drain(f.device);
  case pb::TAKE_OFFLINE:
    return rt.set_offline(f.device);
  case pb::BRING_ONLINE:
    return rt.set_online(f.device);
  default:
    return make_error(errc::invalid_fault, "unknown fault kind");
  }
  return caf::none;
}

std::string describe(const fault& f) {
  std::string out = f.device + ": " + pb::FaultKind_Name(f.kind);
  switch (f.kind) {
  case pb::RAISE_XID:
    out += " " + std::to_string(f.xid);
    break;
  case pb::FAIL_ALLOCATIONS:
    out += " x" + std::to_string(f.allocations);
    break;
  case pb::SLOW_DOWN: {
    auto s = std::to_string(f.factor);
    s.erase(s.find_last_not_of('0') + 1);
    if (!s.empty() && s.back() == '.')
      s.pop_back();
    out += " x" + s;
    break;
  }
  case pb::HANG_STREAM:
    out += " stream " + std::to_string(f.stream);
    break;
  default:
    break;
  }
  return out;
}

} // namespace cohort::chaos
