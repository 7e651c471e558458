#include "ipc/child.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>

extern char** environ;

namespace cohort::ipc {

namespace {

constexpr size_t stderr_tail_bytes = 2048;
/// Descriptors handed over are moved at least this high first, so that
/// placing them at 0, 1, 2, 3... in the child never overwrites one not yet
/// placed.
constexpr int high_fd = 256;

/// A descriptor closed when it goes out of scope.
struct fd_guard {
  int fd = -1;
  fd_guard() = default;
  explicit fd_guard(int f) : fd(f) {}
  fd_guard(fd_guard&& o) noexcept : fd(std::exchange(o.fd, -1)) {}
  fd_guard& operator=(fd_guard&& o) noexcept {
    std::swap(fd, o.fd);
    return *this;
  }
  ~fd_guard() {
    if (fd >= 0)
      ::close(fd);
  }
};

/// A close-on-exec copy of `fd` above high_fd.
fd_guard high_copy(int fd, std::string& why) {
  fd_guard high{::fcntl(fd, F_DUPFD_CLOEXEC, high_fd)};
  if (high.fd < 0)
    why = std::string{"cannot move a descriptor: "} + std::strerror(errno);
  return high;
}

/// `bytes` in a memory file above high_fd.
fd_guard high_file(const std::string& label, const std::string& bytes,
                   std::string& why) {
  fd_guard made{memory_file(label.c_str(), bytes, why)};
  if (made.fd < 0)
    return {};
  return high_copy(made.fd, why);
}

std::string read_head(int fd, size_t limit) {
  std::string out;
  auto end = ::lseek(fd, 0, SEEK_END);
  if (end <= 0)
    return out;
  out.resize(std::min(size_t(end), limit));
  auto n = ::pread(fd, out.data(), out.size(), 0);
  out.resize(n > 0 ? size_t(n) : 0);
  return out;
}


void wait_for(pid_t pid, const child_request& req, child_end& end) {
  using clock = std::chrono::steady_clock;
  auto deadline = clock::now() + req.timeout;
  auto pause = std::chrono::microseconds{200};
  for (;;) {
    int st = 0;
    auto r = ::waitpid(pid, &st, WNOHANG);
    if (r == pid) {
      end.status = st;
      return;
    }
    if (r < 0 && errno != EINTR)
      return;
    end.cancelled = req.cancelled && req.cancelled();
    if (end.cancelled || clock::now() >= deadline) {
      end.timed_out = !end.cancelled;
      kill_and_reap(pid);
      return;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds{10'000});
  }
}

} // namespace

std::string file_tail(int fd, size_t limit) {
  auto end = ::lseek(fd, 0, SEEK_END);
  if (end <= 0)
    return {};
  auto from = end > off_t(limit) ? end - off_t(limit) : 0;
  std::string out(size_t(end - from), '\0');
  auto n = ::pread(fd, out.data(), out.size(), from);
  out.resize(n > 0 ? size_t(n) : 0);
  while (!out.empty() && (out.back() == '\n' || out.back() == ' '))
    out.pop_back();
  return out;
}

int memory_file(const char* label, const std::string& bytes, std::string& why,
                bool sealed) {
  int fd = ::memfd_create(label, MFD_CLOEXEC | (sealed ? MFD_ALLOW_SEALING : 0));
  if (fd < 0) {
    why = std::string{"memfd_create: "} + std::strerror(errno);
    return -1;
  }
  size_t put = 0;
  while (put < bytes.size()) {
    auto n = ::write(fd, bytes.data() + put, bytes.size() - put);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      why = std::string{"cannot write to memory: "} + std::strerror(errno);
      ::close(fd);
      return -1;
    }
    put += size_t(n);
  }
  if (::lseek(fd, 0, SEEK_SET) != 0) {
    why = std::string{"lseek: "} + std::strerror(errno);
    ::close(fd);
    return -1;
  }
  if (sealed &&
      ::fcntl(fd, F_ADD_SEALS,
              F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    why = std::string{"cannot seal it: "} + std::strerror(errno);
    ::close(fd);
    return -1;
  }
  return fd;
}

int enter_helper(int argc, char** argv, const char* usage, const char* about) {
  if (argc != 3 || std::string_view{argv[1]} != "--parent") {
    std::fprintf(stderr, "usage: %s --parent PID%s\n%s\n", argv[0], usage,
                 about);
    return 2;
  }
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (std::to_string(::getppid()) != argv[2])
    return 3;
  rlimit no_core{0, 0};
  ::setrlimit(RLIMIT_CORE, &no_core);
  for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT})
    std::signal(sig, SIG_DFL);
  return -1;
}

std::string signal_name(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  return abbrev != nullptr ? std::string{"SIG"} + abbrev
                           : "signal " + std::to_string(sig);
}

bool child_end::clean() const {
  return spawn_error.empty() && !timed_out && !cancelled && status &&
         WIFEXITED(*status) && WEXITSTATUS(*status) == 0;
}

std::string child_end::describe(std::chrono::milliseconds timeout) const {
  if (!spawn_error.empty())
    return "could not be started: " + spawn_error;
  if (timed_out)
    return "did not finish in " + std::to_string(timeout.count()) +
           " ms; it was killed";
  if (cancelled)
    return "was stopped";
  if (!status)
    return "ended in an unknown way (reaped elsewhere)";
  if (WIFSIGNALED(*status))
    return "crashed (" + signal_name(WTERMSIG(*status)) + ")";
  if (WIFEXITED(*status) && WEXITSTATUS(*status) != 0)
    return "exited with status " + std::to_string(WEXITSTATUS(*status));
  return {};
}

namespace {

// Starts `program` with `placed[i]` at descriptor i (each a descriptor
// above high_fd; -1: /dev/null) and every other descriptor closed, with
// default signal dispositions and mask, whatever the embedding program set.
pid_t spawn_placed(const std::string& program,
                   const std::vector<std::string>& args,
                   const std::vector<int>& placed, std::string& why) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  for (size_t i = 0; i < placed.size(); ++i) {
    if (placed[i] >= 0)
      posix_spawn_file_actions_adddup2(&actions, placed[i], int(i));
    else
      posix_spawn_file_actions_addopen(&actions, int(i), "/dev/null", O_RDWR,
                                       0);
  }
  posix_spawn_file_actions_addclosefrom_np(&actions, int(placed.size()));
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t all, none;
  sigfillset(&all);
  sigemptyset(&none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
  std::vector<std::string> all_args{program};
  all_args.insert(all_args.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all_args)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  int rc = ::posix_spawn(&pid, program.c_str(), &actions, &attr, argv.data(),
                         environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    why = program + ": " + std::strerror(rc);
    return -1;
  }
  return pid;
}

// The thread that starts long-lived helpers. A helper's death signal
// (PR_SET_PDEATHSIG) comes when the *thread* that started it ends, not the
// process: helpers started from an actor's thread would die with that
// actor. This thread lives as long as the process (never joined; its
// state is never destroyed, so that no static destructor runs under it).
class spawner {
public:
  static spawner& get() {
    static auto* s = new spawner;
    return *s;
  }

  pid_t spawn(const std::string& program, const std::vector<std::string>& args,
              const std::vector<int>& placed, std::string& why) {
    job j{program, args, placed, -1, {}, false};
    std::unique_lock guard{mtx_};
    jobs_.push_back(&j);
    wake_.notify_all();
    done_.wait(guard, [&] { return j.done; });
    why = j.why;
    return j.pid;
  }

private:
  struct job {
    const std::string& program;
    const std::vector<std::string>& args;
    const std::vector<int>& placed;
    pid_t pid = -1;
    std::string why;
    bool done = false;
  };

  spawner() {
    std::thread{[this] { loop(); }}.detach();
  }

  void loop() {
    std::unique_lock guard{mtx_};
    for (;;) {
      wake_.wait(guard, [&] { return !jobs_.empty(); });
      auto* j = jobs_.front();
      jobs_.pop_front();
      guard.unlock();
      std::string why;
      auto pid = spawn_placed(j->program, j->args, j->placed, why);
      guard.lock();
      j->pid = pid;
      j->why = std::move(why);
      j->done = true;
      done_.notify_all();
    }
  }

  std::mutex mtx_;
  std::condition_variable wake_;
  std::condition_variable done_;
  std::deque<job*> jobs_;
};

} // namespace

pid_t start_helper(const std::string& program,
                   const std::vector<std::string>& args,
                   const std::vector<int>& fds, std::string& why) {
  std::vector<fd_guard> high;
  std::vector<int> placed;
  for (int fd : fds) {
    if (fd < 0) {
      placed.push_back(-1);
      continue;
    }
    auto copy = high_copy(fd, why);
    if (copy.fd < 0)
      return -1;
    placed.push_back(copy.fd);
    high.push_back(std::move(copy));
  }
  return spawner::get().spawn(program, args, placed, why);
}

std::optional<int> kill_and_reap(pid_t pid) noexcept {
  if (pid <= 0)
    return std::nullopt;
  ::kill(pid, SIGKILL);
  // A child in uninterruptible sleep (a driver call on a GPU that fell off
  // the bus) dies only when that call returns: it is waited for a moment,
  // then left to a thread of its own to reap.
  for (int i = 0; i < 500; ++i) {
    int st = 0;
    auto r = ::waitpid(pid, &st, WNOHANG);
    if (r == pid)
      return st;
    if (r < 0 && errno != EINTR)
      return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds{10});
  }
  try {
    std::thread{[pid] {
      int ignored = 0;
      while (::waitpid(pid, &ignored, 0) < 0 && errno == EINTR) {
      }
    }}.detach();
  } catch (const std::system_error&) {
    // No thread to spare: it stays a zombie until this process ends.
  }
  return std::nullopt;
}

child_end run_child(const child_request& req) {
  child_end end;
  std::string why;
  auto in = high_file(req.label + ":input", req.input, why);
  auto out = high_file(req.label + ":output", {}, why);
  auto err = high_file(req.label + ":stderr", {}, why);
  std::vector<fd_guard> fds;
  for (int fd : req.fds)
    if (auto high = high_copy(fd, why); high.fd >= 0)
      fds.push_back(std::move(high));
  if (in.fd < 0 || out.fd < 0 || err.fd < 0 || fds.size() != req.fds.size()) {
    end.spawn_error = why;
    return end;
  }
  std::vector<int> placed{in.fd, out.fd, err.fd};
  for (auto& f : fds)
    placed.push_back(f.fd);
  pid_t pid = spawn_placed(req.program, req.args, placed, why);
  if (pid < 0) {
    end.spawn_error = why;
    return end;
  }
  wait_for(pid, req, end);
  end.output = read_head(out.fd, req.max_output);
  end.stderr_tail = file_tail(err.fd, stderr_tail_bytes);
  return end;
}

} // namespace cohort::ipc
