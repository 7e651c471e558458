// The client side of the exec socket that `cohort exec` uses (docs/exec.md):
// opens a session and holds it while the program runs.
#pragma once

#include <cstdint>
#include <string>

#include <caf/expected.hpp>

namespace cohort::exec {

/// An open session: it lives while `fd` is open.
struct opened_session {
  int fd = -1;
  uint64_t id = 0;
  std::string token;
  uint64_t limit_bytes = 0;
  uint64_t chunk_bytes = 0;
  /// Without a keepalive this long (and no process in it), it expires.
  uint64_t idle_ms = 0;
};

/// Opens a session for `tenant` with at most `limit_bytes` of device
/// memory on the exec socket at `path`. Errors: io_error (no node there),
/// unauthorized (no grant, or no such tenant), queue_full (the node is
/// busy), invalid_arguments; each with the node's reason.
caf::expected<opened_session> open_session(const std::string& path,
                                           const std::string& tenant,
                                           uint64_t limit_bytes);

/// Tells the node the session is still wanted; send one every third of
/// `s.idle_ms`. An error when the node ended it (expired, or the node
/// stopped) or cannot be reached.
caf::error keepalive(const opened_session& s);

} // namespace cohort::exec
