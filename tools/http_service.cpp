#include "tools/http_service.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <vector>

#include <microhttpd.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include "messages/errc.hpp"
#include "tools/strict_numbers.hpp"

namespace cohort::tools {

/// One TCP connection, from its accept to its close.
struct http_service::connection {
  int fd = -1;
  /// Steady-clock nanoseconds by which the request being read must be in;
  /// 0 while a request is answered.
  std::atomic<int64_t> deadline_ns{0};
  /// Set once by the reaper.
  std::atomic<bool> reaped{false};
};

/// One request: its body so far, bounded.
struct http_service::request {
  std::string body;
  uint64_t received = 0;
  bool too_large = false;
};

namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int64_t to_ns(double seconds) {
  return int64_t(seconds * 1e9);
}

MHD_Result queue(MHD_Connection* c, unsigned status, const std::string& body,
                 const std::string& content_type, bool close,
                 const std::string& allow = {}) {
  auto* res = MHD_create_response_from_buffer(
      body.size(), const_cast<char*>(body.data()), MHD_RESPMEM_MUST_COPY);
  if (res == nullptr)
    return MHD_NO;
  MHD_add_response_header(res, MHD_HTTP_HEADER_CONTENT_TYPE,
                          content_type.c_str());
  if (status == MHD_HTTP_UNAUTHORIZED)
    MHD_add_response_header(res, MHD_HTTP_HEADER_WWW_AUTHENTICATE,
                            "Bearer realm=\"cohort\"");
  if (!allow.empty())
    MHD_add_response_header(res, MHD_HTTP_HEADER_ALLOW, allow.c_str());
  if (close)
    MHD_add_response_header(res, MHD_HTTP_HEADER_CONNECTION, "close");
  auto ok = MHD_queue_response(c, status, res);
  MHD_destroy_response(res);
  return ok;
}

// A refusal in the admin API's error shape; the connection is closed after
// it, since the rest of the request is not read.
MHD_Result refusal(MHD_Connection* c, unsigned status, const std::string& code,
                   const std::string& message) {
  return queue(c, status,
               "{\n \"error\": \"" + code + "\",\n \"message\": \"" + message +
                   "\"\n}\n",
               "application/json", true);
}

std::string peer_of(MHD_Connection* c) {
  auto* info = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
  if (info == nullptr || info->client_addr == nullptr)
    return "unknown";
  auto* sa = info->client_addr;
  socklen_t len =
      sa->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
  char host[NI_MAXHOST] = "";
  char serv[NI_MAXSERV] = "";
  if (getnameinfo(sa, len, host, sizeof host, serv, sizeof serv,
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return "unknown";
  return std::string{host} + ":" + serv;
}

struct header_tally {
  size_t count = 0;
  size_t bytes = 0;
};

MHD_Result tally(void* cls, MHD_ValueKind, const char* key, const char* value) {
  auto& t = *static_cast<header_tally*>(cls);
  ++t.count;
  // "key: value\r\n"
  t.bytes += std::strlen(key) + (value ? std::strlen(value) : 0) + 4;
  return MHD_YES;
}

// Decodes the %HH escapes of a URL's path and arguments as libmicrohttpd
// does, except those of control characters (%00 to %1F, %7F), which stay
// as written: a NUL decoded ended the path early ("/v1/items/1%00" was item
// 1), and the others reached the terminal and the audit log raw.
int hex_digit(char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

size_t unescape_url(void*, MHD_Connection*, char* s) {
  char* out = s;
  for (const char* in = s; *in != '\0';) {
    if (in[0] == '%' && hex_digit(in[1]) >= 0 && hex_digit(in[2]) >= 0) {
      int v = hex_digit(in[1]) * 16 + hex_digit(in[2]);
      if (v >= 0x20 && v != 0x7f) {
        *out++ = char(v);
        in += 3;
        continue;
      }
    }
    *out++ = *in++;
  }
  *out = '\0';
  return size_t(out - s);
}

// Binds and listens itself rather than through libmicrohttpd, to name why an
// address cannot be had. SO_REUSEADDR lets a restarted node bind past its
// old connections in TIME_WAIT; on Linux it never lets a second socket
// listen on a port (SO_REUSEPORT would, and is never set).
caf::expected<std::pair<int, int>> listen_on(std::string host, int port) {
  auto where = host + ":" + std::to_string(port);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  auto service = std::to_string(port);
  if (int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(),
                           service.c_str(), &hints, &found);
      rc != 0)
    return make_error(errc::invalid_arguments,
                      "cannot listen on " + where + ": " + gai_strerror(rc));
  std::string why = "no address";
  for (auto* a = found; a != nullptr; a = a->ai_next) {
    int fd =
        ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      why = std::strerror(errno);
      continue;
    }
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 &&
        ::listen(fd, SOMAXCONN) == 0) {
      sockaddr_storage bound{};
      socklen_t len = sizeof bound;
      int bound_port = port;
      if (::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len) == 0)
        bound_port =
            bound.ss_family == AF_INET6
                ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
      freeaddrinfo(found);
      return std::make_pair(fd, bound_port);
    }
    why = errno == EADDRINUSE
              ? "the port is in use (another process listens on it)"
              : std::strerror(errno);
    ::close(fd);
  }
  freeaddrinfo(found);
  return make_error(errc::invalid_arguments,
                    "cannot listen on " + where + ": " + why);
}

} // namespace

struct http_callbacks {
  static http_service::connection* connection_of(MHD_Connection* c) {
    auto* info = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return info != nullptr
               ? static_cast<http_service::connection*>(info->socket_context)
               : nullptr;
  }

  static MHD_Result on_request(void* cls, MHD_Connection* c, const char* url,
                               const char* method, const char* version,
                               const char* upload_data,
                               size_t* upload_data_size, void** state) {
    auto& self = *static_cast<http_service*>(cls);
    auto& lim = self.limits_;
    auto refuse = [&](unsigned status, const std::string& code,
                      const std::string& message) {
      self.api_.count_refused(int(status));
      return refusal(c, status, code, message);
    };
    if (*state == nullptr) {
      // The request line and headers are in; the body is not read yet, so a
      // refusal now spares reading it.
      *state = new http_service::request;
      header_tally t;
      MHD_get_connection_values(c, MHD_HEADER_KIND, tally, &t);
      size_t fields = t.count;
      t.count = 0;
      MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, tally, &t);
      t.bytes +=
          std::strlen(method) + std::strlen(url) + std::strlen(version) + 4;
      if (fields > lim.max_headers)
        return refuse(
            MHD_HTTP_REQUEST_HEADER_FIELDS_TOO_LARGE, "too_many_headers",
            "at most " + std::to_string(lim.max_headers) + " header fields");
      if (t.bytes > lim.max_header_bytes)
        return refuse(MHD_HTTP_REQUEST_HEADER_FIELDS_TOO_LARGE,
                      "headers_too_large",
                      "at most " + std::to_string(lim.max_header_bytes) +
                          " bytes of request line and headers");
      if (auto* length = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                     "Content-Length")) {
        auto n = parse_count("Content-Length", length, UINT64_MAX);
        if (!n || *n > lim.max_body_bytes)
          return refuse(MHD_HTTP_CONTENT_TOO_LARGE, "body_too_large",
                        "a request body has at most " +
                            std::to_string(lim.max_body_bytes) + " bytes");
      }
      return MHD_YES;
    }
    auto& r = *static_cast<http_service::request*>(*state);
    if (*upload_data_size > 0) {
      // A chunked body has no length up front. libmicrohttpd takes no answer
      // while a body streams in, so the excess is counted and dropped, and
      // the answer is 413 at its end (or the reaper ends it at the deadline).
      r.received += *upload_data_size;
      if (r.received > lim.max_body_bytes) {
        if (!r.too_large) {
          r.too_large = true;
          std::string{}.swap(r.body);
        }
      } else {
        r.body.append(upload_data, *upload_data_size);
      }
      *upload_data_size = 0;
      return MHD_YES;
    }
    // The whole request is in: no read deadline while it is answered.
    if (auto* conn = connection_of(c))
      conn->deadline_ns = 0;
    if (r.too_large)
      return refuse(MHD_HTTP_CONTENT_TOO_LARGE, "body_too_large",
                    "a request body has at most " +
                        std::to_string(lim.max_body_bytes) + " bytes");
    auto* auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                             MHD_HTTP_HEADER_AUTHORIZATION);
    auto reply =
        self.api_.handle(method, url, auth ? auth : "", r.body, peer_of(c));
    return queue(c, unsigned(reply.status), reply.body, reply.content_type,
                 false, reply.allow);
  }

  static void on_completed(void* cls, MHD_Connection* c, void** state,
                           MHD_RequestTerminationCode) {
    auto& self = *static_cast<http_service*>(cls);
    delete static_cast<http_service::request*>(*state);
    *state = nullptr;
    // The next request on this connection has the read time from now.
    if (auto* conn = connection_of(c))
      conn->deadline_ns = now_ns() + to_ns(self.limits_.read_timeout_s);
  }

  // A connection over max_connections is closed at once on accept, not
  // left in the listen queue, where a scrape would wait behind idle peers
  // until they time out. libmicrohttpd's own limit is set above it (it stops
  // accepting at its limit).
  static MHD_Result on_accept(void* cls, const sockaddr*, socklen_t) {
    auto& self = *static_cast<http_service*>(cls);
    std::lock_guard guard{self.mtx_};
    if (self.open_.size() < self.limits_.max_connections)
      return MHD_YES;
    self.api_.count_refused(503);
    return MHD_NO;
  }

  static void on_connection(void* cls, MHD_Connection* c, void** context,
                            MHD_ConnectionNotificationCode event) {
    auto& self = *static_cast<http_service*>(cls);
    if (event == MHD_CONNECTION_NOTIFY_STARTED) {
      auto* conn = new http_service::connection;
      auto* info =
          MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
      conn->fd = info != nullptr ? info->connect_fd : -1;
      conn->deadline_ns = now_ns() + to_ns(self.limits_.read_timeout_s);
      std::lock_guard guard{self.mtx_};
      self.open_.insert(conn);
      *context = conn;
      return;
    }
    // Called before libmicrohttpd closes the socket.
    auto* conn = static_cast<http_service::connection*>(*context);
    if (conn == nullptr)
      return;
    {
      std::lock_guard guard{self.mtx_};
      self.open_.erase(conn);
    }
    *context = nullptr;
    delete conn;
  }
};

http_service::http_service(admin_api& api, http_limits limits)
    : api_(api), limits_(limits) {
  // nop
}

http_service::~http_service() {
  stop();
}

caf::expected<int> http_service::start(const std::string& host, int port) {
  if (daemon_ != nullptr)
    return make_error(errc::invalid_arguments, "the HTTP server runs already");
  auto& lim = limits_;
  if (!std::isfinite(lim.read_timeout_s) || lim.read_timeout_s <= 0 ||
      lim.max_connections == 0 || lim.threads == 0 || lim.threads > 64 ||
      lim.max_header_bytes < 256)
    return make_error(errc::invalid_arguments, "invalid HTTP limits");
  auto listening = listen_on(host, port);
  if (!listening)
    return listening.error();
  auto [fd, bound_port] = *listening;
  // libmicrohttpd bounds a connection's memory, request line and headers
  // included; what fits is then checked against the limits exactly.
  size_t memory =
      size_t(std::min<uint64_t>(lim.max_header_bytes, 1u << 30)) * 2 + 4096;
  // Inactivity: a client that stops reading its answer.
  auto idle = unsigned(std::max(1.0, std::ceil(lim.read_timeout_s)));
  std::vector<MHD_OptionItem> opts{
      {MHD_OPTION_LISTEN_SOCKET, fd, nullptr},
      {MHD_OPTION_CONNECTION_LIMIT,
       intptr_t(std::min<uint64_t>(uint64_t(lim.max_connections) * 2 + 16,
                                   1u << 30)),
       nullptr},
      {MHD_OPTION_PER_IP_CONNECTION_LIMIT, intptr_t(lim.max_connections_per_ip),
       nullptr},
      {MHD_OPTION_CONNECTION_MEMORY_LIMIT, intptr_t(memory), nullptr},
      {MHD_OPTION_CONNECTION_TIMEOUT, intptr_t(idle), nullptr},
      {MHD_OPTION_NOTIFY_COMPLETED,
       reinterpret_cast<intptr_t>(&http_callbacks::on_completed), this},
      {MHD_OPTION_NOTIFY_CONNECTION,
       reinterpret_cast<intptr_t>(&http_callbacks::on_connection), this},
      {MHD_OPTION_UNESCAPE_CALLBACK, reinterpret_cast<intptr_t>(&unescape_url),
       nullptr},
  };
  if (lim.threads > 1)
    opts.push_back(
        {MHD_OPTION_THREAD_POOL_SIZE, intptr_t(lim.threads), nullptr});
  opts.push_back({MHD_OPTION_END, 0, nullptr});
  {
    std::lock_guard guard{mtx_};
    stopping_ = false;
  }
  daemon_ = MHD_start_daemon(MHD_USE_EPOLL_INTERNAL_THREAD, 0,
                             &http_callbacks::on_accept, this,
                             &http_callbacks::on_request, this,
                             MHD_OPTION_ARRAY, opts.data(), MHD_OPTION_END);
  if (daemon_ == nullptr) {
    ::close(fd);
    return make_error(errc::invalid_arguments, "cannot serve HTTP on " + host +
                                                   ":" +
                                                   std::to_string(bound_port));
  }
  reaper_ = std::thread{[this] { reap(); }};
  return bound_port;
}

void http_service::stop() {
  {
    std::lock_guard guard{mtx_};
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (reaper_.joinable())
    reaper_.join();
  if (daemon_ != nullptr) {
    MHD_stop_daemon(daemon_);
    daemon_ = nullptr;
  }
}

void http_service::reap() {
  // Deadlines are checked a few times per read timeout, at most every
  // quarter second.
  auto tick = std::chrono::milliseconds{
      std::clamp<int64_t>(int64_t(limits_.read_timeout_s * 250), 10, 250)};
  std::unique_lock guard{mtx_};
  while (!stopping_) {
    stop_cv_.wait_for(guard, tick);
    auto now = now_ns();
    for (auto* conn : open_) {
      auto deadline = conn->deadline_ns.load();
      if (deadline == 0 || deadline > now || conn->reaped.exchange(true))
        continue;
      // libmicrohttpd sees the end of the stream and closes the connection
      // on its own thread; the descriptor stays open until then, and it
      // leaves open_ (under this lock) before it is closed.
      ::shutdown(conn->fd, SHUT_RDWR);
      ++timed_out_;
      api_.count_timed_out_connection();
    }
  }
}

} // namespace cohort::tools
