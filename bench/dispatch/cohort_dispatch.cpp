// Cohort's side of the dispatch benchmark: the full runtime (quota actor,
// balancer, device actors, audit log on disk), a client keeping `window`
// items in flight with one-way messages.
#include <chrono>
#include <cstdio>
#include <filesystem>

#include <caf/all.hpp>

#include "actors/runtime.hpp"
#include "bench/dispatch/dispatch.hpp"
#include "messages/errc.hpp"
#include "messages/system_config.hpp"

namespace cohort::bench {

using clock = std::chrono::steady_clock;

dispatch_figures run_cohort(int tasks, int workers, int window,
                            int latency_samples) {
  dispatch_figures out;
  out.system = "cohort (quota+audit)";
  system_config sys_cfg;
  caf::actor_system sys{sys_cfg};
  auto cfg = actors::default_config();
  cfg.mutable_devices()->set_cpu_workers(uint32_t(workers));
  cfg.mutable_tenant(0)->set_max_inflight(uint32_t(window));
  auto audit = std::filesystem::temp_directory_path() /
               ("cohort-bench-" + std::to_string(::getpid()) + ".log");
  cfg.set_audit_path(audit);
  auto rt = actors::runtime::start(sys, cfg);
  if (!rt) {
    out.error = describe(rt.error());
    return out;
  }
  host_buffer data{std::vector<float>(1024, 1.0f)};
  auto make = [&](uint64_t id) {
    work_item item;
    item.id = id;
    item.tenant = "default";
    item.kernel = kernel_id::reduce_sum;
    item.inputs = {data};
    return item;
  };
  caf::scoped_actor self{sys};
  auto sink = caf::actor_cast<actors::client_sink>(self);
  auto entry = (*rt)->entry();
  uint64_t sent = 0, ended = 0, wrong = 0;
  auto start = clock::now();
  for (; sent < uint64_t(std::min(window, tasks)); ++sent)
    self->send(entry, submit_atom::value, make(sent + 1), sink);
  while (ended < uint64_t(tasks)) {
    self->receive(
        [&](result_atom, work_result& res) {
          wrong +=
              res.output.values.size() != 1 || res.output.values[0] != 1024.0f;
        },
        [&](failed_atom, uint64_t, caf::error&) { ++wrong; });
    ++ended;
    if (sent < uint64_t(tasks)) {
      ++sent;
      self->send(entry, submit_atom::value, make(sent), sink);
    }
  }
  double secs = std::chrono::duration<double>(clock::now() - start).count();
  out.tasks_per_s = tasks / secs;
  std::vector<double> lat;
  for (int i = 0; i < latency_samples; ++i) {
    auto t0 = clock::now();
    self->send(entry, submit_atom::value, make(uint64_t(tasks + i + 1)), sink);
    self->receive([&](result_atom, work_result&) {},
                  [&](failed_atom, uint64_t, caf::error&) { ++wrong; });
    lat.push_back(
        std::chrono::duration<double, std::micro>(clock::now() - t0).count());
  }
  out.p50_us = percentile(lat, 50);
  out.p99_us = percentile(lat, 99);
  if (auto n = (*rt)->flush_audit(); !n)
    out.error = describe(n.error());
  else if (*n < 3 * uint64_t(tasks))
    out.error = "audit log holds only " + std::to_string(*n) + " records";
  if (wrong > 0)
    out.error = std::to_string(wrong) + " wrong or failed results";
  (*rt)->stop();
  std::filesystem::remove(audit);
  return out;
}

} // namespace cohort::bench
