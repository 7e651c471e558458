// The public API's side of the dispatch benchmark (<cohort/cohort.hpp>):
// the same runtime, workload and window as run_cohort's actor client, driven
// through futures or callbacks from a plain thread, then run() one at a time.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <future>
#include <vector>

#include <unistd.h>

#include <cohort/cohort.hpp>

#include "bench/dispatch/dispatch.hpp"

namespace cohort::bench {

namespace {

using clock = std::chrono::steady_clock;

bool right(const outcome& o) {
  return o.ok() && o->values.size() == 1 &&
         o->values.view<float>()[0] == 1024.0f;
}

// reduce_sum as an application registers it: the same sum, in double.
kernel registered_sum() {
  static kernel k = [] {
    kernel_definition d;
    d.name = "bench.reduce_sum";
    d.inputs = {{"x", dtype::f32}};
    d.output_size = [](const kernel_args&, std::span<const uint64_t>) {
      return uint64_t{1};
    };
    d.flops = [](const kernel_args&, std::span<const uint64_t> in) {
      return double(in[0]);
    };
    d.cpu = [](const kernel_args&, std::span<const buffer> in,
               output_span out) {
      // Four lanes, as the built-in CPU reduction sums: the same
      // arithmetic, so the figure is the registry's path alone.
      auto x = in[0].view<float>();
      double acc[4] = {0, 0, 0, 0};
      size_t i = 0;
      for (; i + 4 <= x.size(); i += 4)
        for (size_t l = 0; l < 4; ++l)
          acc[l] += x[i + l];
      for (; i < x.size(); ++i)
        acc[0] += x[i];
      double s = (acc[0] + acc[1]) + (acc[2] + acc[3]);
      out.as<float>()[0] = float(s);
    };
    return register_kernel(std::move(d));
  }();
  return k;
}

} // namespace

dispatch_figures run_public(int tasks, int workers, int window,
                            int latency_samples, bool callbacks,
                            bool registered) {
  dispatch_figures out;
  out.system = callbacks    ? "cohort public callback"
               : registered ? "cohort public registered"
                            : "cohort public future";
  auto audit = std::filesystem::temp_directory_path() /
               ("cohort-bench-public-" + std::to_string(::getpid()) + ".log");
  options opts;
  opts.config_text = "devices { cpu_workers: " + std::to_string(workers) +
                     " gpus: false } tenant { tenant: \"default\" kernels: "
                     "\"*\" devices: \"*\" max_inflight: " +
                     std::to_string(window) + " }";
  opts.audit_path = audit.string();
  try {
    auto rt = runtime::start(opts);
    buffer data{std::vector<float>(1024, 1.0f)};
    auto make = [&](uint64_t id) {
      work w;
      w.id = id;
      w.kernel = registered ? registered_sum() : kernel::reduce_sum;
      w.inputs = {data};
      return w;
    };
    std::atomic<uint64_t> wrong{0};
    auto start = clock::now();
    if (callbacks) {
      // Each end submits the next item from the callback thread.
      std::atomic<uint64_t> sent{0};
      std::atomic<uint64_t> ended{0};
      std::promise<void> finished;
      std::function<void(outcome)> on_end = [&](outcome o) {
        wrong += !right(o);
        auto next = sent.fetch_add(1) + 1;
        if (next <= uint64_t(tasks))
          rt.submit(make(next), on_end);
        if (ended.fetch_add(1) + 1 == uint64_t(tasks))
          finished.set_value();
      };
      auto first = uint64_t(std::min(window, tasks));
      sent = first;
      for (uint64_t i = 1; i <= first; ++i)
        rt.submit(make(i), on_end);
      finished.get_future().wait();
    } else {
      // A window of futures, the oldest waited for first.
      std::deque<future> inflight;
      uint64_t sent = 0;
      for (; sent < uint64_t(std::min(window, tasks)); ++sent)
        inflight.push_back(rt.submit(make(sent + 1)));
      while (!inflight.empty()) {
        wrong += !right(inflight.front().wait());
        inflight.pop_front();
        if (sent < uint64_t(tasks))
          inflight.push_back(rt.submit(make(++sent)));
      }
    }
    double secs = std::chrono::duration<double>(clock::now() - start).count();
    out.tasks_per_s = tasks / secs;
    std::vector<double> lat;
    for (int i = 0; i < latency_samples; ++i) {
      auto t0 = clock::now();
      auto o = rt.run(make(uint64_t(tasks + i + 1)));
      lat.push_back(
          std::chrono::duration<double, std::micro>(clock::now() - t0).count());
      wrong += !right(o);
    }
    out.p50_us = percentile(lat, 50);
    out.p99_us = percentile(lat, 99);
    if (wrong > 0)
      out.error = std::to_string(wrong.load()) + " wrong or failed results";
    rt.stop();
  } catch (const error& e) {
    out.error = e.what();
  }
  std::filesystem::remove(audit);
  return out;
}

} // namespace cohort::bench
