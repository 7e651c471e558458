#include "exec/session_client.hpp"

#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "exec/exec_wire.hpp"
#include "ipc/unix_socket.hpp"
#include "messages/errc.hpp"

namespace cohort::exec {

caf::expected<opened_session> open_session(const std::string& path,
                                           const std::string& tenant,
                                           uint64_t limit_bytes) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof addr.sun_path)
    return make_error(errc::invalid_arguments,
                      "the exec socket's path must have 1 to " +
                          std::to_string(sizeof addr.sun_path - 1) +
                          " characters: '" + path + "'");
  if (tenant.empty() || tenant.size() >= sizeof(wire_request::text))
    return make_error(errc::invalid_arguments,
                      "a tenant's name has 1 to " +
                          std::to_string(sizeof(wire_request::text) - 1) +
                          " characters");
  if (limit_bytes == 0)
    return make_error(errc::invalid_arguments,
                      "a session's limit must be above 0");
  std::memcpy(addr.sun_path, path.data(), path.size());
  int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return ipc::io_failure("a socket for the exec socket");
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    auto err =
        ipc::io_failure("no node answers on the exec socket '" + path + "'");
    ::close(fd);
    return err;
  }
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  wire_request req;
  req.op = static_cast<uint16_t>(wire_op::open);
  req.bytes = limit_bytes;
  set_text(req.text, tenant);
  wire_reply reply;
  if (::send(fd, &req, sizeof req, MSG_NOSIGNAL) != ssize_t(sizeof req) ||
      ::recv(fd, &reply, sizeof reply, 0) != ssize_t(sizeof reply) ||
      reply.magic != wire_magic || reply.version != wire_version) {
    auto err = make_error(errc::io_error, "the node on the exec socket '" +
                                              path + "' did not answer");
    ::close(fd);
    return err;
  }
  if (auto st = wire_status{reply.status}; st != wire_status::ok) {
    ::close(fd);
    auto why = text_of(reply.text);
    switch (st) {
    case wire_status::not_allowed:
      return make_error(errc::not_granted, why);
    case wire_status::busy:
      return make_error(errc::queue_full, why);
    default:
      return make_error(errc::invalid_arguments,
                        std::string{to_string(st)} + ": " + why);
    }
  }
  opened_session out;
  out.fd = fd;
  out.id = reply.bytes;
  out.token = text_of(reply.text);
  out.limit_bytes = reply.limit;
  out.chunk_bytes = reply.chunk;
  out.idle_ms = reply.idle_ms;
  return out;
}

caf::error keepalive(const opened_session& s) {
  wire_request req;
  req.op = static_cast<uint16_t>(wire_op::keepalive);
  wire_reply reply;
  ssize_t n;
  do
    n = ::send(s.fd, &req, sizeof req, MSG_NOSIGNAL);
  while (n < 0 && errno == EINTR);
  if (n == ssize_t(sizeof req)) {
    do
      n = ::recv(s.fd, &reply, sizeof reply, 0);
    while (n < 0 && errno == EINTR);
  }
  if (n != ssize_t(sizeof reply) || reply.magic != wire_magic)
    return make_error(errc::io_error, "the node ended session " +
                                          std::to_string(s.id) +
                                          " or cannot be reached");
  if (reply.status != uint16_t(wire_status::ok))
    return make_error(errc::invalid_arguments,
                      std::string{to_string(wire_status{reply.status})} + ": " +
                          text_of(reply.text));
  return caf::none;
}

} // namespace cohort::exec
