#include "quota/simulation.hpp"

#include <map>
#include <memory>

#include "devices/memory/virtual_resource.hpp"
#include "kernels/catalog.hpp"
#include "messages/errc.hpp"

namespace cohort::quota {

namespace {

namespace memory = devices::memory;

// One device's pool over address space of its capacity.
struct modeled_device {
  std::unique_ptr<memory::virtual_resource> upstream;
  std::unique_ptr<memory::host_stream_ordering> streams;
  std::unique_ptr<memory::pool_resource> pool;
  uint64_t peak = 0;
  memory::pool_stats at_peak;
};

struct live_allocation {
  int tenant;
  size_t device;
  void* p;
  uint64_t bytes;
};

step_outcome refused(const caf::error& err, bool soft) {
  return {false, to_string(code_of(err)), describe(err), soft};
}

step_outcome refusal(errc code, std::string detail) {
  return refused(make_error(code, std::move(detail)), false);
}

} // namespace

simulation_report simulate(quota_book book, const allocation_plan& plan,
                           const std::vector<memory::pool_options>& pools) {
  simulation_report out;
  out.name = plan.name;
  auto& devs = book.devices();
  std::vector<modeled_device> model(devs.size());
  for (size_t d = 0; d < devs.size(); ++d) {
    if (!devs[d].has_memory)
      continue;
    auto& m = model[d];
    m.upstream = std::make_unique<memory::virtual_resource>(devs[d].name,
                                                            devs[d].capacity);
    m.streams = std::make_unique<memory::host_stream_ordering>(1, false);
    auto opts = d < pools.size() ? pools[d]
                                 : memory::sized_pool_options(devs[d].capacity);
    m.pool =
        std::make_unique<memory::pool_resource>(*m.upstream, *m.streams, opts);
    for (size_t t = 0; t < book.tenants(); ++t)
      if (auto r = book.policy(int(t)).device_reserve[d]; r > 0)
        m.pool->reserve(book.policy(int(t)).tenant, r);
    // What the runtime holds already, as one block.
    if (auto placed = book.placed(d); placed > 0)
      m.pool->allocate(placed, memory::stream_ref{0}, {"(in use)", 0, "now"});
  }
  std::map<std::string, live_allocation> live;
  std::vector<uint64_t> tenant_peak(book.tenants(), 0);
  for (auto& step : plan.steps) {
    if (!step.free.empty()) {
      auto i = live.find(step.free);
      if (i == live.end()) {
        out.steps.push_back(refusal(
            errc::invalid_arguments,
            "free of '" + step.free + "': no live allocation has this label"));
        continue;
      }
      auto& a = i->second;
      model[a.device].pool->deallocate(a.p, a.bytes, memory::stream_ref{0});
      book.refund(a.tenant, a.device, a.bytes);
      live.erase(i);
      out.steps.push_back({true, {}, {}, false});
      continue;
    }
    auto t = book.tenant_index(step.tenant);
    if (t < 0) {
      out.steps.push_back(refused(no_grant(step.tenant), false));
      continue;
    }
    size_t d = 0;
    while (d < devs.size() && devs[d].name != step.device)
      ++d;
    if (d == devs.size()) {
      out.steps.push_back(refusal(errc::invalid_arguments,
                                  "unknown device '" + step.device + "'"));
      continue;
    }
    auto& pol = book.policy(t);
    if (!(pol.device_mask & (uint64_t{1} << d))) {
      out.steps.push_back(refusal(errc::not_granted, "tenant '" + step.tenant +
                                                         "' is not granted " +
                                                         step.device));
      continue;
    }
    if (!step.kernel.empty()) {
      auto k = kernels::parse_kernel(step.kernel);
      if (!k) {
        out.steps.push_back(refusal(errc::unknown_kernel,
                                    "unknown kernel '" + step.kernel + "'"));
        continue;
      }
      if (!pol.kernels.allows(*k)) {
        out.steps.push_back(refusal(
            errc::not_granted, "tenant '" + step.tenant +
                                   "' is not granted kernel " + step.kernel));
        continue;
      }
    }
    if (step.bytes == 0) {
      out.steps.push_back(
          refusal(errc::invalid_arguments, "an allocation of 0 bytes"));
      continue;
    }
    if (!step.label.empty() && live.count(step.label) > 0) {
      out.steps.push_back(
          refusal(errc::invalid_arguments,
                  "label '" + step.label + "' is already live"));
      continue;
    }
    if (!devs[d].has_memory) {
      // Host memory on a CPU worker: nothing to meter.
      out.steps.push_back({true, {}, "host memory (not metered)", false});
      continue;
    }
    if (pol.max_item_bytes > 0 && step.bytes > pol.max_item_bytes) {
      out.steps.push_back(refused(
          make_error(errc::over_memory_quota,
                     std::to_string(step.bytes) + " bytes; tenant '" +
                         step.tenant + "' may use at most " +
                         std::to_string(pol.max_item_bytes) + " per item"),
          true));
      continue;
    }
    if (auto err = book.check_place(t, d, step.bytes)) {
      out.steps.push_back(refused(err, code_of(err) != errc::out_of_memory));
      continue;
    }
    auto& m = model[d];
    auto p = m.pool->allocate(step.bytes, memory::stream_ref{0},
                              {step.tenant, 0, step.kernel});
    if (!p) {
      out.steps.push_back(refused(p.error(), false));
      continue;
    }
    book.charge(t, d, step.bytes);
    // Unlabelled allocations are named by their step ("#3").
    std::string label = step.label;
    if (label.empty())
      label.append("#").append(std::to_string(out.steps.size() + 1));
    live.emplace(label, live_allocation{t, d, *p, step.bytes});
    out.steps.push_back({true, {}, {}, false});
    if (book.placed(d) > m.peak) {
      m.peak = book.placed(d);
      m.at_peak = m.pool->stats();
    }
    tenant_peak[size_t(t)] = std::max(tenant_peak[size_t(t)], book.memory(t));
  }
  for (size_t d = 0; d < devs.size(); ++d) {
    if (!devs[d].has_memory)
      continue;
    auto& m = model[d];
    auto now = m.pool->stats();
    out.devices.push_back({devs[d].name, devs[d].capacity, devs[d].limit,
                           book.placed(d), m.peak, now.held_bytes,
                           m.at_peak.largest_free, m.at_peak.fragmentation()});
  }
  for (size_t t = 0; t < book.tenants(); ++t)
    out.tenant_peaks.emplace_back(book.policy(int(t)).tenant, tenant_peak[t]);
  return out;
}

} // namespace cohort::quota
