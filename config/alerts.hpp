// The config's alerts section: the alert actor's rules.
#pragma once

#include <caf/expected.hpp>

#include "actors/alerts.hpp"
#include "messages/cohort.pb.h"

namespace cohort::config {

/// The rules of `cfg`; malformed_config for fractions outside (0, 1] or a
/// negative rate.
caf::expected<actors::alert_rules>
alert_rules_of(const pb::RuntimeConfig& cfg);

} // namespace cohort::config
