#include "config/exec_sessions.hpp"

#include <sys/un.h>

#include <algorithm>
#include <string>

#include "messages/errc.hpp"

namespace cohort::config {

namespace {

caf::error bad(const std::string& what) {
  return make_error(errc::malformed_config, "exec_sessions: " + what);
}

constexpr int max_grants = 256;
constexpr uint32_t max_sessions = 4096;
constexpr uint32_t max_idle_ms = 24 * 3'600'000;
constexpr uint64_t min_chunk = uint64_t{1} << 20;
constexpr uint64_t max_chunk = uint64_t{1} << 40;

} // namespace

caf::expected<std::optional<exec::session_options>>
exec_sessions_of(const pb::RuntimeConfig& cfg) {
  auto& e = cfg.exec_sessions();
  if (e.socket().empty()) {
    if (e.grant_size() > 0)
      return bad("grants without a socket");
    return std::nullopt;
  }
  exec::session_options out;
  if (e.socket().size() >= sizeof(sockaddr_un::sun_path))
    return bad("the socket's path has " + std::to_string(e.socket().size()) +
               " characters, a Unix socket's at most " +
               std::to_string(sizeof(sockaddr_un::sun_path) - 1));
  out.path = e.socket();
  if (e.grant_size() > max_grants)
    return bad(std::to_string(e.grant_size()) + " grants, at most " +
               std::to_string(max_grants));
  for (auto& g : e.grant()) {
    auto who = "the grant for '" + g.tenant().substr(0, 64) + "'";
    if (g.tenant().empty())
      return bad("a grant names no tenant (\"*\" for every one)");
    if (g.tenant() != "*" &&
        std::none_of(
            cfg.tenant().begin(), cfg.tenant().end(),
            [&](const pb::TenantGrant& t) { return t.tenant() == g.tenant(); }))
      return bad(who + ": the config has no such tenant");
    if (!g.has_uid() && !g.has_gid() && !g.any_user())
      return bad(who + " names no one: set uid, gid or any_user");
    if (g.any_user() && (g.has_uid() || g.has_gid()))
      return bad(who + " sets any_user and a uid or gid");
    exec::session_grant grant;
    grant.tenant = g.tenant();
    grant.uid = g.has_uid() ? int64_t(g.uid()) : -1;
    grant.gid = g.has_gid() ? int64_t(g.gid()) : -1;
    out.grants.push_back(std::move(grant));
  }
  if (auto c = e.chunk_bytes(); c != 0) {
    if (c < min_chunk || c > max_chunk)
      return bad("chunk_bytes is " + std::to_string(c) +
                 ", from 1 MiB to 1 TiB");
    out.chunk_bytes = c;
  }
  if (auto ms = e.idle_timeout_ms(); ms != 0) {
    if (ms > max_idle_ms)
      return bad("idle_timeout_ms is " + std::to_string(ms) +
                 ", at most a day (" + std::to_string(max_idle_ms) + ")");
    out.idle_timeout = std::chrono::milliseconds{ms};
  }
  if (auto n = e.max_sessions(); n != 0) {
    if (n > max_sessions)
      return bad("max_sessions is " + std::to_string(n) + ", at most " +
                 std::to_string(max_sessions));
    out.max_sessions = n;
  }
  return out;
}

} // namespace cohort::config
