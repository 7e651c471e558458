// The share socket's server (docs/objects.md, "Sharing across processes"):
// a Unix domain SOCK_SEQPACKET socket through which other processes of the
// node attach to exported objects. One thread polls the socket, its
// connections and a pidfd per connected process; it asks the runtime (the
// backend) to attach and detach, hands the attached process the memory's
// descriptor (SCM_RIGHTS) or IPC handle, and detaches everything a process
// held once its connection closes or it exits, so that a killed consumer
// leaks nothing.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <caf/expected.hpp>

#include "messages/share.hpp"

namespace cohort::objects {

/// What the server asks of the runtime; called on the server's thread.
struct share_backend {
  /// Attaches `peer` with `token`; the handle's descriptor, if any, is the
  /// server's to send and close.
  std::function<caf::expected<attachment_info>(
      const std::string& token, const share_peer& peer, bool write)>
      attach;
  /// Ends an attachment; `died` when its process did not detach it (it
  /// exited, or closed its connection first): it is reclaimed.
  std::function<void(uint64_t attachment, bool died)> detach;
};

class share_server {
public:
  /// Connections at once; more are closed at once.
  static constexpr size_t max_connections = 256;
  /// Connections of one user at once.
  static constexpr size_t max_connections_per_user = 64;
  /// Attachments per connection.
  static constexpr size_t max_attachments = 1024;
  /// A request's largest size.
  static constexpr size_t max_request = 4096;

  /// Listens on `path` (a stale socket there is replaced; a live one, or
  /// another file, is an error) and starts the thread. Errors: io_error,
  /// invalid_arguments (a path too long for a Unix socket).
  static caf::expected<std::unique_ptr<share_server>>
  start(const std::string& path, share_backend backend);

  ~share_server();
  share_server(const share_server&) = delete;
  share_server& operator=(const share_server&) = delete;

  /// Detaches every attachment, closes every connection, removes the
  /// socket and joins the thread. Idempotent.
  void stop();

  const std::string& path() const { return path_; }

  struct connection;

private:
  share_server(std::string path, int listener, int wake, share_backend backend);
  void run();
  void accept_one();
  /// False when the connection is to be closed.
  bool serve(connection& c);
  void close_connection(connection& c, bool died);

  std::string path_;
  int listener_;
  int wake_;
  int wake_write_ = -1;
  share_backend backend_;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  std::once_flag stopped_;
  std::vector<std::unique_ptr<connection>> conns_;
};

} // namespace cohort::objects
