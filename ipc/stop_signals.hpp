// SIGINT and SIGTERM as a request to stop, for the commands that run until
// they are told (`cohort serve`, `cohort device-host`): the first one starts
// the stop, later ones are reported and never cut it short.
#pragma once

#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

namespace cohort::ipc {

/// Turns SIGINT and SIGTERM into a request to stop. Make it first in the
/// command, before any thread is started: it blocks both signals in the
/// calling thread (threads started later inherit the mask) and takes them
/// on a thread of its own through a handler.
///
/// Why a handler and not only a blocked mask and sigwait: threads that a
/// library starts while the program loads (OpenBLAS's pool) never saw the
/// mask, and the kernel may hand a process's signal to any thread that does
/// not block it; with the default action that kills the whole process, and
/// GNU `timeout` sends SIGTERM twice (to the program and to its group). The
/// handler writes the signal's number into a pipe whichever thread it runs
/// on; the first one ends wait(); each later one is written to standard
/// error as "`who`: already stopping (...)", and the stop goes on to its
/// summary. SIGKILL is what stops at once.
///
/// One per process at a time. Thread-safe: wait() from one thread.
class stop_signals {
public:
  /// `who` names the command in the messages ("cohort serve").
  explicit stop_signals(std::string who);
  /// Later signals are then ignored (the process is ending; the calling
  /// thread keeps them blocked); the handler's pipe is closed.
  ~stop_signals();
  stop_signals(const stop_signals&) = delete;
  stop_signals& operator=(const stop_signals&) = delete;

  /// Blocks until the first signal and returns its number, or returns 0
  /// when `seconds` (> 0) pass first; `seconds` <= 0 waits without end.
  int wait(double seconds = 0);

  /// The signals received after the first.
  int later() const;

private:
  void watch();

  std::string who_;
  int pipe_[2] = {-1, -1};
  std::thread watcher_;
  mutable std::mutex mtx_;
  std::condition_variable cv_;
  int first_ = 0;
  int later_ = 0;
};

} // namespace cohort::ipc
