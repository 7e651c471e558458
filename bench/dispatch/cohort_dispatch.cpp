// Cohort's side of the dispatch benchmark: the full runtime (quota actor,
// balancer, device actors, audit log on disk with its default fsync policy),
// a client keeping `window` items in flight with one-way messages, then one
// `runtime::run` at a time for latency.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <future>

#include <caf/all.hpp>

#include "actors/runtime.hpp"
#include "bench/dispatch/dispatch.hpp"
#include "messages/errc.hpp"
#include "messages/system_config.hpp"
#include "tools/scheduler_arg.hpp"

namespace cohort::bench {

using clock = std::chrono::steady_clock;

dispatch_figures run_cohort(int tasks, cohort_fleet fleet, int window,
                            int latency_samples) {
  dispatch_figures out;
  out.system = "cohort (quota+audit)";
  auto cfg = actors::default_config();
  if (auto err = fleet.scheduler.empty()
                     ? caf::error{}
                     : tools::apply_scheduler_arg(cfg, fleet.scheduler)) {
    out.error = describe(err);
    return out;
  }
  system_config sys_cfg{cfg};
  caf::actor_system sys{sys_cfg};
  cfg.mutable_devices()->set_cpu_workers(uint32_t(fleet.cpu_workers));
  // Only the devices asked for, also on a machine with a GPU.
  cfg.mutable_devices()->set_gpus(false);
  for (int i = 0; i < fleet.sim_gpus; ++i) {
    auto* g = cfg.mutable_devices()->add_sim_gpu();
    g->set_name("sim" + std::to_string(i));
    g->set_memory_mib(1024);
    g->set_streams(2);
    g->set_speed(1 + i % 4);
  }
  cfg.mutable_tenant(0)->set_max_inflight(uint32_t(window));
  if (!fleet.zero_on_free)
    cfg.mutable_pool()->set_zero_on_free(false);
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
  auto entry = (*rt)->entry();
  // The throughput client is an event-based actor, as a streaming embedder
  // would write it: it refills the window on each end without blocking a
  // thread. It fulfils `finished` with the count of wrong or failed ends.
  std::promise<uint64_t> finished;
  auto* done = &finished;
  auto start = clock::now();
  if (fleet.batch > 0) {
    out.system = "cohort batched " + std::to_string(fleet.batch);
    // The same client with batched edges: the window refilled with as many
    // items as a message of ends brought back, in messages of at most
    // `batch` items.
    sys.spawn([&, entry](caf::event_based_actor* client) -> caf::behavior {
      auto sent = std::make_shared<uint64_t>(0);
      auto ended = std::make_shared<uint64_t>(0);
      auto wrong = std::make_shared<uint64_t>(0);
      auto sink = caf::actor_cast<actors::batch_sink>(client);
      auto send_more = [=](uint64_t n) {
        while (n > 0 && *sent < uint64_t(tasks)) {
          std::vector<work_item> items;
          auto k = std::min({n, uint64_t(fleet.batch), uint64_t(tasks) - *sent});
          items.reserve(k);
          for (uint64_t j = 0; j < k; ++j)
            items.push_back(make(++*sent));
          n -= k;
          client->send(entry, submit_atom::value, std::move(items), sink);
        }
      };
      send_more(uint64_t(std::min(window, tasks)));
      return {
          [=](result_atom, std::vector<work_end>& ends) {
            for (auto& e : ends)
              *wrong += e.error || e.result.output.values.size() != 1 ||
                        e.result.output.values[0] != 1024.0f;
            *ended += ends.size();
            send_more(ends.size());
            if (*ended == uint64_t(tasks)) {
              done->set_value(*wrong);
              client->quit();
            }
          },
      };
    });
  } else {
    sys.spawn([&, entry](caf::event_based_actor* client) -> caf::behavior {
      auto sent = std::make_shared<uint64_t>(0);
      auto ended = std::make_shared<uint64_t>(0);
      auto wrong = std::make_shared<uint64_t>(0);
      auto sink = caf::actor_cast<actors::client_sink>(client);
      auto refill = [=] {
        if (*sent < uint64_t(tasks)) {
          ++*sent;
          client->send(entry, submit_atom::value, make(*sent), sink);
        }
        if (++*ended == uint64_t(tasks)) {
          done->set_value(*wrong);
          client->quit();
        }
      };
      for (; *sent < uint64_t(std::min(window, tasks)); ++*sent)
        client->send(entry, submit_atom::value, make(*sent + 1), sink);
      return {
          [=](result_atom, work_result& res) {
            *wrong +=
                res.output.values.size() != 1 || res.output.values[0] != 1024.0f;
            refill();
          },
          [=](failed_atom, uint64_t, caf::error&) {
            ++*wrong;
            refill();
          },
      };
    });
  }
  uint64_t wrong = finished.get_future().get();
  // Done when the audit log has caught up: written and synced as its
  // policy says.
  auto flushed = (*rt)->flush_audit();
  double secs = std::chrono::duration<double>(clock::now() - start).count();
  out.tasks_per_s = tasks / secs;
  if (!flushed)
    out.error = describe(flushed.error());
  else if (*flushed < 3 * uint64_t(tasks))
    out.error = "audit log holds only " + std::to_string(*flushed) + " records";
  if (auto placed = (*rt)->placement_stats()) {
    uint64_t all = 0, simulated = 0;
    for (auto& d : placed->devices) {
      all += d.completed;
      simulated += d.simulated ? d.completed : 0;
    }
    out.simulated_share = all > 0 ? double(simulated) / double(all) : 0;
  }
  // Latency through the public API, as an embedder calls it.
  std::vector<double> lat;
  for (int i = 0; i < latency_samples; ++i) {
    auto t0 = clock::now();
    auto res = (*rt)->run(make(uint64_t(tasks + i + 1)));
    lat.push_back(
        std::chrono::duration<double, std::micro>(clock::now() - t0).count());
    if (!res || res->output.values.size() != 1 ||
        res->output.values[0] != 1024.0f)
      ++wrong;
  }
  out.p50_us = percentile(lat, 50);
  out.p99_us = percentile(lat, 99);
  if (wrong > 0)
    out.error = std::to_string(wrong) + " wrong or failed results";
  (*rt)->stop();
  std::filesystem::remove(audit);
  return out;
}

} // namespace cohort::bench
