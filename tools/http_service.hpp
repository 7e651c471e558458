// The HTTP front of `cohort serve`: libmicrohttpd in its internal epoll
// mode, so that a connection costs a socket and a small buffer, never a
// thread. Every resource a client can hold is bounded: connections (in all
// and per address), the request line and headers (count and bytes), the
// body (also when chunked) and the time to deliver a request. Slow clients
// therefore cannot starve `/metrics` or the admin API.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_set>

#include <caf/expected.hpp>

#include "tools/admin_api.hpp"

struct MHD_Daemon;
struct MHD_Connection;

namespace cohort::tools {

/// What one client may hold; `cohort serve`'s `--http-*` flags.
struct http_limits {
  /// Largest request body; more is answered 413 (a chunked body is read and
  /// discarded to its end first, within `read_timeout_s`).
  uint64_t max_body_bytes = uint64_t{1} << 20;
  /// Most request header fields; more is answered 431.
  uint32_t max_headers = 64;
  /// Most bytes in the request line and header fields; more is answered
  /// 431. A connection's buffer is bounded to twice this plus 4 KiB.
  uint64_t max_header_bytes = 16 << 10;
  /// Seconds a client has to deliver a whole request, headers and body,
  /// counted from its connect or from its previous answer; then the
  /// connection is closed, however steadily it trickles.
  double read_timeout_s = 10;
  /// Open connections at most; more are closed at once on accept.
  uint32_t max_connections = 512;
  /// Open connections from one client address at most; 0: no limit.
  uint32_t max_connections_per_ip = 0;
  /// Threads serving connections (each an epoll loop).
  uint32_t threads = 2;
};

/// Serves an admin_api over HTTP/1.1. `start` and `stop` are for one
/// thread; requests are answered on the service's own threads.
class http_service {
public:
  explicit http_service(admin_api& api, http_limits limits = {});
  ~http_service();

  http_service(const http_service&) = delete;
  http_service& operator=(const http_service&) = delete;

  /// Binds `host:port` (port 0: a free one; never a port another socket
  /// listens on) and serves on threads of its own. Returns the bound port;
  /// an error when the address cannot be bound or the limits are invalid.
  caf::expected<int> start(const std::string& host, int port);

  /// Closes every connection and waits for the serving threads. Returns
  /// promptly whatever the clients do; calling it again, or before `start`,
  /// does nothing.
  void stop();

  /// Connections closed because they took longer than the read timeout.
  uint64_t timed_out() const { return timed_out_.load(); }

private:
  struct connection;
  struct request;

  // The libmicrohttpd callbacks, in the .cpp.
  friend struct http_callbacks;

  void reap();

  admin_api& api_;
  http_limits limits_;
  MHD_Daemon* daemon_ = nullptr;
  // Open connections, for the reaper; a connection leaves before its socket
  // is closed, so the reaper never shuts down a reused descriptor.
  std::mutex mtx_;
  std::unordered_set<connection*> open_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;
  std::thread reaper_;
  std::atomic<uint64_t> timed_out_{0};
};

} // namespace cohort::tools
