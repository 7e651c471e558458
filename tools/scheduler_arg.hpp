// `--scheduler KEY=VALUE[,KEY=VALUE...]`: CAF's scheduler settings from the
// command line, over the runtime config's `scheduler` section.
#pragma once

#include <string>

#include <caf/error.hpp>

#include "messages/cohort.pb.h"

namespace cohort::tools {

/// Sets the fields of `cfg.scheduler` that `arg` names: `threads=4,
/// moderate_sleep_us=0` (the fields of `cohort.pb.Scheduler`). The result
/// is checked with the rest of the config (check_config). A malformed
/// setting or an unknown field is invalid_arguments naming it.
caf::error apply_scheduler_arg(pb::RuntimeConfig& cfg, const std::string& arg);

} // namespace cohort::tools
