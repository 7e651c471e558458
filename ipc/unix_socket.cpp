#include "ipc/unix_socket.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "messages/errc.hpp"

namespace cohort::ipc {

caf::error io_failure(const std::string& what) {
  return make_error(errc::io_error, what + ": " + std::strerror(errno));
}

int open_pidfd(pid_t pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
#else
  (void)pid;
  errno = ENOSYS;
  return -1;
#endif
}

bool pid_exited(int pidfd) {
  pollfd p{pidfd, POLLIN, 0};
  int n;
  do
    n = ::poll(&p, 1, 0);
  while (n < 0 && errno == EINTR);
  return n > 0 && (p.revents & POLLIN) != 0;
}

caf::expected<int> listen_seqpacket(const std::string& path,
                                    const std::string& what, mode_t mode) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof addr.sun_path)
    return make_error(errc::invalid_arguments,
                      what + "'s path must have 1 to " +
                          std::to_string(sizeof addr.sun_path - 1) +
                          " characters: '" + path + "'");
  std::memcpy(addr.sun_path, path.data(), path.size());
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode))
      return make_error(errc::io_error, what + "'s path '" + path +
                                            "' is a file that is no socket");
    // A socket someone listens on is in use; one nobody answers is left
    // from a process that died. Only a refusal says nobody listens.
    int probe = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    bool live = probe < 0 ||
                ::connect(probe, reinterpret_cast<sockaddr*>(&addr),
                          sizeof addr) == 0 ||
                errno != ECONNREFUSED;
    if (probe >= 0)
      ::close(probe);
    if (live)
      return make_error(errc::io_error,
                        what + " '" + path + "' is in use by another process");
    ::unlink(path.c_str());
  }
  int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0)
    return io_failure(what);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    auto err = io_failure("binding " + what + " to '" + path + "'");
    ::close(fd);
    return err;
  }
  ::chmod(path.c_str(), mode);
  if (::listen(fd, 64) != 0) {
    auto err = io_failure("listening on " + what);
    ::close(fd);
    ::unlink(path.c_str());
    return err;
  }
  return fd;
}

} // namespace cohort::ipc
