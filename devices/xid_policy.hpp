// What the runtime does when a GPU reports an Xid error: a table from code
// to action, configured as supervision { xid } (docs/supervision.md, "The
// Xid policy"), with defaults for the codes it does not name.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace cohort::devices {

/// Xid codes that take a whole GPU down (as opposed to application faults
/// such as 13, 31 and 43 that fail only the kernel that caused them).
bool is_device_level_xid(uint32_t xid);

/// The actions, from the mildest. Every Xid is counted whatever its action.
enum class xid_action : uint8_t {
  /// Counted, nothing more.
  ignore,
  /// The device is degraded (placed behind the others) until it has had no
  /// warning for the quiet period: the default of application-level codes.
  degrade,
  /// The device is lost, reset and restarted by its supervisor (its items
  /// in flight go elsewhere): the default of device-level codes.
  reset,
  /// The device is taken out of service and stays so until an operator
  /// brings it online: no restart.
  isolate,
};

/// "ignore", "degrade", "reset", "isolate".
const char* to_string(xid_action x);

/// Not thread-safe to change; a device keeps its own copy.
class xid_policy {
public:
  /// The defaults alone.
  xid_policy() = default;

  /// `code` takes `action` instead of its default.
  void set(uint32_t code, xid_action action) { rules_[code] = action; }

  /// The action for `code`: its rule, else reset for device-level codes
  /// and degrade for the others.
  xid_action action(uint32_t code) const;

  /// The codes that have a rule, with their actions.
  const std::map<uint32_t, xid_action>& rules() const { return rules_; }

  /// "Xid 13: isolate, Xid 48: degrade" (the rules), "defaults" when none.
  std::string describe() const;

private:
  std::map<uint32_t, xid_action> rules_;
};

} // namespace cohort::devices
