// The config's grants, limits and pool sections: the quota lease the
// balancer admits under, and every device's pool.
#pragma once

#include <vector>

#include <caf/expected.hpp>

#include "devices/memory/pool_resource.hpp"
#include "messages/cohort.pb.h"
#include "messages/quota.hpp"
#include "messages/device_info.hpp"
#include "messages/stats.hpp"

namespace cohort::config {

/// Checks the grants and limits of `cfg` against `devices` and compiles them
/// into a lease. malformed_config names the first problem: an unknown kernel
/// or device, a quota above the memory of its devices, reservations that do
/// not fit, a bad rate, fraction or pool setting.
caf::expected<quota_lease>
compile_quotas(const pb::RuntimeConfig& cfg,
               const std::vector<device_info>& devices);

/// The pool a device of `capacity` bytes gets under `cfg`: sized for the
/// device (sized_pool_options), then what the config sets.
devices::memory::pool_options pool_options_for(const pb::RuntimeConfig& cfg,
                                               uint64_t capacity);

/// The pool of every device of `lease`, by index (defaults for devices
/// without device memory).
std::vector<devices::memory::pool_options>
pool_options_for(const pb::RuntimeConfig& cfg, const quota_lease& lease);

} // namespace cohort::config
