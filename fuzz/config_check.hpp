// What the fuzz targets do with a runtime config they read: every check that
// runtime::start makes before it starts an actor (devices, quotas, pools,
// the audit log's options, supervision, alert rules), with GPU discovery
// turned off so that a run does not depend on the machine's hardware.
#pragma once

#include <caf/expected.hpp>

#include "messages/cohort.pb.h"
#include "messages/quota.hpp"

namespace cohort::fuzz {

/// Checks `cfg` as runtime::start would; the compiled lease when it passes.
caf::expected<quota_lease> check_config(pb::RuntimeConfig cfg);

} // namespace cohort::fuzz
