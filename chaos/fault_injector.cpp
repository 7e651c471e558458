#include "chaos/fault_injector.hpp"

#include <signal.h>

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

bool is_host_fault(pb::FaultKind k) {
  return k == pb::KILL_HOST || k == pb::STOP_HOST;
}

// Where device `name` runs: 0 the node's process, 1 a host process, 2 a
// remote host.
int location(const actors::runtime& rt, const std::string& name) {
  for (auto& info : rt.devices())
    if (info.name == name)
      return !info.remote.empty() ? 2 : info.host_process ? 1 : 0;
  return 0;
}

} // namespace

bool is_loss(const fault& f, const devices::xid_policy& xids) {
  switch (f.kind) {
  case pb::LOSE:
  case pb::LOSE_PERMANENTLY:
  case pb::STICKY_ERROR:
  case pb::CRASH_ACTOR:
  case pb::HANG_STREAM:
  case pb::TAKE_OFFLINE:
  case pb::KILL_HOST:
  case pb::STOP_HOST:
  case pb::CUT_CONNECTION:
    return true;
  case pb::RAISE_XID:
    return xids.action(f.xid) >= devices::xid_action::reset;
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
  if (is_host_fault(f.kind)) {
    if (location(rt, f.device) != 1)
      return make_error(errc::invalid_fault,
                        "fault " + describe(f) + ": " + f.device +
                            " does not run in a host process of this node "
                            "(host_process: true)");
    return caf::none;
  }
  if (f.kind == pb::CUT_CONNECTION) {
    if (location(rt, f.device) == 0)
      return make_error(errc::invalid_fault,
                        "fault " + describe(f) + ": " + f.device +
                            " runs in the node's process: it has no "
                            "connection to cut");
    if (f.hold > std::chrono::hours{1})
      return make_error(errc::invalid_fault, "fault " + describe(f) +
                                                 ": a hold of at most one "
                                                 "hour");
    return caf::none;
  }
  bool simulated = false;
  for (auto& info : rt.devices())
    simulated |= info.name == f.device && info.simulated;
  if (!is_operator_action(f.kind) && !simulated)
    return make_error(errc::invalid_fault,
                      "fault " + describe(f) +
                          ": faults are injected into simulated GPUs only");
  if (f.kind == pb::SLOW_DOWN && !(f.factor > 0))
    return make_error(errc::invalid_fault,
                      "fault " + describe(f) + ": factor must be positive");
  if (f.kind == pb::HEAT && location(rt, f.device) != 0)
    return make_error(errc::invalid_fault,
                      "fault " + describe(f) + ": " + f.device +
                          " does not run in the node's process, which reads "
                          "no temperature from it");
  if (f.kind == pb::HEAT && (f.degrees < -100 || f.degrees > 200))
    return make_error(errc::invalid_fault,
                      "fault " + describe(f) +
                          ": degrees are -100 to 200 above its model");
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
  switch (f.kind) {
  case pb::CRASH_ACTOR:
    return rt.crash_device_actor(f.device);
  case pb::DRAIN_DEVICE:
    return rt.drain(f.device);
  case pb::TAKE_OFFLINE:
    return rt.set_offline(f.device);
  case pb::BRING_ONLINE:
    return rt.set_online(f.device);
  case pb::KILL_HOST:
  case pb::STOP_HOST: {
    auto pid = rt.host_pid(f.device);
    if (pid <= 0)
      return make_error(errc::invalid_transition,
                        "fault " + describe(f) + ": " + f.device +
                            " has no host process now");
    if (::kill(pid, f.kind == pb::KILL_HOST ? SIGKILL : SIGSTOP) != 0)
      return make_error(errc::invalid_transition,
                        "fault " + describe(f) + ": its host process " +
                            std::to_string(pid) + " is gone");
    return caf::none;
  }
  case pb::CUT_CONNECTION:
    return rt.cut_connection(f.device, f.hold);
  default: {
    sim_fault s;
    s.kind = f.kind;
    s.xid = f.xid;
    s.allocations = f.allocations;
    // HEAT's degrees travel as the factor.
    s.factor = f.kind == pb::HEAT ? double(f.degrees) : f.factor;
    s.stream = f.stream;
    return rt.inject_sim_fault(f.device, s);
  }
  }
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
  case pb::HEAT:
    out += " " + std::string{f.degrees >= 0 ? "+" : ""} +
           std::to_string(f.degrees) + " C";
    break;
  case pb::CUT_CONNECTION:
    if (f.hold.count() > 0)
      out += " for " + std::to_string(f.hold.count()) + " ms";
    break;
  default:
    break;
  }
  return out;
}

} // namespace cohort::chaos
