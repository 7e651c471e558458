// The exec socket's messages (docs/exec.md): fixed 128-byte frames on a Unix
// domain SOCK_SEQPACKET socket, between the node's session server and
// `cohort exec` (which opens a session) or the allocation shim in the
// program it runs (which leases device-memory credit). Plain C++ without
// the runtime's libraries: the shim is loaded into programs Cohort did not
// build, where another protobuf or CAF may live.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace cohort::exec {

/// "CVRM" in the byte order of the machine: both ends run on one node.
constexpr uint32_t wire_magic = 0x4d525643;
constexpr uint16_t wire_version = 1;

/// The environment the program runs with: the socket and its session's
/// token, read by the shim.
constexpr const char* socket_env = "COHORT_EXEC_SOCKET";
constexpr const char* token_env = "COHORT_EXEC_TOKEN";

enum class wire_op : uint16_t {
  /// From `cohort exec`: a session for tenant `text` with at most `bytes`
  /// of device memory. The reply's `text` is the session's token, `bytes`
  /// its id. The session lives while this connection is open.
  open = 1,
  /// From the shim: joins the session whose token is `text`. The reply
  /// gives the session's `limit` and the `chunk` credit is leased in.
  hello = 2,
  /// From the shim: `bytes` more credit. The reply grants them all or
  /// none (`bytes` 0, and why).
  lease = 3,
  /// From the shim: `bytes` of credit it no longer needs.
  give_back = 4,
  /// From `cohort exec`, every third of the idle timeout: its session is
  /// still wanted, with or without a process in it.
  keepalive = 5,
};

enum class wire_status : uint16_t {
  ok = 0,
  /// A frame that is not a request of this version, or out of order.
  bad_request = 1,
  /// The session's limit would be passed.
  over_limit = 2,
  /// The tenant's device-memory quota in the node would be passed.
  over_quota = 3,
  /// No session has that token (never had, closed or expired).
  unknown_session = 4,
  /// The peer may not open sessions for that tenant.
  not_allowed = 5,
  /// The node has as many sessions or connections as it takes.
  busy = 6,
};

struct wire_request {
  uint32_t magic = wire_magic;
  uint16_t version = wire_version;
  uint16_t op = 0;
  uint64_t bytes = 0;
  /// NUL-padded: the tenant (open) or the token (hello).
  char text[112] = {};
};

struct wire_reply {
  uint32_t magic = wire_magic;
  uint16_t version = wire_version;
  uint16_t status = 0;
  uint64_t bytes = 0;
  uint64_t chunk = 0;
  uint64_t limit = 0;
  /// The session's idle timeout in ms (open): its owner keeps it alive
  /// more often than that.
  uint64_t idle_ms = 0;
  /// NUL-padded: the token (open), or why a request was refused.
  char text[88] = {};
};

static_assert(sizeof(wire_request) == 128);
static_assert(sizeof(wire_reply) == 128);

/// Copies `s` into a NUL-padded field, cut to fit with its NUL.
template <size_t N> void set_text(char (&field)[N], std::string_view s) {
  std::memset(field, 0, N);
  std::memcpy(field, s.data(), s.size() < N ? s.size() : N - 1);
}

/// The text of a NUL-padded field (all of it when it has no NUL).
template <size_t N> std::string text_of(const char (&field)[N]) {
  return std::string{field, strnlen(field, N)};
}

/// "over_limit", ...
constexpr const char* to_string(wire_status s) {
  switch (s) {
  case wire_status::ok:
    return "ok";
  case wire_status::bad_request:
    return "bad_request";
  case wire_status::over_limit:
    return "over_limit";
  case wire_status::over_quota:
    return "over_quota";
  case wire_status::unknown_session:
    return "unknown_session";
  case wire_status::not_allowed:
    return "not_allowed";
  case wire_status::busy:
    return "busy";
  }
  return "unknown";
}

} // namespace cohort::exec
