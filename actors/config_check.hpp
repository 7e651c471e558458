// The config check embedders call before runtime::start (the path and name
// the embedding guide gives): config::check_config, the one compilation
// every command and runtime::start go through.
#pragma once

#include "config/bounds.hpp"
#include "config/compile.hpp"

namespace cohort::actors {

using config::config_bounds;

/// Checks every count, size, time and number of `cfg` and compiles every
/// section that needs no devices (config::check_config). Returns
/// malformed_config naming the first problem, or none.
inline caf::error check_config(const pb::RuntimeConfig& cfg) {
  return config::check_config(cfg);
}

} // namespace cohort::actors
