// `cohort serve`: a long-running node. The runtime plus one HTTP server on
// loopback by default: Prometheus metrics at /metrics and the admin API
// under /v1. Stops cleanly on SIGINT or SIGTERM: admission closes, what is in
// flight ends, the audit log is flushed and verified.
#pragma once

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <caf/expected.hpp>

#include "tools/admin_api.hpp"

namespace httplib {
class Server;
} // namespace httplib

namespace cohort::tools {

/// Serves an admin_api over HTTP/1.1 on worker threads.
class http_service {
public:
  explicit http_service(admin_api& api);
  ~http_service();

  /// Binds `host:port` (port 0: a free one) and serves on a thread of its
  /// own. Returns the bound port; an error when the address cannot be bound.
  caf::expected<int> start(const std::string& host, int port);

  /// Stops accepting and waits for the serving thread.
  void stop();

private:
  admin_api& api_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
};

/// `cohort serve [--config FILE] [--listen HOST:PORT] [--token-file FILE]
/// [--audit PATH] [--pipeline FILE [--repeat N]] [--for SECONDS]`.
/// Returns 0 after a clean stop, 1 when the stop found an item unended or
/// the audit chain broken, 2 for bad input.
int cmd_serve(const std::vector<std::string>& args);

} // namespace cohort::tools
