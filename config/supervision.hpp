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

} // namespace cohort::config
