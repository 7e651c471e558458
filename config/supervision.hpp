// The config's supervision and placement sections: the balancer's and the
// supervisor's settings.
#pragma once

#include <utility>

#include <caf/expected.hpp>

#include "actors/balancer/balancer.hpp"
#include "actors/supervisor.hpp"
#include "messages/cohort.pb.h"

namespace cohort::config {

/// The balancer's and the supervisor's settings from `cfg` (restart
/// strategy and intensity, circuit breakers, watchdog timeouts);
/// malformed_config names the first problem.
caf::expected<std::pair<actors::balancer_config, actors::supervisor_config>>
supervision_of(const pb::RuntimeConfig& cfg);

/// Turns `s.pending_kernel_timeouts` (timeouts naming a bundle's kernels,
/// kept by name until the config's bundles have loaded) into timeouts by
/// kernel id; malformed_config for a name still unknown, unless one of the
/// config's bundles was refused (its kernels are missing, and the node
/// runs on without them).
caf::error resolve_kernel_timeouts(actors::supervisor_config& s,
                                   bool bundle_refused);

} // namespace cohort::config
