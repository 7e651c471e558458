#include "devices/xid_policy.hpp"

namespace cohort::devices {

bool is_device_level_xid(uint32_t xid) {
  switch (xid) {
  case 48: // double-bit ECC error
  case 63: // ECC page retirement / row remapping event
  case 64: // ECC page retirement / row remapping failure
  case 74: // NVLink error
  case 79: // fallen off the bus
  case 92: // high single-bit ECC error rate
  case 94: // contained ECC error
  case 95: // uncontained ECC error
    return true;
  default:
    return false;
  }
}

const char* to_string(xid_action x) {
  switch (x) {
  case xid_action::ignore:
    return "ignore";
  case xid_action::degrade:
    return "degrade";
  case xid_action::reset:
    return "reset";
  case xid_action::isolate:
    return "isolate";
  }
  return "?";
}

xid_action xid_policy::action(uint32_t code) const {
  if (auto i = rules_.find(code); i != rules_.end())
    return i->second;
  return is_device_level_xid(code) ? xid_action::reset : xid_action::degrade;
}

std::string xid_policy::describe() const {
  if (rules_.empty())
    return "defaults";
  std::string out;
  for (auto& [code, action] : rules_) {
    if (!out.empty())
      out += ", ";
    out += "Xid " + std::to_string(code) + ": " + to_string(action);
  }
  return out;
}

} // namespace cohort::devices
