#include "objects/share_server.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "ipc/unix_socket.hpp"
#include "kernels/dtype.hpp"
#include "messages/errc.hpp"
#include "objects/share.pb.h"

namespace cohort::objects {

struct share_server::connection {
  int fd = -1;
  /// Of its process, or -1 where pidfd_open is refused (then its hangup
  /// alone tells).
  int pidfd = -1;
  share_peer peer;
  std::vector<uint64_t> attachments;
};

namespace {

using ipc::io_failure;

// Sends `reply`, with `fd` beside it when it is one.
bool send_reply(int sock, const share::Reply& reply, int fd) {
  auto bytes = reply.SerializeAsString();
  iovec iov{bytes.data(), bytes.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
  if (fd >= 0) {
    std::memset(control, 0, sizeof control);
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    auto* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
  }
  for (;;) {
    auto n = ::sendmsg(sock, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0)
      return size_t(n) == bytes.size();
    if (errno != EINTR)
      return false;
  }
}

share::Reply error_reply(const caf::error& err) {
  share::Reply r;
  auto code = code_of(err);
  r.set_error(std::string{to_string(code)});
  r.set_detail(describe(err));
  return r;
}

share::Reply error_reply(errc code, const std::string& why) {
  return error_reply(make_error(code, why));
}

// A connection turned away at once: it is told why, then closed.
void refuse_connection(int fd, const std::string& why) {
  send_reply(fd, error_reply(errc::queue_full, why), -1);
  ::close(fd);
}

// A descriptor of the same memfd that allows reading only: mmap with
// PROT_WRITE and MAP_SHARED is refused on it, so a read-only grant holds
// whatever the attached process tries.
int read_only_copy(int fd) {
  auto path = "/proc/self/fd/" + std::to_string(fd);
  return ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
}

} // namespace

caf::expected<std::unique_ptr<share_server>>
share_server::start(const std::string& path, share_backend backend) {
  // Anyone on the node may connect: nothing is attachable without a token,
  // and an export names the user it is for (default-deny).
  auto listening = ipc::listen_seqpacket(path, "the share socket", 0666);
  if (!listening)
    return listening.error();
  int fd = *listening;
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC | O_NONBLOCK) != 0) {
    auto err = io_failure("the share server's wake pipe");
    ::close(fd);
    ::unlink(path.c_str());
    return err;
  }
  // The read end is polled; the write end wakes the thread at stop.
  std::unique_ptr<share_server> s{
      new share_server(path, fd, pipe_fds[0], std::move(backend))};
  s->wake_write_ = pipe_fds[1];
  s->thread_ = std::thread{[p = s.get()] { p->run(); }};
  return s;
}

share_server::share_server(std::string path, int listener, int wake,
                           share_backend backend)
    : path_(std::move(path)), listener_(listener), wake_(wake),
      backend_(std::move(backend)) {
  // nop
}

share_server::~share_server() {
  stop();
}

void share_server::stop() {
  std::call_once(stopped_, [this] {
    stopping_ = true;
    char b = 1;
    while (::write(wake_write_, &b, 1) < 0 && errno == EINTR) {
    }
    if (thread_.joinable())
      thread_.join();
    for (auto& c : conns_)
      close_connection(*c, false);
    conns_.clear();
    ::close(listener_);
    ::close(wake_);
    ::close(wake_write_);
    ::unlink(path_.c_str());
  });
}

void share_server::run() {
  std::vector<pollfd> fds;
  while (!stopping_) {
    fds.clear();
    fds.push_back({wake_, POLLIN, 0});
    fds.push_back({listener_, POLLIN, 0});
    for (auto& c : conns_) {
      fds.push_back({c->fd, POLLIN, 0});
      fds.push_back({c->pidfd, POLLIN, 0}); // -1 is ignored by poll
    }
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR)
        continue;
      break;
    }
    if (fds[0].revents != 0)
      break;
    // Connections first (their indexes match `fds` until one closes).
    // A connection that closes, or whose process exits, with attachments
    // it did not detach: they are reclaimed.
    std::vector<size_t> closing;
    for (size_t i = 0; i < conns_.size(); ++i) {
      auto& c = *conns_[i];
      auto sock = fds[2 + 2 * i].revents;
      auto pid = fds[3 + 2 * i].revents;
      if (pid != 0) {
        closing.push_back(i);
        continue;
      }
      if (sock == 0)
        continue;
      if ((sock & POLLIN) != 0 && serve(c))
        continue;
      if ((sock & (POLLIN | POLLHUP | POLLERR | POLLNVAL)) != 0)
        closing.push_back(i);
    }
    for (size_t k = closing.size(); k-- > 0;) {
      close_connection(*conns_[closing[k]], true);
      conns_.erase(conns_.begin() + std::ptrdiff_t(closing[k]));
    }
    if ((fds[1].revents & POLLIN) != 0)
      accept_one();
  }
}

void share_server::accept_one() {
  // A bounded number per round: a flood of connects cannot hold the thread.
  for (int round = 0; round < 64; ++round) {
    int fd =
        ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EINTR)
        continue;
      return; // EAGAIN, or a connection that went away at once
    }
    if (conns_.size() >= max_connections) {
      refuse_connection(fd, "the share socket has " +
                                std::to_string(max_connections) +
                                " connections already");
      continue;
    }
    ucred cred{};
    socklen_t len = sizeof cred;
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
      ::close(fd);
      continue;
    }
    // One user cannot take every connection: the socket is open to all.
    size_t theirs = 0;
    for (auto& c : conns_)
      theirs += c->peer.uid == cred.uid;
    if (theirs >= max_connections_per_user) {
      refuse_connection(fd, "user " + std::to_string(cred.uid) + " has " +
                                std::to_string(max_connections_per_user) +
                                " connections to the share socket already");
      continue;
    }
    auto c = std::make_unique<connection>();
    c->fd = fd;
    c->peer = share_peer{cred.pid, cred.uid, cred.gid};
    c->pidfd = ipc::open_pidfd(cred.pid);
    conns_.push_back(std::move(c));
  }
}

bool share_server::serve(connection& c) {
  char buf[max_request];
  auto n = ::recv(c.fd, buf, sizeof buf, MSG_TRUNC | MSG_DONTWAIT);
  if (n == 0)
    return false; // closed
  if (n < 0)
    return errno == EAGAIN || errno == EINTR;
  share::Request req;
  if (size_t(n) > sizeof buf || !req.ParseFromArray(buf, int(n)) ||
      req.op_case() == share::Request::OP_NOT_SET) {
    return send_reply(c.fd,
                      error_reply(errc::invalid_arguments,
                                  size_t(n) > sizeof buf
                                      ? "a request is at most " +
                                            std::to_string(max_request) +
                                            " bytes"
                                      : "a request is a cohort.share.Request "
                                        "with attach or detach"),
                      -1);
  }
  if (req.has_detach()) {
    auto id = req.detach().attachment();
    auto i = std::find(c.attachments.begin(), c.attachments.end(), id);
    if (i == c.attachments.end())
      return send_reply(c.fd,
                        error_reply(errc::invalid_arguments,
                                    "attachment " + std::to_string(id) +
                                        " was not made on this connection"),
                        -1);
    c.attachments.erase(i);
    backend_.detach(id, false);
    share::Reply ok;
    ok.set_attachment(id);
    return send_reply(c.fd, ok, -1);
  }
  auto& a = req.attach();
  if (c.attachments.size() >= max_attachments)
    return send_reply(
        c.fd,
        error_reply(errc::queue_full, "a connection holds at most " +
                                          std::to_string(max_attachments) +
                                          " attachments"),
        -1);
  auto got = backend_.attach(a.token(), c.peer, a.write());
  if (!got)
    return send_reply(c.fd, error_reply(got.error()), -1);
  auto& h = got->handle;
  int fd = h.fd;
  if (fd >= 0 && !got->writable) {
    int ro = read_only_copy(fd);
    ::close(fd);
    fd = ro;
    if (fd < 0) {
      auto err = io_failure("reopening an object's memory read-only");
      backend_.detach(got->id, false);
      return send_reply(c.fd, error_reply(err), -1);
    }
  }
  share::Reply r;
  r.set_attachment(got->id);
  r.set_object(got->object.id);
  r.set_tenant(got->object.tenant);
  r.set_dtype(std::string{kernels::name(got->object.type)});
  r.set_elements(got->object.elements);
  r.set_kind(h.kind);
  r.set_ipc_handle(std::string(h.ipc.begin(), h.ipc.end()));
  r.set_offset(h.offset);
  r.set_region_bytes(h.region_bytes);
  r.set_device(h.device);
  r.set_pci_bus_id(h.pci_bus_id);
  r.set_writable(got->writable);
  bool sent = send_reply(c.fd, r, fd);
  if (fd >= 0)
    ::close(fd);
  if (!sent) {
    // Nobody to hand it to: the attachment ends here.
    backend_.detach(got->id, false);
    return false;
  }
  c.attachments.push_back(got->id);
  return true;
}

void share_server::close_connection(connection& c, bool died) {
  for (auto id : c.attachments)
    backend_.detach(id, died);
  c.attachments.clear();
  if (c.fd >= 0)
    ::close(c.fd);
  if (c.pidfd >= 0)
    ::close(c.pidfd);
  c.fd = c.pidfd = -1;
}

} // namespace cohort::objects
