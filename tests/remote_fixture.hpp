// Helpers for tests of remote device hosts (docs/device-hosts.md, "Nodes on
// other machines"): a `cohort device-host --listen` run in the background,
// and a TCP forwarder between a node and a host whose connections the test
// cuts and restores.
#pragma once

#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <google/protobuf/message.h>
#include <google/protobuf/text_format.h>

namespace cohort::test {

/// A `cohort device-host --listen` running in the background: its pid, and
/// the first line it printed.
struct remote_host {
  int pid = 0;
  std::string line;

  /// The port of "... on HOST:PORT with TLS" (0: none said).
  uint16_t port() const {
    auto at = line.rfind(':');
    if (at == std::string::npos || line.find("with TLS") == std::string::npos)
      return 0;
    return uint16_t(std::strtoul(line.c_str() + at + 1, nullptr, 10));
  }
};

/// Starts `cohort device-host ARGS...` with its standard output in a pipe
/// and reads its first line (within 15 s).
inline remote_host start_remote_host(const std::vector<std::string>& args) {
  int out[2];
  REQUIRE(::pipe(out) == 0);
  std::vector<std::string> all{COHORT_BINARY, "device-host"};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  remote_host h;
  h.pid = ::fork();
  REQUIRE(h.pid >= 0);
  if (h.pid == 0) {
    ::dup2(out[1], 1);
    ::close(out[0]);
    ::close(out[1]);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(out[1]);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds{15};
  char c;
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{out[0], POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0)
      continue;
    if (::read(out[0], &c, 1) != 1 || c == '\n')
      break;
    h.line += c;
  }
  ::close(out[0]);
  return h;
}

/// Waits for `pid` to end (up to 10 s); its exit status, or -1 (it was
/// killed then).
inline int reap(int pid) {
  for (int i = 0; i < 1000; ++i) {
    int status = 0;
    auto r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid)
      return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    std::this_thread::sleep_for(std::chrono::milliseconds{10});
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  return -1;
}

/// Ends a remote host with SIGTERM when the test ends.
struct host_guard {
  int pid = 0;
  ~host_guard() {
    if (pid > 0 && ::kill(pid, SIGTERM) == 0)
      reap(pid);
  }
};

/// Writes `m` in protobuf text format to `path`.
inline void write_text(const std::string& path,
                       const google::protobuf::Message& m) {
  std::string text;
  REQUIRE(google::protobuf::TextFormat::PrintToString(m, &text));
  std::ofstream{path} << text;
}

/// Forwards TCP connections from a port of its own on 127.0.0.1 to
/// `target` there, byte for byte, on a thread. `cut()` closes every
/// connection it carries and refuses new ones (accepted, then closed at
/// once) until `restore()`: a network that drops a node's connection and
/// comes back.
class tcp_forwarder {
public:
  explicit tcp_forwarder(uint16_t target) : target_(target) {
    listen_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(listen_ >= 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(listen_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::listen(listen_, 16) == 0);
    socklen_t len = sizeof a;
    REQUIRE(::getsockname(listen_, reinterpret_cast<sockaddr*>(&a), &len) == 0);
    port_ = ntohs(a.sin_port);
    REQUIRE(::pipe2(wake_, O_CLOEXEC) == 0);
    thread_ = std::thread{[this] { run(); }};
  }

  ~tcp_forwarder() {
    command('q');
    thread_.join();
    ::close(listen_);
    ::close(wake_[0]);
    ::close(wake_[1]);
  }

  uint16_t port() const { return port_; }

  /// Closes every connection now, and refuses new ones.
  void cut() {
    refusing_ = true;
    command('c');
  }

  /// Accepts connections again.
  void restore() { refusing_ = false; }

  /// Connections forwarded so far.
  size_t forwarded() const { return forwarded_.load(); }

private:
  // Sends the thread `c` and waits until it was carried out.
  void command(char c) {
    auto before = done_.load();
    REQUIRE(::write(wake_[1], &c, 1) == 1);
    while (done_.load() == before)
      std::this_thread::sleep_for(std::chrono::milliseconds{1});
  }

  int connect_target() {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(target_);
    if (fd >= 0 &&
        ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0)
      return fd;
    if (fd >= 0)
      ::close(fd);
    return -1;
  }

  // Writes all of `n` bytes to `fd`; false when the peer went.
  static bool write_all(int fd, const char* p, ssize_t n) {
    while (n > 0) {
      auto w = ::send(fd, p, size_t(n), MSG_NOSIGNAL);
      if (w < 0 && errno == EINTR)
        continue;
      if (w <= 0)
        return false;
      p += w;
      n -= w;
    }
    return true;
  }

  void run() {
    std::vector<std::pair<int, int>> pairs;
    auto close_all = [&] {
      for (auto& [a, b] : pairs) {
        ::close(a);
        ::close(b);
      }
      pairs.clear();
    };
    for (;;) {
      std::vector<pollfd> fds{{listen_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
      for (auto& [a, b] : pairs) {
        fds.push_back({a, POLLIN, 0});
        fds.push_back({b, POLLIN, 0});
      }
      if (::poll(fds.data(), fds.size(), -1) < 0)
        continue;
      if (fds[1].revents != 0) {
        char c = 0;
        if (::read(wake_[0], &c, 1) == 1) {
          if (c == 'c')
            close_all();
          ++done_;
          if (c == 'q') {
            close_all();
            return;
          }
        }
        continue;
      }
      // The pairs polled this round (an accepted one joins the next).
      auto polled = pairs.size();
      if (fds[0].revents != 0) {
        int in = ::accept4(listen_, nullptr, nullptr, SOCK_CLOEXEC);
        if (in >= 0) {
          int out = refusing_ ? -1 : connect_target();
          if (out < 0) {
            ::close(in);
          } else {
            pairs.emplace_back(in, out);
            ++forwarded_;
          }
        }
      }
      std::vector<size_t> dead;
      char buf[65536];
      for (size_t i = 0; i < polled; ++i) {
        for (int side = 0; side < 2; ++side) {
          auto& pfd = fds[2 + 2 * i + size_t(side)];
          if (pfd.revents == 0)
            continue;
          int from = side == 0 ? pairs[i].first : pairs[i].second;
          int to = side == 0 ? pairs[i].second : pairs[i].first;
          auto r = ::read(from, buf, sizeof buf);
          if (r <= 0 || !write_all(to, buf, r)) {
            dead.push_back(i);
            break;
          }
        }
      }
      for (auto i = dead.rbegin(); i != dead.rend(); ++i) {
        ::close(pairs[*i].first);
        ::close(pairs[*i].second);
        pairs.erase(pairs.begin() + std::ptrdiff_t(*i));
      }
    }
  }

  uint16_t target_;
  uint16_t port_ = 0;
  int listen_ = -1;
  int wake_[2] = {-1, -1};
  std::atomic<bool> refusing_{false};
  std::atomic<size_t> done_{0};
  std::atomic<size_t> forwarded_{0};
  std::thread thread_;
};

} // namespace cohort::test
