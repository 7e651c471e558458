#include "ipc/stop_signals.hpp"

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

namespace cohort::ipc {

namespace {

/// Where the handler writes; -1 when no stop_signals is alive.
std::atomic<int> handler_pipe{-1};

/// What the watcher reads to end (no signal has number 0).
constexpr unsigned char watcher_end = 0;

extern "C" void on_stop_signal(int sig) {
  int saved = errno;
  unsigned char byte = static_cast<unsigned char>(sig);
  if (int fd = handler_pipe.load(); fd >= 0) [[maybe_unused]]
    auto n = ::write(fd, &byte, 1);
  errno = saved;
}

sigset_t stop_set() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

void set_disposition(void (*handler)(int)) {
  struct sigaction sa {};
  sa.sa_handler = handler;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

} // namespace

stop_signals::stop_signals(std::string who) : who_(std::move(who)) {
  auto set = stop_set();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  if (::pipe2(pipe_, O_CLOEXEC) != 0) {
    // No pipe (out of descriptors): sigwait on the blocked signals still
    // takes the first one; see wait().
    pipe_[0] = pipe_[1] = -1;
    return;
  }
  // A full pipe (a flood of signals) drops the extra bytes, never blocks
  // the handler.
  ::fcntl(pipe_[1], F_SETFL, O_NONBLOCK);
  handler_pipe.store(pipe_[1]);
  set_disposition(on_stop_signal);
  watcher_ = std::thread{[this] { watch(); }};
}

stop_signals::~stop_signals() {
  if (pipe_[1] < 0)
    return;
  set_disposition(SIG_IGN);
  handler_pipe.store(-1);
  unsigned char end = watcher_end;
  // The write end is non-blocking: a pipe full of signals makes room as the
  // watcher reads, so retry until the end marker is in.
  while (::write(pipe_[1], &end, 1) != 1 && (errno == EAGAIN || errno == EINTR))
    std::this_thread::sleep_for(std::chrono::milliseconds{1});
  watcher_.join();
  ::close(pipe_[0]);
  ::close(pipe_[1]);
  // Ignored signals that arrive while blocked stay pending (Linux keeps
  // them in case the disposition changes): taken now.
  auto set = stop_set();
  timespec none{};
  while (sigtimedwait(&set, nullptr, &none) > 0) {
  }
}

void stop_signals::watch() {
  // This thread takes the signals: they are unblocked here only (and in
  // any thread a library started before the mask).
  auto set = stop_set();
  pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
  for (;;) {
    unsigned char byte = 0;
    auto n = ::read(pipe_[0], &byte, 1);
    if (n < 0 && errno == EINTR)
      continue;
    if (n != 1 || byte == watcher_end)
      return;
    bool again = false;
    {
      std::lock_guard<std::mutex> guard{mtx_};
      if (first_ == 0) {
        first_ = byte;
      } else {
        ++later_;
        again = true;
      }
    }
    cv_.notify_all();
    if (again) {
      std::fprintf(stderr,
                   "%s: already stopping (%s again): what was admitted ends "
                   "first, then the summary; SIGKILL stops at once\n",
                   who_.c_str(), strsignal(byte));
      std::fflush(stderr);
    }
  }
}

int stop_signals::wait(double seconds) {
  if (pipe_[1] < 0) {
    // Without the pipe: the signals are blocked in this thread and every
    // one started after it; take the first one here.
    auto set = stop_set();
    if (seconds > 0) {
      timespec ts;
      ts.tv_sec = time_t(seconds);
      ts.tv_nsec = long((seconds - double(ts.tv_sec)) * 1e9);
      int sig = sigtimedwait(&set, nullptr, &ts);
      return sig > 0 ? sig : 0;
    }
    int sig = 0;
    sigwait(&set, &sig);
    return sig;
  }
  std::unique_lock<std::mutex> lock{mtx_};
  auto got = [this] { return first_ != 0; };
  if (seconds > 0)
    cv_.wait_for(lock, std::chrono::duration<double>{seconds}, got);
  else
    cv_.wait(lock, got);
  return first_;
}

int stop_signals::later() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return later_;
}

} // namespace cohort::ipc
