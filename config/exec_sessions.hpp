// The config's exec_sessions section (docs/exec.md): the exec socket that
// `cohort exec` opens sessions of device memory on.
#pragma once

#include <optional>

#include <caf/expected.hpp>

#include "exec/session_server.hpp"
#include "messages/cohort.pb.h"

namespace cohort::config {

/// The exec socket's settings from `cfg`: nullopt when it names no socket;
/// malformed_config names the first problem (a grant for no one or for a
/// tenant the config lacks, a path too long for a socket, a chunk or idle
/// timeout out of bounds).
caf::expected<std::optional<exec::session_options>>
exec_sessions_of(const pb::RuntimeConfig& cfg);

} // namespace cohort::config
