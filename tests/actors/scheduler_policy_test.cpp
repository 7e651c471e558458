// Cohort's scheduling policy (messages/latency_stealing.hpp): loaded by
// default, CAF's own on request, and no job from outside is lost whether
// the workers poll or sleep.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include <caf/all.hpp>
#include <caf/scheduler/coordinator.hpp>

#include "messages/cohort.pb.h"
#include "messages/latency_stealing.hpp"
#include "messages/system_config.hpp"

using namespace cohort;

namespace {

using latency_coordinator = caf::scheduler::coordinator<latency_stealing>;
using caf_coordinator = caf::scheduler::coordinator<caf::policy::work_stealing>;

template <class T> bool runs_on(caf::actor_system& sys) {
  return dynamic_cast<T*>(&sys.scheduler()) != nullptr;
}

} // namespace

TEST_CASE("the runtime's scheduler is Cohort's unless CAF's is asked for",
          "[actors][scheduler]") {
  system_config plain;
  caf::actor_system sys{plain};
  CHECK(runs_on<latency_coordinator>(sys));
  pb::RuntimeConfig cfg;
  cfg.mutable_scheduler()->set_policy("caf_stealing");
  system_config caf_cfg{cfg};
  caf::actor_system sys2{caf_cfg};
  CHECK(runs_on<caf_coordinator>(sys2));
  CHECK_FALSE(runs_on<latency_coordinator>(sys2));
  cfg.mutable_scheduler()->set_policy("sharing");
  system_config sharing_cfg{cfg};
  caf::actor_system sys3{sharing_cfg};
  CHECK_FALSE(runs_on<latency_coordinator>(sys3));
  CHECK_FALSE(runs_on<caf_coordinator>(sys3));
}

TEST_CASE("jobs from outside reach polling and sleeping workers alike",
          "[actors][scheduler]") {
  pb::RuntimeConfig cfg;
  // Workers that give up polling at once and sleep briefly: most jobs from
  // outside find them asleep, some polling.
  auto* s = cfg.mutable_scheduler();
  s->set_threads(3);
  s->set_aggressive_poll_attempts(1);
  s->set_moderate_poll_attempts(1);
  s->set_relaxed_sleep_us(500);
  system_config sys_cfg{cfg};
  caf::actor_system sys{sys_cfg};
  REQUIRE(runs_on<latency_coordinator>(sys));
  std::atomic<int> seen{0};
  // With an argument: CAF spawns a function without one through a null
  // tuple pointer (undefined behaviour that UBSan reports).
  auto counter = sys.spawn(
      [](caf::event_based_actor*, std::atomic<int>* n) -> caf::behavior {
        return {[n](int) { n->fetch_add(1, std::memory_order_relaxed); }};
      },
      &seen);
  // Four threads outside the scheduler send bursts with pauses between
  // them, long enough for the workers to fall asleep.
  constexpr int threads = 4, bursts = 20, per_burst = 250;
  std::vector<std::thread> senders;
  for (int t = 0; t < threads; ++t)
    senders.emplace_back([&] {
      for (int b = 0; b < bursts; ++b) {
        for (int i = 0; i < per_burst; ++i)
          caf::anon_send(counter, i);
        std::this_thread::sleep_for(std::chrono::microseconds(700));
      }
    });
  for (auto& t : senders)
    t.join();
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (seen.load() < threads * bursts * per_burst &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  CHECK(seen.load() == threads * bursts * per_burst);
  caf::anon_send_exit(counter, caf::exit_reason::user_shutdown);
}
