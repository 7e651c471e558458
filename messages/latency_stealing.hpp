// Cohort's scheduling policy for CAF's workers: CAF's work stealing, with
// one change for the latency of a job that comes from outside the scheduler
// (a client's submit, a GPU's completion).
//
// CAF gives such a job to its workers in turn, so on a machine with two
// workers half of them go to a worker that went to sleep and must be woken
// (tens of microseconds on a virtual machine) while the other one was
// polling for work. Here a job from outside goes to a worker that is polling
// (in its aggressive or moderate phase), if one is, and only otherwise to the
// next in turn (woken if asleep). Polling, stealing and sleeping are CAF's,
// with the same settings (`work-stealing.*`, cohort.pb.Scheduler).
#pragma once

#include <atomic>
#include <cstddef>
#include <mutex>
#include <thread>

#include <caf/policy/work_stealing.hpp>
#include <caf/resumable.hpp>
#include <caf/scheduler/abstract_coordinator.hpp>

namespace cohort {

class latency_stealing : public caf::policy::work_stealing {
public:
  using super = caf::policy::work_stealing;

  struct worker_data : super::worker_data {
    explicit worker_data(caf::scheduler::abstract_coordinator* p)
        : super::worker_data(p) {
      // nop
    }

    worker_data(const worker_data& other) : super::worker_data(other) {
      // nop
    }

    /// True while the worker polls for work: a job given to it starts
    /// without a wake-up.
    std::atomic<bool> polling{false};
  };

  /// A job from outside the scheduler: to the first worker in turn that is
  /// polling; if none is, to the next in turn.
  template <class Coordinator>
  void central_enqueue(Coordinator* self, caf::resumable* job) {
    auto n = self->num_workers();
    auto first = d(self).next_worker++ % n;
    for (size_t i = 0; i < n; ++i) {
      auto* w = self->worker_by_id((first + i) % n);
      if (d(w).polling.load(std::memory_order_acquire)) {
        w->external_enqueue(job);
        return;
      }
    }
    self->worker_by_id(first)->external_enqueue(job);
  }

  /// CAF's: poll (aggressive, then moderate), then sleep until a job
  /// arrives or the relaxed sleep ends; the worker counts as polling until
  /// it sleeps.
  template <class Worker> caf::resumable* dequeue(Worker* self) {
    auto& wd = d(self);
    auto& phases = wd.strategies;
    wd.polling.store(true, std::memory_order_release);
    caf::resumable* job = nullptr;
    for (size_t k = 0; k < 2 && job == nullptr; ++k) {
      auto& p = phases[k];
      for (size_t i = 0; i < p.attempts; i += p.step_size) {
        if ((job = wd.queue.take_head()) != nullptr)
          break;
        if (i % p.steal_interval == 0 &&
            (job = this->try_steal(self)) != nullptr)
          break;
        if (p.sleep_duration.count() > 0)
          std::this_thread::sleep_for(p.sleep_duration);
      }
    }
    wd.polling.store(false, std::memory_order_release);
    auto& wait = wd.waitdata;
    for (size_t i = 1; job == nullptr; ++i) {
      {
        std::unique_lock<std::mutex> guard{wait.lock};
        wait.sleeping = true;
        wait.cv.wait_for(guard, phases[2].sleep_duration,
                         [&] { return !wd.queue.empty(); });
        wait.sleeping = false;
      }
      job = wd.queue.take_head();
      if (job == nullptr && i % phases[2].steal_interval == 0)
        job = this->try_steal(self);
    }
    return job;
  }
};

} // namespace cohort
