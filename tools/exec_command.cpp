#include "tools/exec_command.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <thread>

#include "devices/gpu/plugin.hpp"
#include "exec/exec_wire.hpp"
#include "exec/session_client.hpp"
#include "messages/errc.hpp"
#include "tools/strict_numbers.hpp"

#ifndef COHORT_BUILD_ROOT
#define COHORT_BUILD_ROOT ""
#endif

namespace cohort::tools {

namespace fs = std::filesystem;

namespace {

constexpr const char* who = "cohort exec";
constexpr const char* shim_file = "libcohort-exec-shim.so";

// The program's pid, for the signal handlers.
std::atomic<pid_t> child{0};

// What would end `cohort exec` goes to the program instead: it ends, and
// then so does this.
void forward(int sig) {
  if (auto pid = child.load(); pid > 0)
    ::kill(pid, sig);
}

} // namespace

std::string exec_shim_path() {
  auto dirs = devices::gpu::plugin_dirs();
  // Only a program inside its own build tree looks there.
  std::string root = COHORT_BUILD_ROOT;
  std::error_code self_ec;
  auto self = fs::read_symlink("/proc/self/exe", self_ec).string();
  if (!root.empty() && !self_ec && self.rfind(root + "/", 0) == 0)
    dirs.push_back(root + "/exec");
  for (auto& dir : dirs) {
    std::error_code ec;
    auto path = fs::path{dir} / shim_file;
    if (fs::is_regular_file(path, ec))
      return fs::absolute(path, ec).string();
  }
  return {};
}

int cmd_exec(const exec_cli& c) {
  auto limit = parse_bytes("--limit", c.limit, uint64_t{1} << 50);
  if (!limit || *limit == 0) {
    std::fprintf(stderr, "%s: %s\n", who,
                 limit ? "--limit must be above 0"
                       : describe(limit.error()).c_str());
    return exit_bad_input;
  }
  auto socket = c.socket;
  if (socket.empty()) {
    auto* env = std::getenv(exec::socket_env);
    socket = env != nullptr && *env != '\0' ? env : default_exec_socket;
  }
  std::error_code ec;
  auto absolute = fs::absolute(socket, ec);
  if (!ec)
    socket = absolute.string();
  auto shim = exec_shim_path();
  if (shim.empty()) {
    std::fprintf(stderr,
                 "%s: the allocation shim (%s) is in none of the folders "
                 "GPU plugins are looked for in; set COHORT_PLUGIN_PATH\n",
                 who, shim_file);
    return exit_failed;
  }
  auto session = exec::open_session(socket, c.tenant, *limit);
  if (!session) {
    std::fprintf(stderr, "%s: no session: %s\n", who,
                 describe(session.error()).c_str());
    return code_of(session.error()) == errc::invalid_arguments ? exit_bad_input
                                                               : exit_failed;
  }
  // The program's environment: the shim first in LD_PRELOAD, and the
  // session's socket and token. The session's own connection is
  // close-on-exec: the program cannot end or reopen it.
  std::string preload = shim;
  if (auto* old = std::getenv("LD_PRELOAD"); old != nullptr && *old != '\0')
    preload += std::string{":"} + old;
  std::vector<char*> argv;
  for (auto& a : c.command)
    argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  struct sigaction fwd {};
  fwd.sa_handler = forward;
  sigemptyset(&fwd.sa_mask);
  struct sigaction old_int {
  }, old_term{}, old_hup{}, old_quit{};
  sigaction(SIGINT, &fwd, &old_int);
  sigaction(SIGTERM, &fwd, &old_term);
  sigaction(SIGHUP, &fwd, &old_hup);
  sigaction(SIGQUIT, &fwd, &old_quit);
  auto pid = ::fork();
  if (pid < 0) {
    std::fprintf(stderr, "%s: fork: %s\n", who, std::strerror(errno));
    ::close(session->fd);
    return exit_failed;
  }
  if (pid == 0) {
    sigaction(SIGINT, &old_int, nullptr);
    sigaction(SIGTERM, &old_term, nullptr);
    sigaction(SIGHUP, &old_hup, nullptr);
    sigaction(SIGQUIT, &old_quit, nullptr);
    ::setenv("LD_PRELOAD", preload.c_str(), 1);
    ::setenv(exec::socket_env, socket.c_str(), 1);
    ::setenv(exec::token_env, session->token.c_str(), 1);
    ::execvp(argv[0], argv.data());
    std::fprintf(stderr, "%s: cannot run '%s': %s\n", who, argv[0],
                 std::strerror(errno));
    ::_exit(127);
  }
  child = pid;
  // The session stays wanted while the program runs, allocating or not: a
  // keepalive every third of the node's idle timeout.
  std::mutex mtx;
  std::condition_variable cv;
  bool done = false;
  std::thread keeper{[&] {
    auto every =
        std::chrono::milliseconds{std::max<uint64_t>(10, session->idle_ms / 3)};
    std::unique_lock<std::mutex> guard{mtx};
    while (!cv.wait_for(guard, every, [&] { return done; })) {
      if (auto err = exec::keepalive(*session)) {
        std::fprintf(stderr,
                     "%s: the node ended the session (%s); the program's "
                     "allocations that need more memory are refused\n",
                     who, describe(err).c_str());
        return;
      }
    }
  }};
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  child = 0;
  {
    std::lock_guard<std::mutex> guard{mtx};
    done = true;
  }
  cv.notify_all();
  keeper.join();
  ::close(session->fd);
  if (WIFSIGNALED(status))
    return 128 + WTERMSIG(status);
  return WIFEXITED(status) ? WEXITSTATUS(status) : exit_failed;
}

} // namespace cohort::tools
