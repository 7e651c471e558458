#include "devices/gpu/api.hpp"

namespace cohort::devices::gpu {

const char* to_string(status x) {
  switch (x) {
  case status::ok:
    return "ok";
  case status::out_of_memory:
    return "out_of_memory";
  case status::invalid_value:
    return "invalid_value";
  case status::no_device:
    return "no_device";
  case status::driver_missing:
    return "driver_missing";
  case status::launch_failure:
    return "launch_failure";
  case status::illegal_address:
    return "illegal_address";
  case status::ecc_uncorrectable:
    return "ecc_uncorrectable";
  case status::hardware_stop:
    return "hardware_stop";
  case status::other:
    break;
  }
  return "other";
}

bool is_sticky(status x) {
  switch (x) {
  case status::launch_failure:
  case status::illegal_address:
  case status::ecc_uncorrectable:
  case status::hardware_stop:
    return true;
  default:
    return false;
  }
}

} // namespace cohort::devices::gpu
