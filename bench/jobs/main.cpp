// bench/jobs: job control (docs/jobs.md) on one simulated GPU with one
// stream. Reports, each over the runs, interleaved:
//   - cancel latency of a held, a queued and a running item: from the
//     cancel call (runtime::cancel_items by job, as the API and the admin
//     API make it) to the item's end reaching its client (median and p99,
//     microseconds). A running item ends when its launch does: its figure
//     is the rest of its launch (launches of --launch-us), which the cancel
//     cannot shorten;
//   - priority: how long an item of priority 1 waits behind --queue items
//     of priority 0 of its tenant, against one more item of priority 0:
//     all wait for the device, then it comes back (milliseconds from then
//     to that item's end, and to the end of the last of the others).
//
//   bench_jobs [--cancels N] [--runs N] [--queue N] [--launch-us N]
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "actors/runtime.hpp"
#include "messages/system_config.hpp"

using namespace cohort;
using clock_type = std::chrono::steady_clock;

namespace {

double percentile(std::vector<double> v, double p) {
  if (v.empty())
    return 0;
  std::sort(v.begin(), v.end());
  auto i = size_t(p * double(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

// A directory for the runs' audit logs (main makes and removes it).
std::string audit_dir;

// One simulated GPU with one stream, launches of `launch_us`; tenant t with
// `held` set: one item at a time, the others held.
pb::RuntimeConfig config(uint32_t launch_us, bool held) {
  pb::RuntimeConfig cfg;
  cfg.mutable_devices()->set_cpu_workers(0);
  cfg.mutable_devices()->set_gpus(false);
  auto* g = cfg.mutable_devices()->add_sim_gpu();
  g->set_name("sim0");
  g->set_memory_mib(1024);
  g->set_streams(1);
  g->set_speed(1.0);
  g->set_launch_latency_us(launch_us);
  auto* t = cfg.add_tenant();
  t->set_tenant("t");
  t->add_kernels("*");
  t->add_devices("*");
  t->set_max_inflight(100000);
  if (held) {
    t->set_max_inflight(1);
    t->set_on_limit(pb::QUEUE);
    t->set_queue_timeout_ms(600000);
    t->set_queue_limit(100000);
  }
  // Each runtime its own audit log, in a directory removed at exit.
  static int runtimes = 0;
  cfg.set_audit_path(audit_dir + "/audit-" + std::to_string(++runtimes) +
                     ".log");
  return cfg;
}

work_item item(uint64_t id, int32_t priority = 0) {
  work_item w;
  w.id = id;
  w.tenant = "t";
  w.kernel = kernels::kernel_id::reduce_sum;
  w.inputs.emplace_back(std::vector<float>(256, 1.0f));
  w.priority = priority;
  return w;
}

// When each item's end reached its client.
struct ends {
  std::mutex mx;
  std::condition_variable cv;
  std::vector<clock_type::time_point> at;
  size_t count = 0;

  explicit ends(size_t n) : at(n) {}

  actors::work_callback slot(size_t i) {
    return [this, i](caf::expected<work_result>) {
      std::lock_guard<std::mutex> guard{mx};
      at[i] = clock_type::now();
      ++count;
      cv.notify_all();
    };
  }

  bool wait(size_t n, std::chrono::seconds limit = std::chrono::seconds{60}) {
    std::unique_lock<std::mutex> guard{mx};
    return cv.wait_for(guard, limit, [&] { return count >= n; });
  }

  clock_type::time_point of(size_t i) {
    std::lock_guard<std::mutex> guard{mx};
    return at[i];
  }
};

// Takes sim0 offline and waits until the balancer knows (items submitted
// before it hears of it could still go there).
void take_offline(actors::runtime& r) {
  if (auto err = r.set_offline("sim0")) {
    std::fprintf(stderr, "bench_jobs: %s\n", to_string(err).c_str());
    std::exit(1);
  }
  for (int k = 0; k < 10000; ++k) {
    if (auto st = r.placement_stats())
      for (auto& d : st->devices)
        if (d.name == "sim0" && d.status == device_status::offline)
          return;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::fprintf(stderr, "bench_jobs: sim0 did not go offline\n");
  std::exit(1);
}

// The job numbers of the live items, in job order.
std::vector<uint64_t> jobs(actors::runtime& rt) {
  std::vector<uint64_t> out;
  if (auto xs = rt.items())
    for (auto& v : *xs)
      out.push_back(v.job);
  std::sort(out.begin(), out.end());
  return out;
}

// Cancels `n` items waiting (held, or queued behind an offline device) one
// at a time: microseconds from each cancel to its end.
std::vector<double> cancel_waiting(caf::actor_system& sys, bool held_items,
                                   size_t n) {
  auto rt = actors::runtime::start(sys, config(1000, held_items));
  if (!rt) {
    std::fprintf(stderr, "bench_jobs: %s\n", to_string(rt.error()).c_str());
    std::exit(1);
  }
  auto& r = **rt;
  // Nothing runs: every item waits for sim0.
  take_offline(r);
  ends e{n};
  for (size_t i = 0; i < n; ++i)
    r.submit(item(i + 1), e.slot(i));
  std::vector<uint64_t> live;
  for (int k = 0; k < 5000 && (live = jobs(r)).size() < n; ++k)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::vector<double> out;
  for (size_t i = 0; i < n && i < live.size(); ++i) {
    item_filter f;
    f.job = live[i];
    auto t0 = clock_type::now();
    auto got = r.cancel_items(f, "bench");
    if (!got || *got != 1 || !e.wait(i + 1))
      continue;
    // Jobs are numbered in submission order: job i + 1 is item i.
    out.push_back(
        std::chrono::duration<double, std::micro>(e.of(i) - t0).count());
  }
  return out;
}

// Cancels `n` running items, each at a random point of its launch:
// microseconds from the cancel to its end.
std::vector<double> cancel_running(caf::actor_system& sys, uint32_t launch_us,
                                   size_t n) {
  auto rt = actors::runtime::start(sys, config(launch_us, false));
  if (!rt)
    std::exit(1);
  auto& r = **rt;
  std::vector<double> out;
  srand(7);
  for (size_t i = 0; i < n; ++i) {
    ends e{1};
    r.submit(item(i + 1), e.slot(0));
    uint64_t job = 0;
    for (int k = 0; k < 5000 && job == 0; ++k) {
      if (auto xs = r.items())
        for (auto& v : *xs)
          if (v.state == "running")
            job = v.job;
      if (job == 0)
        std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    if (job == 0)
      continue;
    std::this_thread::sleep_for(
        std::chrono::microseconds(rand() % std::max(1u, launch_us / 2)));
    item_filter f;
    f.job = job;
    auto t0 = clock_type::now();
    auto got = r.cancel_items(f, "bench");
    if (!got || *got != 1 || !e.wait(1))
      continue;
    out.push_back(
        std::chrono::duration<double, std::micro>(e.of(0) - t0).count());
  }
  return out;
}

// With the device offline, submits `queue` items of priority 0, then one
// of `priority`, and brings the device online: milliseconds from then to
// that last one's end, and to the end of the last of the others.
std::pair<double, double> wait_behind(caf::actor_system& sys, size_t queue,
                                      int32_t priority) {
  auto rt = actors::runtime::start(sys, config(100, false));
  if (!rt)
    std::exit(1);
  auto& r = **rt;
  take_offline(r);
  ends e{queue + 1};
  std::vector<work_item> batch;
  for (size_t i = 0; i < queue; ++i)
    batch.push_back(item(i + 1));
  r.submit(std::move(batch), [&e](uint64_t id, caf::expected<work_result> x) {
    e.slot(size_t(id - 1))(std::move(x));
  });
  // All of them wait before the last comes.
  for (int k = 0; k < 5000 && jobs(r).size() < queue; ++k)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  r.submit(item(queue + 1, priority), e.slot(queue));
  for (int k = 0; k < 5000 && jobs(r).size() < queue + 1; ++k)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  auto t0 = clock_type::now();
  if (auto err = r.set_online("sim0")) {
    std::fprintf(stderr, "bench_jobs: %s\n", to_string(err).c_str());
    std::exit(1);
  }
  e.wait(queue + 1, std::chrono::seconds{120});
  auto last = t0;
  for (size_t i = 0; i < queue; ++i)
    last = std::max(last, e.of(i));
  return {std::chrono::duration<double, std::milli>(e.of(queue) - t0).count(),
          std::chrono::duration<double, std::milli>(last - t0).count()};
}

} // namespace

int main(int argc, char** argv) {
  size_t cancels = 200, queue = 2000;
  int runs = 3;
  uint32_t launch_us = 10000;
  for (int i = 1; i + 1 < argc; i += 2) {
    auto v = std::strtol(argv[i + 1], nullptr, 10);
    if (!std::strcmp(argv[i], "--cancels"))
      cancels = size_t(v);
    else if (!std::strcmp(argv[i], "--runs"))
      runs = int(v);
    else if (!std::strcmp(argv[i], "--queue"))
      queue = size_t(v);
    else if (!std::strcmp(argv[i], "--launch-us"))
      launch_us = uint32_t(v);
  }
  if (cancels == 0 || runs <= 0 || queue == 0 || launch_us == 0 ||
      argc % 2 == 0) {
    std::fprintf(stderr, "usage: bench_jobs [--cancels N] [--runs N] "
                         "[--queue N] [--launch-us N] (all positive)\n");
    return 2;
  }
  char tmpl[] = "/tmp/cohort-bench-jobs-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) {
    std::perror("bench_jobs: mkdtemp");
    return 1;
  }
  audit_dir = tmpl;
  struct remove_dir {
    ~remove_dir() {
      std::error_code ec;
      std::filesystem::remove_all(audit_dir, ec);
    }
  } cleanup;
  system_config scfg{config(launch_us, false)};
  caf::actor_system sys{scfg};
  std::printf("cancel latency, from the call to the item's end at its "
              "client (%zu cancels each; running: launches of %u us)\n",
              cancels, launch_us);
  std::printf("%-10s %4s %6s %10s %10s\n", "state", "run", "n", "p50 us",
              "p99 us");
  for (int run = 0; run < runs; ++run) {
    auto held = cancel_waiting(sys, true, cancels);
    std::printf("%-10s %4d %6zu %10.1f %10.1f\n", "held", run, held.size(),
                percentile(held, 0.5), percentile(held, 0.99));
    auto queued = cancel_waiting(sys, false, cancels);
    std::printf("%-10s %4d %6zu %10.1f %10.1f\n", "queued", run, queued.size(),
                percentile(queued, 0.5), percentile(queued, 0.99));
    auto running = cancel_running(sys, launch_us, cancels / 4);
    std::printf("%-10s %4d %6zu %10.1f %10.1f\n", "running", run,
                running.size(), percentile(running, 0.5),
                percentile(running, 0.99));
    std::fflush(stdout);
  }
  std::printf("\nan item behind %zu items of its tenant, all waiting for "
              "the device (launches of 100 us on one stream): ms from the "
              "device's return to its end\n",
              queue);
  std::printf("%-12s %4s %10s %16s\n", "priority", "run", "ms",
              "queue drained ms");
  for (int run = 0; run < runs; ++run)
    for (int32_t p : {0, 1}) {
      auto [mine, all] = wait_behind(sys, queue, p);
      std::printf("%-12d %4d %10.1f %16.1f\n", p, run, mine, all);
      std::fflush(stdout);
    }
  return 0;
}
