// The exec socket's server (docs/exec.md): sessions of device memory for
// programs run by `cohort exec`. One thread polls the socket, its
// connections and a pidfd per connected process. `cohort exec` opens a
// session for a tenant with a limit and holds its connection while the
// program runs; the allocation shim in each of the program's processes
// joins with the session's token and leases credit in chunks, charged to
// the tenant's device-memory quota in the node. What a process leased
// returns when it exits or its connection closes, killed or not; a session
// with no process for its idle timeout expires.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>

namespace cohort::exec {

/// Who may open sessions for a tenant: a peer (by its socket credentials)
/// whose uid is `uid` and whose primary gid is `gid` (-1: any). `tenant`
/// "*" grants every tenant the node knows.
struct session_grant {
  std::string tenant;
  int64_t uid = -1;
  int64_t gid = -1;
};

struct session_options {
  /// The socket's path.
  std::string path;
  /// Default-deny: without a grant, no session is opened.
  std::vector<session_grant> grants;
  /// The credit a process leases at once, at most a quarter of its
  /// session's limit (and at least 1 MiB, or the limit).
  uint64_t chunk_bytes = uint64_t{64} << 20;
  /// A session with no process, whose owner sent no keepalive this long,
  /// expires (`cohort exec` sends one every third of it).
  std::chrono::milliseconds idle_timeout{std::chrono::minutes{10}};
  /// Sessions and connections at once; more are refused as busy.
  size_t max_sessions = 256;
  size_t max_connections = 1024;
  /// Sessions and connections of one user at once.
  size_t max_sessions_per_user = 64;
  size_t max_connections_per_user = 128;
  /// A connection that neither opens nor joins a session this long is
  /// closed.
  std::chrono::milliseconds fresh_timeout{std::chrono::seconds{10}};
};

/// What the server asks of the node; called on the server's thread.
struct session_backend {
  /// Whether the node has tenant `tenant`.
  std::function<bool(const std::string& tenant)> known;
  /// Charges `bytes` to the tenant's device-memory quota; an error (with
  /// why) when that would pass it.
  std::function<caf::error(const std::string& tenant, uint64_t bytes)> charge;
  /// Takes `bytes` off the tenant's charge.
  std::function<void(const std::string& tenant, uint64_t bytes)> refund;
  /// Records a session's event in the audit log ("opened: ...").
  std::function<void(const std::string& tenant, uint64_t session,
                     const std::string& detail)>
      audit;
};

/// One session as `stats` shows it.
struct session_view {
  uint64_t id = 0;
  std::string tenant;
  uint64_t limit_bytes = 0;
  /// Credit its processes hold now: what their allocations hold and what
  /// they leased ahead.
  uint64_t leased_bytes = 0;
  uint64_t peak_bytes = 0;
  /// Processes joined now, and the pid of `cohort exec` (0 once it left).
  uint32_t processes = 0;
  int32_t owner_pid = 0;
  uint64_t leases = 0;
  uint64_t refusals = 0;
  int64_t age_ms = 0;
};

struct session_stats {
  uint64_t opened = 0;
  uint64_t ended = 0;
  uint64_t expired = 0;
  /// Open requests refused (not allowed, unknown tenant, busy).
  uint64_t open_refusals = 0;
  uint64_t leases = 0;
  uint64_t leased_bytes_total = 0;
  uint64_t lease_refusals = 0;
  /// Processes that ended holding credit, and how much returned with them.
  uint64_t reclaims = 0;
  uint64_t reclaimed_bytes = 0;
  std::vector<session_view> sessions;
};

class session_server {
public:
  /// Listens on `opts.path` (mode 0666: a session needs a grant, a lease
  /// its token) and starts the thread. Errors: io_error, invalid_arguments.
  static caf::expected<std::unique_ptr<session_server>>
  start(session_options opts, session_backend backend);

  ~session_server();
  session_server(const session_server&) = delete;
  session_server& operator=(const session_server&) = delete;

  /// Ends every session (their credit refunded), closes every connection,
  /// removes the socket and joins the thread. Idempotent.
  void stop();

  /// A snapshot; thread-safe.
  session_stats stats() const;

  const std::string& path() const { return opts_.path; }

  struct connection;
  struct session;

private:
  session_server(session_options opts, int listener, int wake,
                 session_backend backend);
  void run();
  void accept_some();
  /// False when the connection is to be closed.
  bool serve(connection& c);
  bool open_session(connection& c, const std::string& tenant, uint64_t limit);
  bool join_session(connection& c, const std::string& token);
  bool lease(connection& c, uint64_t bytes);
  bool give_back(connection& c, uint64_t bytes);
  bool keepalive(connection& c);
  /// Returns what `c` leased; `died` says whether its process exited.
  void close_connection(connection& c, bool died);
  /// When `c`'s process closed its connection holding credit and still
  /// runs: the connection closes, its credit stays charged until the
  /// process exits. False when `c` is to be closed now.
  bool detach(connection& c);
  /// Ends sessions with neither owner nor process, and idle ones; closes
  /// connections that stayed fresh too long.
  void end_sessions();
  /// Records a refused open, at most 10 a second (then how many were not).
  void audit_refusal(const std::string& tenant, const std::string& detail);
  session* find_session(uint64_t id);
  uint64_t chunk_of(uint64_t limit) const;

  session_options opts_;
  int listener_;
  int wake_;
  int wake_write_ = -1;
  session_backend backend_;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  std::once_flag stopped_;
  mutable std::mutex mtx_; // guards the state below, for `stats`
  std::vector<std::unique_ptr<connection>> conns_;
  std::vector<std::unique_ptr<session>> sessions_;
  uint64_t next_id_ = 1;
  session_stats totals_;
  /// The listener is not polled until then (no descriptor left to accept
  /// with).
  std::chrono::steady_clock::time_point listener_paused_until_{};
  /// Refused opens audited in the current second, and those not.
  std::chrono::steady_clock::time_point refusal_window_{};
  uint32_t refusals_audited_ = 0;
  uint64_t refusals_unaudited_ = 0;
};

} // namespace cohort::exec
