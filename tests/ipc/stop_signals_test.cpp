// ipc::stop_signals in this process: the first SIGTERM ends wait(), later
// ones are counted and do not kill, a wait with a time limit ends without
// one. (tests/tools/serve_test.cpp sends `cohort serve` several.)
#include <catch2/catch.hpp>

#include <chrono>
#include <csignal>
#include <thread>

#include <unistd.h>

#include "ipc/stop_signals.hpp"

using namespace std::chrono_literals;

TEST_CASE("stop signals: the first ends the wait, later ones are counted",
          "[ipc]") {
  {
    cohort::ipc::stop_signals stop{"stop_signals_test"};
    CHECK(stop.wait(0.05) == 0);
    // From another thread, as a signal from outside may land on any thread.
    std::thread sender{[] { ::kill(::getpid(), SIGTERM); }};
    CHECK(stop.wait() == SIGTERM);
    sender.join();
    CHECK(stop.wait(0.01) == SIGTERM);
    ::kill(::getpid(), SIGINT);
    ::kill(::getpid(), SIGTERM);
    for (int i = 0; i < 500 && stop.later() < 2; ++i)
      std::this_thread::sleep_for(2ms);
    // Still alive, and both were seen.
    CHECK(stop.later() == 2);
    CHECK(stop.wait() == SIGTERM);
  }
  // Once it is gone they are ignored (this thread still blocks them, so
  // Linux keeps one pending: taken here before this process gets its
  // defaults back).
  CHECK(::kill(::getpid(), SIGTERM) == 0);
  std::this_thread::sleep_for(20ms);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  timespec none{};
  while (sigtimedwait(&set, nullptr, &none) > 0) {
  }
  std::signal(SIGTERM, SIG_DFL);
  std::signal(SIGINT, SIG_DFL);
  pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
}
