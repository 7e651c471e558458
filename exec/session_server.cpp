#include "exec/session_server.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "exec/exec_wire.hpp"
#include "ipc/unix_socket.hpp"
#include "messages/errc.hpp"

namespace cohort::exec {

using clock_type = std::chrono::steady_clock;

struct session_server::connection {
  int fd = -1;
  /// Of its process, or -1 where pidfd_open is refused.
  int pidfd = -1;
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  enum class role : uint8_t { fresh, owner, process } what = role::fresh;
  uint64_t session = 0;
  /// Credit this process holds (role::process).
  uint64_t leased = 0;
  bool refused_once = false;
  clock_type::time_point accepted;
};

struct session_server::session {
  uint64_t id = 0;
  std::string tenant;
  std::string token;
  uint64_t limit = 0;
  uint64_t chunk = 0;
  uint64_t leased = 0;
  uint64_t peak = 0;
  uint64_t leases = 0;
  uint64_t refusals = 0;
  connection* owner = nullptr;
  int32_t owner_pid = 0;
  uid_t owner_uid = 0;
  uint32_t processes = 0;
  clock_type::time_point created;
  /// Since when it has had no process, and its owner's last keepalive.
  clock_type::time_point idle_since;
  clock_type::time_point owner_seen;
};

namespace {

constexpr uint32_t max_processes_per_session = 64;

std::string human(uint64_t bytes) {
  char buf[32];
  if (bytes >= (uint64_t{1} << 30))
    std::snprintf(buf, sizeof buf, "%.1f GiB", double(bytes) / (1 << 30));
  else if (bytes >= (uint64_t{1} << 20))
    std::snprintf(buf, sizeof buf, "%.1f MiB", double(bytes) / (1 << 20));
  else
    std::snprintf(buf, sizeof buf, "%llu bytes", (unsigned long long)bytes);
  return buf;
}

// 24 random bytes in hex.
std::string new_token() {
  unsigned char raw[24];
  size_t got = 0;
  while (got < sizeof raw) {
    auto n = ::getrandom(raw + got, sizeof raw - got, 0);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return {};
    }
    got += size_t(n);
  }
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  for (auto b : raw) {
    out += digits[b >> 4];
    out += digits[b & 15];
  }
  return out;
}

// A name a client chose, fit for a log line: printable ASCII, at most 64
// characters.
std::string printable(const std::string& text) {
  std::string out;
  for (char c : text.substr(0, 64))
    out += c >= 0x20 && c < 0x7f ? c : '?';
  return out;
}

bool same_token(const std::string& a, const std::string& b) {
  if (a.size() != b.size())
    return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i)
    diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

bool send_reply(int fd, const wire_reply& r) {
  for (;;) {
    auto n = ::send(fd, &r, sizeof r, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0)
      return size_t(n) == sizeof r;
    if (errno != EINTR)
      return false;
  }
}

wire_reply refusal(wire_status status, const std::string& why) {
  wire_reply r;
  r.status = static_cast<uint16_t>(status);
  set_text(r.text, why);
  return r;
}

} // namespace

caf::expected<std::unique_ptr<session_server>>
session_server::start(session_options opts, session_backend backend) {
  if (!backend.known || !backend.charge || !backend.refund || !backend.audit)
    return make_error(errc::invalid_arguments,
                      "the exec socket needs every backend call");
  // Anyone on the node may connect: a session needs a grant, and joining
  // one its token.
  auto fd = ipc::listen_seqpacket(opts.path, "the exec socket", 0666);
  if (!fd)
    return fd.error();
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC | O_NONBLOCK) != 0) {
    auto err = ipc::io_failure("the exec server's wake pipe");
    ::close(*fd);
    ::unlink(opts.path.c_str());
    return err;
  }
  std::unique_ptr<session_server> s{new session_server(
      std::move(opts), *fd, pipe_fds[0], std::move(backend))};
  s->wake_write_ = pipe_fds[1];
  s->thread_ = std::thread{[p = s.get()] { p->run(); }};
  return s;
}

session_server::session_server(session_options opts, int listener, int wake,
                               session_backend backend)
    : opts_(std::move(opts)), listener_(listener), wake_(wake),
      backend_(std::move(backend)) {
  // nop
}

session_server::~session_server() {
  stop();
}

void session_server::stop() {
  std::call_once(stopped_, [this] {
    stopping_ = true;
    char b = 1;
    while (::write(wake_write_, &b, 1) < 0 && errno == EINTR) {
    }
    if (thread_.joinable())
      thread_.join();
    std::lock_guard<std::mutex> guard{mtx_};
    for (auto& c : conns_)
      close_connection(*c, false);
    conns_.clear();
    for (auto& s : sessions_) {
      backend_.audit(s->tenant, s->id, "ended: the node stopped");
      ++totals_.ended;
    }
    sessions_.clear();
    ::close(listener_);
    ::close(wake_);
    ::close(wake_write_);
    ::unlink(opts_.path.c_str());
  });
}

session_stats session_server::stats() const {
  std::lock_guard<std::mutex> guard{mtx_};
  auto out = totals_;
  auto now = clock_type::now();
  for (auto& s : sessions_) {
    session_view v;
    v.id = s->id;
    v.tenant = s->tenant;
    v.limit_bytes = s->limit;
    v.leased_bytes = s->leased;
    v.peak_bytes = s->peak;
    v.processes = s->processes;
    v.owner_pid = s->owner != nullptr ? s->owner_pid : 0;
    v.leases = s->leases;
    v.refusals = s->refusals;
    v.age_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(now - s->created)
            .count();
    out.sessions.push_back(std::move(v));
  }
  return out;
}

void session_server::run() {
  std::vector<pollfd> fds;
  while (!stopping_) {
    fds.clear();
    fds.push_back({wake_, POLLIN, 0});
    // -1 is ignored by poll: the listener rests while no descriptor is
    // left to accept with.
    fds.push_back({clock_type::now() < listener_paused_until_ ? -1 : listener_,
                   POLLIN, 0});
    {
      std::lock_guard<std::mutex> guard{mtx_};
      for (auto& c : conns_) {
        fds.push_back({c->fd, POLLIN, 0});
        fds.push_back({c->pidfd, POLLIN, 0}); // -1 is ignored by poll
      }
    }
    // Woken at least every 100 ms for idle sessions, fresh connections
    // and a resting listener.
    if (::poll(fds.data(), fds.size(), 100) < 0) {
      // EINTR, or ENOMEM: the server stays up and tries again.
      if (errno != EINTR)
        std::this_thread::sleep_for(std::chrono::milliseconds{10});
      continue;
    }
    if (fds[0].revents != 0)
      break;
    std::lock_guard<std::mutex> guard{mtx_};
    // Connections first (their indexes match `fds` until one closes).
    std::vector<std::pair<size_t, bool>> closing; // index, died
    for (size_t i = 0; i < conns_.size(); ++i) {
      auto& c = *conns_[i];
      auto sock = fds[2 + 2 * i].revents;
      auto pid = fds[3 + 2 * i].revents;
      if (pid != 0) {
        closing.emplace_back(i, true);
        continue;
      }
      if (sock == 0)
        continue;
      if ((sock & POLLIN) != 0 && serve(c))
        continue;
      if ((sock & (POLLIN | POLLHUP | POLLERR | POLLNVAL)) != 0 && !detach(c))
        closing.emplace_back(i, false);
    }
    for (size_t k = closing.size(); k-- > 0;) {
      close_connection(*conns_[closing[k].first], closing[k].second);
      conns_.erase(conns_.begin() + std::ptrdiff_t(closing[k].first));
    }
    if ((fds[1].revents & POLLIN) != 0)
      accept_some();
    end_sessions();
  }
}

void session_server::accept_some() {
  // A bounded number per round: a flood of connects cannot hold the thread.
  for (int round = 0; round < 64; ++round) {
    int fd =
        ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EINTR)
        continue;
      // Out of descriptors: the pending connection stays in the backlog,
      // and polling the listener again at once would spin.
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
          errno == ENOMEM)
        listener_paused_until_ =
            clock_type::now() + std::chrono::milliseconds{100};
      return; // EAGAIN, or a connection that went away at once
    }
    ucred cred{};
    socklen_t len = sizeof cred;
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
      ::close(fd);
      continue;
    }
    size_t theirs = 0;
    for (auto& c : conns_)
      theirs += c->uid == cred.uid;
    if (conns_.size() >= opts_.max_connections ||
        theirs >= opts_.max_connections_per_user) {
      ++totals_.open_refusals;
      send_reply(
          fd, refusal(wire_status::busy,
                      conns_.size() >= opts_.max_connections
                          ? "the exec socket has " +
                                std::to_string(opts_.max_connections) +
                                " connections already"
                          : "user " + std::to_string(cred.uid) + " has " +
                                std::to_string(opts_.max_connections_per_user) +
                                " connections already"));
      ::close(fd);
      continue;
    }
    auto c = std::make_unique<connection>();
    c->fd = fd;
    c->pid = cred.pid;
    c->uid = cred.uid;
    c->gid = cred.gid;
    c->pidfd = ipc::open_pidfd(cred.pid);
    c->accepted = clock_type::now();
    conns_.push_back(std::move(c));
  }
}

bool session_server::serve(connection& c) {
  wire_request req;
  auto n = ::recv(c.fd, &req, sizeof req, MSG_TRUNC | MSG_DONTWAIT);
  if (n == 0)
    return false; // closed
  if (n < 0)
    return errno == EAGAIN || errno == EINTR;
  if (size_t(n) != sizeof req || req.magic != wire_magic ||
      req.version != wire_version)
    return send_reply(c.fd,
                      refusal(wire_status::bad_request,
                              "a request is a 128-byte frame of version " +
                                  std::to_string(wire_version) +
                                  " (docs/exec.md)")) &&
           c.what != connection::role::fresh;
  auto op = wire_op{req.op};
  using role = connection::role;
  if (c.what == role::fresh && op == wire_op::open)
    return open_session(c, text_of(req.text), req.bytes);
  if (c.what == role::fresh && op == wire_op::hello)
    return join_session(c, text_of(req.text));
  if (c.what == role::process && op == wire_op::lease)
    return lease(c, req.bytes);
  if (c.what == role::process && op == wire_op::give_back)
    return give_back(c, req.bytes);
  if (c.what == role::owner && op == wire_op::keepalive)
    return keepalive(c);
  // Out of order: a fresh connection that is neither is turned away.
  return send_reply(c.fd, refusal(wire_status::bad_request,
                                  "request " + std::to_string(req.op) +
                                      " is not expected here")) &&
         c.what != role::fresh;
}

uint64_t session_server::chunk_of(uint64_t limit) const {
  uint64_t floor = std::min<uint64_t>(limit, uint64_t{1} << 20);
  return std::max(floor, std::min(opts_.chunk_bytes, limit / 4));
}

bool session_server::open_session(connection& c, const std::string& tenant,
                                  uint64_t limit) {
  auto refuse = [&](wire_status st, const std::string& why) {
    ++totals_.open_refusals;
    audit_refusal(printable(tenant),
                  "refused to open (" + std::string{to_string(st)} +
                      ") for pid " + std::to_string(c.pid) + " uid " +
                      std::to_string(c.uid) + ": " + why);
    send_reply(c.fd, refusal(st, why));
    return false;
  };
  if (tenant.empty() || limit == 0)
    return refuse(wire_status::bad_request,
                  "a session needs a tenant and a limit above 0");
  bool granted = std::any_of(opts_.grants.begin(), opts_.grants.end(),
                             [&](const session_grant& g) {
                               return (g.tenant == "*" || g.tenant == tenant) &&
                                      (g.uid < 0 || g.uid == int64_t(c.uid)) &&
                                      (g.gid < 0 || g.gid == int64_t(c.gid));
                             });
  if (!granted)
    return refuse(wire_status::not_allowed, "uid " + std::to_string(c.uid) +
                                                " has no grant for tenant '" +
                                                printable(tenant) +
                                                "' (exec_sessions.grant)");
  if (!backend_.known(tenant))
    return refuse(wire_status::not_allowed,
                  "this node has no tenant '" + printable(tenant) + "'");
  if (sessions_.size() >= opts_.max_sessions)
    return refuse(wire_status::busy, "the node has " +
                                         std::to_string(opts_.max_sessions) +
                                         " sessions already");
  auto theirs =
      std::count_if(sessions_.begin(), sessions_.end(),
                    [&](const auto& s) { return s->owner_uid == c.uid; });
  if (size_t(theirs) >= opts_.max_sessions_per_user)
    return refuse(wire_status::busy,
                  "uid " + std::to_string(c.uid) + " has " +
                      std::to_string(opts_.max_sessions_per_user) +
                      " sessions already");
  auto token = new_token();
  if (token.empty())
    return refuse(wire_status::busy, "no random bytes for a token");
  auto s = std::make_unique<session>();
  s->id = next_id_++;
  s->tenant = tenant;
  s->token = token;
  s->limit = limit;
  s->chunk = chunk_of(limit);
  s->owner = &c;
  s->owner_pid = c.pid;
  s->owner_uid = c.uid;
  s->created = s->idle_since = s->owner_seen = clock_type::now();
  c.what = connection::role::owner;
  c.session = s->id;
  wire_reply r;
  r.bytes = s->id;
  r.chunk = s->chunk;
  r.limit = s->limit;
  r.idle_ms = uint64_t(opts_.idle_timeout.count());
  set_text(r.text, token);
  backend_.audit(tenant, s->id,
                 "opened for pid " + std::to_string(c.pid) + " uid " +
                     std::to_string(c.uid) + ": limit " + human(limit));
  ++totals_.opened;
  sessions_.push_back(std::move(s));
  return send_reply(c.fd, r);
}

session_server::session* session_server::find_session(uint64_t id) {
  for (auto& s : sessions_)
    if (s->id == id)
      return s.get();
  return nullptr;
}

bool session_server::join_session(connection& c, const std::string& token) {
  session* found = nullptr;
  for (auto& s : sessions_)
    if (same_token(s->token, token) && s->owner != nullptr)
      found = s.get();
  if (found == nullptr) {
    send_reply(c.fd, refusal(wire_status::unknown_session,
                             "no open session has this token (ended, "
                             "expired, or never opened)"));
    return false;
  }
  if (found->processes >= max_processes_per_session) {
    send_reply(c.fd, refusal(wire_status::busy,
                             "session " + std::to_string(found->id) + " has " +
                                 std::to_string(max_processes_per_session) +
                                 " processes already"));
    return false;
  }
  c.what = connection::role::process;
  c.session = found->id;
  ++found->processes;
  wire_reply r;
  r.bytes = found->id;
  r.chunk = found->chunk;
  r.limit = found->limit;
  return send_reply(c.fd, r);
}

bool session_server::lease(connection& c, uint64_t bytes) {
  auto* s = find_session(c.session);
  if (s == nullptr)
    return send_reply(c.fd, refusal(wire_status::unknown_session,
                                    "the session ended")) &&
           false;
  if (bytes == 0)
    return send_reply(c.fd,
                      refusal(wire_status::bad_request, "a lease of 0 bytes"));
  auto refuse = [&](wire_status st, const std::string& why) {
    ++s->refusals;
    ++totals_.lease_refusals;
    // Once per process: a program may retry in a loop.
    if (!c.refused_once)
      backend_.audit(s->tenant, s->id,
                     "refused " + human(bytes) + " to pid " +
                         std::to_string(c.pid) + " (" +
                         std::string{to_string(st)} + "): " + why);
    c.refused_once = true;
    return send_reply(c.fd, refusal(st, why));
  };
  if (bytes > s->limit || s->leased + bytes > s->limit)
    return refuse(wire_status::over_limit, "session limit " + human(s->limit) +
                                               ", " + human(s->leased) +
                                               " leased");
  if (auto err = backend_.charge(s->tenant, bytes)) {
    // The frame says over_quota; the text is the book's reason alone.
    auto why = describe(err);
    if (auto colon = why.find(": "); colon != std::string::npos)
      why.erase(0, colon + 2);
    return refuse(wire_status::over_quota, why);
  }
  c.leased += bytes;
  s->leased += bytes;
  s->peak = std::max(s->peak, s->leased);
  ++s->leases;
  ++totals_.leases;
  totals_.leased_bytes_total += bytes;
  wire_reply r;
  r.bytes = bytes;
  r.chunk = s->chunk;
  r.limit = s->limit;
  return send_reply(c.fd, r);
}

bool session_server::give_back(connection& c, uint64_t bytes) {
  auto* s = find_session(c.session);
  if (bytes > c.leased || s == nullptr)
    return send_reply(c.fd, refusal(wire_status::bad_request,
                                    "giving back " + std::to_string(bytes) +
                                        " bytes of " +
                                        std::to_string(c.leased) + " leased"));
  c.leased -= bytes;
  s->leased -= bytes;
  backend_.refund(s->tenant, bytes);
  wire_reply r;
  r.bytes = bytes;
  r.chunk = s->chunk;
  r.limit = s->limit;
  return send_reply(c.fd, r);
}

bool session_server::keepalive(connection& c) {
  auto* s = find_session(c.session);
  if (s == nullptr)
    return false;
  s->owner_seen = clock_type::now();
  wire_reply r;
  r.bytes = s->id;
  r.chunk = s->chunk;
  r.limit = s->limit;
  r.idle_ms = uint64_t(opts_.idle_timeout.count());
  return send_reply(c.fd, r);
}

void session_server::audit_refusal(const std::string& tenant,
                                   const std::string& detail) {
  auto now = clock_type::now();
  if (now - refusal_window_ >= std::chrono::seconds{1}) {
    if (refusals_unaudited_ > 0)
      backend_.audit("", 0,
                     std::to_string(refusals_unaudited_) +
                         " more refused opens not recorded (at most 10 a "
                         "second are)");
    refusal_window_ = now;
    refusals_audited_ = 0;
    refusals_unaudited_ = 0;
  }
  if (refusals_audited_ < 10) {
    ++refusals_audited_;
    backend_.audit(tenant, 0, detail);
  } else {
    ++refusals_unaudited_;
  }
}

bool session_server::detach(connection& c) {
  // Its process's allocations are still made with what it leased: charged
  // until the pidfd says it exited (a process cannot free its lease by
  // closing its connection, or by sending a bad frame).
  if (c.what != connection::role::process || c.leased == 0 || c.pidfd < 0 ||
      c.fd < 0 || ipc::pid_exited(c.pidfd))
    return false;
  if (auto* s = find_session(c.session))
    backend_.audit(s->tenant, s->id,
                   "connection of pid " + std::to_string(c.pid) +
                       " closed: its " + human(c.leased) +
                       " stay charged until it exits");
  ::close(c.fd);
  c.fd = -1; // poll ignores it; the pidfd is still watched
  return true;
}

void session_server::close_connection(connection& c, bool died) {
  if (auto* s = find_session(c.session)) {
    if (c.what == connection::role::owner && s->owner == &c) {
      s->owner = nullptr;
    } else if (c.what == connection::role::process) {
      if (c.leased > 0) {
        backend_.refund(s->tenant, c.leased);
        s->leased -= c.leased;
        ++totals_.reclaims;
        totals_.reclaimed_bytes += c.leased;
        backend_.audit(s->tenant, s->id,
                       "reclaimed " + human(c.leased) + " of pid " +
                           std::to_string(c.pid) +
                           (died ? ": it exited" : ": its connection closed"));
      }
      c.leased = 0;
      if (--s->processes == 0)
        s->idle_since = clock_type::now();
    }
  }
  if (c.fd >= 0)
    ::close(c.fd);
  if (c.pidfd >= 0)
    ::close(c.pidfd);
  c.fd = c.pidfd = -1;
}

void session_server::end_sessions() {
  auto now = clock_type::now();
  for (size_t k = conns_.size(); k-- > 0;)
    if (conns_[k]->what == connection::role::fresh &&
        now - conns_[k]->accepted >= opts_.fresh_timeout) {
      close_connection(*conns_[k], false);
      conns_.erase(conns_.begin() + std::ptrdiff_t(k));
    }
  for (size_t i = sessions_.size(); i-- > 0;) {
    auto& s = *sessions_[i];
    if (s.processes > 0)
      continue;
    bool idle =
        s.owner != nullptr &&
        now - std::max(s.idle_since, s.owner_seen) >= opts_.idle_timeout;
    if (s.owner != nullptr && !idle)
      continue;
    auto summary = "peak " + human(s.peak) + ", " + std::to_string(s.leases) +
                   " leases, " + std::to_string(s.refusals) + " refused";
    if (idle) {
      ++totals_.expired;
      backend_.audit(
          s.tenant, s.id,
          "expired: no process and no keepalive for " +
              std::to_string(std::chrono::duration_cast<std::chrono::seconds>(
                                 opts_.idle_timeout)
                                 .count()) +
              " s; " + summary);
      // Its owner is told by the connection closing.
      for (size_t k = 0; k < conns_.size(); ++k)
        if (conns_[k].get() == s.owner) {
          conns_[k]->session = 0;
          close_connection(*conns_[k], false);
          conns_.erase(conns_.begin() + std::ptrdiff_t(k));
          break;
        }
    } else {
      backend_.audit(s.tenant, s.id, "ended: " + summary);
    }
    ++totals_.ended;
    sessions_.erase(sessions_.begin() + std::ptrdiff_t(i));
  }
}

} // namespace cohort::exec
