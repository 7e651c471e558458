// Helper programs the node runs in a child process of their own (the
// isolated load of a kernel bundle, a scan of the machine's GPUs): started
// with default signal dispositions, their input and output in anonymous
// memory files (no pipe to keep drained), killed past a deadline, always
// reaped. What a helper does in its process (a driver that hangs, a
// constructor that crashes) costs the node nothing.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace cohort::ipc {

/// An anonymous memory file (memfd, close-on-exec) holding `bytes`, its
/// offset at 0; with `sealed`, sealed against every change (write, shrink,
/// grow, more seals): a child it is handed to cannot change what others
/// read. Returns the descriptor (the caller closes it), or -1 with `why`
/// set.
int memory_file(const char* label, const std::string& bytes, std::string& why,
                bool sealed = false);

/// The last `limit` bytes of the file `fd`, trailing newlines and blanks
/// trimmed (what a child wrote to its standard error).
std::string file_tail(int fd, size_t limit);

/// One run of a helper.
struct child_request {
  /// The program's path and its arguments after argv[0].
  std::string program;
  std::vector<std::string> args;
  /// Its standard input.
  std::string input;
  /// Descriptors it gets at 3, 4, ... in this order (the caller keeps and
  /// closes its own).
  std::vector<int> fds;
  /// Past it, the child is killed.
  std::chrono::milliseconds timeout{60'000};
  /// Asked now and then while it runs (may be empty): true kills it (the
  /// node is stopping).
  std::function<bool()> cancelled;
  /// What of its standard output is kept.
  size_t max_output = size_t{4} << 20;
  /// Names its memory files (for /proc/PID/fd readers).
  std::string label = "cohort-child";
};

/// How it ended.
struct child_end {
  /// Why it could not be started (empty when it was).
  std::string spawn_error;
  /// Killed at the deadline, or because `cancelled` said so.
  bool timed_out = false;
  bool cancelled = false;
  /// waitpid's status; unset when it timed out, did not start, or was
  /// reaped by someone else (SIGCHLD ignored).
  std::optional<int> status;
  /// Its standard output (up to max_output) and the end of its standard
  /// error (trailing blanks trimmed).
  std::string output;
  std::string stderr_tail;

  /// Started, not killed, and exited with status 0.
  bool clean() const;
  /// How it ended in words when not clean: "crashed (SIGSEGV)", "exited
  /// with status 3", "did not finish in N ms; it was killed", "was
  /// stopped", "could not be started: ...", "ended in an unknown way";
  /// empty when clean.
  std::string describe(std::chrono::milliseconds timeout) const;
};

/// Runs `req` and waits for it. Never throws; thread-safe.
child_end run_child(const child_request& req);

/// Starts a helper that keeps running (a kernel host,
/// kernels/bundle/kernel_host.hpp) with `fds[i]` at descriptor i (-1:
/// /dev/null there; the caller keeps and closes its own) and every other
/// descriptor closed, with default signal dispositions and mask. It is
/// started from a thread that lives as long as the process: the death
/// signal a helper asks for (enter_helper) comes when the thread that
/// started it ends, which must be the process's end and not that of the
/// actor that happened to need it. Returns its pid, or -1 with `why` set.
/// The caller reaps it (kill_and_reap). Thread-safe.
pid_t start_helper(const std::string& program,
                   const std::vector<std::string>& args,
                   const std::vector<int>& fds, std::string& why);

/// Kills `pid` (SIGKILL) and reaps it: its wait status, or none when it
/// was not reaped within 5 s (a child in uninterruptible sleep; a thread of
/// its own reaps it later) or by someone else. Does nothing for pid <= 0.
std::optional<int> kill_and_reap(pid_t pid) noexcept;

/// The start of a helper's main, its side of run_child: it takes `--parent
/// PID` (run_child's caller passes its pid), dies with that parent (which
/// may be PID 1 in a container), leaves no core file and ends by the
/// signal of a crash, whatever handlers a sanitizer runtime installed.
/// Returns -1 to go on, else the status to exit with: 2 (and `usage`, what
/// follows the program's name and `--parent PID`, and `about` on standard
/// error) for other arguments, 3 when the parent is gone already.
int enter_helper(int argc, char** argv, const char* usage, const char* about);

/// "SIGSEGV" for SIGSEGV, "signal N" for a number without a name.
std::string signal_name(int sig);

} // namespace cohort::ipc
