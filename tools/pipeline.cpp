#include "tools/pipeline.hpp"

#include "config/compile.hpp"
#include "config/quotas.hpp"
#include "tools/scheduler_arg.hpp"

#include <atomic>
#include <chrono>
#include <future>
#include <map>
#include <unistd.h>

#include <caf/all.hpp>

#include "actors/runtime.hpp"
#include "chaos/fault_injector.hpp"
#include "kernels/random_data.hpp"
#include "messages/convert.hpp"
#include "messages/errc.hpp"
#include "tools/byte_units.hpp"

namespace cohort::tools {

namespace {

using clock = std::chrono::steady_clock;

// Largest input a pipeline stage may ask for, in floats per buffer.
constexpr uint64_t max_stage_elements = uint64_t{1} << 26;

// Shapes of a stage's inputs; topk_cosine reads args.k as the query count.
caf::expected<std::vector<uint64_t>> input_sizes(const pb::Stage& st) {
  auto& a = st.args();
  uint64_t n = a.n(), m = a.m(), k = a.k();
  std::vector<uint64_t> sizes;
  switch (static_cast<kernel_id>(st.kernel())) {
  case kernel_id::axpy:
  case kernel_id::dot:
    sizes = {n, n};
    break;
  case kernel_id::nrm2:
  case kernel_id::reduce_sum:
  case kernel_id::inclusive_scan:
    sizes = {n};
    break;
  case kernel_id::gemv:
    sizes = {m * n, n};
    break;
  case kernel_id::gemm:
    sizes = {m * k, k * n};
    break;
  case kernel_id::topk_cosine:
    sizes = {m * n, std::max<uint64_t>(k, 1) * n};
    break;
  }
  for (auto s : sizes)
    if (s > max_stage_elements || m > max_stage_elements ||
        n > max_stage_elements || k > max_stage_elements)
      return make_error(errc::malformed_pipeline,
                        "stage '" + st.name() + "' asks for more than " +
                            std::to_string(max_stage_elements) +
                            " elements per input");
  return sizes;
}

// The items of one batch: one per group, a group being a stage and the
// stages chained after it.
struct batch_plan {
  /// Input sizes of every stage.
  std::vector<std::vector<uint64_t>> sizes;
  /// Stage indices of each group.
  std::vector<std::vector<int>> groups;
};

kernels::kernel_args args_of(const pb::Stage& st) {
  kernels::kernel_args args{st.args().alpha(), st.args().m(), st.args().n(),
                            st.args().k(), st.args().top_k()};
  if (static_cast<kernel_id>(st.kernel()) == kernel_id::axpy &&
      st.args().alpha() == 0)
    args.alpha = 2.0f;
  return args;
}

work_item make_item(const pb::PipelineSpec& spec, uint64_t index,
                    const batch_plan& plan) {
  auto& group = plan.groups[index % plan.groups.size()];
  auto& st = spec.stage(group[0]);
  work_item item;
  item.id = index + 1;
  item.tenant = st.tenant().empty() ? spec.tenant() : st.tenant();
  if (item.tenant.empty())
    item.tenant = "default";
  item.kernel = static_cast<kernel_id>(st.kernel());
  item.args = args_of(st);
  item.gang = st.gang();
  uint64_t seed = (spec.seed() * 1000003 + index) * 4;
  for (auto n : plan.sizes[group[0]])
    item.inputs.emplace_back(kernels::random_floats(seed++, n));
  for (size_t j = 1; j < group.size(); ++j) {
    auto& next = spec.stage(group[j]);
    chained_stage cs;
    cs.kernel = static_cast<kernel_id>(next.kernel());
    cs.args = args_of(next);
    cs.input_slot = next.chain_input();
    auto& sizes = plan.sizes[group[j]];
    for (size_t i = 0; i < sizes.size(); ++i)
      if (i != cs.input_slot)
        cs.inputs.emplace_back(kernels::random_floats(seed++, sizes[i]));
    item.then.push_back(std::move(cs));
  }
  return item;
}

bool is_rejection(errc code) {
  switch (code) {
  case errc::unknown_kernel:
  case errc::invalid_arguments:
  case errc::unknown_tenant:
  case errc::not_granted:
  case errc::over_inflight_quota:
  case errc::over_memory_quota:
  case errc::shutting_down:
    return true;
  default:
    return false;
  }
}

// Shared between the client actor and the thread that waits and shows progress.
struct run_shared {
  std::atomic<uint64_t> ended{0};
  std::promise<void> finished;
  pipeline_report report;
};

struct client_state {
  const pb::PipelineSpec* spec = nullptr;
  actors::runtime* rt = nullptr;
  std::shared_ptr<run_shared> shared;
  batch_plan plan;
  std::map<std::string, uint64_t> cap;
  std::map<std::string, uint64_t> inflight;
  /// Inputs of items not yet ended, for the reference check.
  std::unordered_map<uint64_t, work_item> open;
  std::vector<bool> ended;
  uint64_t next = 0;
  size_t next_fault = 0;
  std::vector<pb::Fault> faults;
  std::shared_ptr<std::atomic<bool>> cancel;
};

chaos::fault fault_of(const pb::Fault& f) {
  chaos::fault out;
  out.kind = f.kind();
  out.device = f.device();
  out.xid = f.xid();
  out.allocations = std::max(1u, f.count());
  out.factor = f.factor() > 0 ? f.factor() : 1.0;
  out.stream = f.count();
  return out;
}

void inject(client_state& st, const pb::Fault& f) {
  auto cf = fault_of(f);
  std::string what = chaos::describe(cf);
  if (auto err = chaos::inject(*st.rt, cf))
    what += " (refused: " + describe(err) + ")";
  st.shared->report.faults.push_back(what + " after batch " +
                                     std::to_string(f.after_batches()));
}

template <class Self> void submit_more(Self* self) {
  auto& st = self->state;
  auto total = st.ended.size();
  auto groups = uint64_t(st.plan.groups.size());
  auto sink = caf::actor_cast<actors::client_sink>(self);
  if (st.cancel && st.cancel->load()) {
    // Cancelled: what was submitted ends, nothing more goes out.
    if (st.open.empty()) {
      st.shared->report.not_submitted = total - st.next;
      st.shared->finished.set_value();
      self->quit();
    }
    return;
  }
  while (st.next < total) {
    auto batch = st.next / groups;
    while (st.next_fault < st.faults.size() &&
           st.faults[st.next_fault].after_batches() <= batch)
      inject(st, st.faults[st.next_fault++]);
    auto item = make_item(*st.spec, st.next, st.plan);
    if (st.inflight[item.tenant] >= st.cap[item.tenant])
      return;
    ++st.inflight[item.tenant];
    ++st.next;
    st.open.emplace(item.id, item);
    self->send(st.rt->entry(), submit_atom::value, std::move(item), sink);
  }
}

template <class Self> void on_end(Self* self, uint64_t id) {
  auto& st = self->state;
  auto& rep = st.shared->report;
  auto it = st.open.find(id);
  if (id == 0 || id > st.ended.size() || st.ended[id - 1] ||
      it == st.open.end()) {
    ++rep.duplicates;
    return;
  }
  st.ended[id - 1] = true;
  --st.inflight[it->second.tenant];
  st.open.erase(it);
  auto n = st.shared->ended.fetch_add(1) + 1;
  if (n == st.ended.size()) {
    st.shared->finished.set_value();
    self->quit();
    return;
  }
  submit_more(self);
}

caf::behavior client_impl(caf::stateful_actor<client_state>* self,
                          const pb::PipelineSpec* spec, actors::runtime* rt,
                          std::shared_ptr<run_shared> shared, batch_plan plan,
                          std::map<std::string, uint64_t> cap,
                          std::shared_ptr<std::atomic<bool>> cancel) {
  auto& st = self->state;
  st.cancel = std::move(cancel);
  st.spec = spec;
  st.rt = rt;
  st.shared = std::move(shared);
  st.plan = std::move(plan);
  st.cap = std::move(cap);
  st.ended.assign(uint64_t(spec->batches()) * st.plan.groups.size(), false);
  st.faults.assign(spec->fault().begin(), spec->fault().end());
  std::stable_sort(st.faults.begin(), st.faults.end(), [](auto& a, auto& b) {
    return a.after_batches() < b.after_batches();
  });
  submit_more(self);
  return {
      [=](result_atom, work_result& res) {
        auto& st = self->state;
        auto& rep = st.shared->report;
        auto it = st.open.find(res.id);
        if (it != st.open.end()) {
          ++rep.completed;
          auto& item = it->second;
          auto diff = check_result(item, res.output);
          if (!diff.empty()) {
            ++rep.mismatches;
            if (rep.errors.size() < 5)
              rep.errors.push_back("item " + std::to_string(res.id) + " on " +
                                   res.device + ": " + diff);
          }
        }
        on_end(self, res.id);
      },
      [=](failed_atom, uint64_t id, caf::error& err) {
        auto& rep = self->state.shared->report;
        if (self->state.open.count(id)) {
          if (is_rejection(code_of(err)))
            ++rep.rejected;
          else
            ++rep.failed;
          if (rep.errors.size() < 5)
            rep.errors.push_back("item " + std::to_string(id) + ": " +
                                 describe(err));
        }
        on_end(self, id);
      },
  };
}

void show_progress(std::FILE* out, bool tty, uint64_t done, uint64_t total,
                   double secs, int& last_decile) {
  if (!out)
    return;
  double frac = total ? double(done) / double(total) : 1.0;
  if (tty) {
    constexpr int width = 30;
    int filled = int(frac * width);
    std::fprintf(out, "\r[%.*s%*s] %3d%% %llu/%llu items  %.0f items/s ",
                 filled, "##############################", width - filled, "",
                 int(frac * 100), (unsigned long long)done,
                 (unsigned long long)total, secs > 0 ? double(done) / secs : 0);
    if (done == total)
      std::fputc('\n', out);
    std::fflush(out);
  } else if (int decile = int(frac * 10); decile > last_decile) {
    last_decile = decile;
    std::fprintf(out, "progress: %3d%% %llu/%llu items\n", decile * 10,
                 (unsigned long long)done, (unsigned long long)total);
    std::fflush(out);
  }
}

} // namespace

pb::RuntimeConfig config_for(const pb::PipelineSpec& spec) {
  if (spec.has_runtime())
    return spec.runtime();
  auto cfg = actors::default_config();
  actors::add_sim_gpus(cfg, 4);
  return cfg;
}

namespace {

// A spec's stages grouped into items, checked before anything runs.
struct checked_plan {
  batch_plan plan;
  /// The tenant of each item of a batch.
  std::vector<std::string> tenants;
};

caf::expected<checked_plan> check_spec(const pb::PipelineSpec& spec) {
  checked_plan out;
  auto& plan = out.plan;
  for (int i = 0; i < spec.stage_size(); ++i) {
    auto& st = spec.stage(i);
    auto s = input_sizes(st);
    if (!s)
      return s.error();
    plan.sizes.push_back(std::move(*s));
    if (st.gang() > 1 &&
        (st.kernel() != pb::GEMM || st.chain() ||
         (i + 1 < spec.stage_size() && spec.stage(i + 1).chain())))
      return make_error(errc::malformed_pipeline,
                        "stage '" + st.name() +
                            "': a gang (gang > 1) is a gemm stage of its own, "
                            "not chained");
    if (!st.chain()) {
      plan.groups.push_back({i});
      continue;
    }
    if (plan.groups.empty())
      return make_error(errc::malformed_pipeline,
                        "stage '" + st.name() +
                            "' is chained, but no stage comes before it");
    if (st.chain_input() >= plan.sizes.back().size())
      return make_error(errc::malformed_pipeline,
                        "stage '" + st.name() + "': chain_input " +
                            std::to_string(st.chain_input()) +
                            " is not an input of its kernel");
    plan.groups.back().push_back(i);
  }
  // Probe each item of a batch once: check its stages and note its tenant.
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    auto probe = make_item(spec, g, plan);
    out.tenants.push_back(probe.tenant);
    if (auto why = validate_item(probe); !why.empty()) {
      std::string names;
      for (auto i : plan.groups[g])
        names += (names.empty() ? "'" : " -> '") + spec.stage(i).name() + "'";
      return make_error(errc::malformed_pipeline,
                        "stage " + names + ": " + why);
    }
  }
  return out;
}

// Streams the spec's batches through `rt` until every item ended.
caf::expected<pipeline_report>
drive(caf::actor_system& sys, actors::runtime& rt, const pb::RuntimeConfig& cfg,
      const pb::PipelineSpec& spec, checked_plan checked,
      const run_options& opts) {
  for (auto& f : spec.fault())
    if (auto err = chaos::check(rt, fault_of(f)))
      return make_error(errc::malformed_pipeline, describe(err));
  // Each tenant's window: the spec's, capped by the tenant's in-flight limit.
  std::map<std::string, uint64_t> cap;
  uint64_t window = spec.window() ? spec.window() : 64;
  for (auto& g : cfg.tenant())
    cap[g.tenant()] = g.max_inflight()
                          ? std::min<uint64_t>(window, g.max_inflight())
                          : window;
  for (auto& tenant : checked.tenants)
    cap.emplace(tenant, window); // unknown tenants: their items get rejected
  auto shared = std::make_shared<run_shared>();
  auto& rep = shared->report;
  rep.name = spec.name();
  rep.items = uint64_t(spec.batches()) * checked.plan.groups.size();
  auto finished = shared->finished.get_future();
  auto start = clock::now();
  sys.spawn(client_impl, &spec, &rt, shared, std::move(checked.plan), cap,
            opts.cancel);
  bool tty = opts.progress && ::isatty(::fileno(opts.progress));
  int last_decile = 0;
  while (finished.wait_for(std::chrono::milliseconds(100)) !=
         std::future_status::ready) {
    double secs = std::chrono::duration<double>(clock::now() - start).count();
    show_progress(opts.progress, tty, shared->ended.load(), rep.items, secs,
                  last_decile);
  }
  rep.seconds = std::chrono::duration<double>(clock::now() - start).count();
  show_progress(opts.progress, tty, rep.items, rep.items, rep.seconds,
                last_decile);
  rep.lost = rep.items - shared->ended.load() - rep.not_submitted;
  if (auto s = rt.placement_stats())
    rep.placement = std::move(*s);
  if (auto s = rt.admission_stats())
    rep.admission = std::move(*s);
  if (auto m = rt.memory_stats()) {
    for (auto& s : *m) {
      if (s.capacity == 0)
        continue;
      rep.leaked += s.live_allocations;
      rep.memory.push_back(std::move(s));
    }
  }
  rep.audit_path = rt.audit_path();
  return rep;
}

} // namespace

caf::error check_stages(const pb::PipelineSpec& spec) {
  auto checked = check_spec(spec);
  return checked ? caf::none : checked.error();
}

caf::expected<pb::RuntimeConfig> runtime_config_of(const pb::PipelineSpec& spec,
                                                   const run_options& opts) {
  pb::RuntimeConfig cfg = config_for(spec);
  if (!opts.config_path.empty()) {
    auto loaded = load_config(opts.config_path);
    if (!loaded)
      return loaded.error();
    cfg = std::move(*loaded);
  }
  if (!opts.audit_path.empty())
    cfg.set_audit_path(opts.audit_path);
  if (!opts.scheduler.empty())
    if (auto err = apply_scheduler_arg(cfg, opts.scheduler))
      return err;
  if (auto err = config::check_config(cfg))
    return err;
  return cfg;
}

caf::expected<pipeline_report> run_pipeline(caf::actor_system& sys,
                                            const pb::PipelineSpec& spec,
                                            const run_options& opts) {
  auto made = runtime_config_of(spec, opts);
  if (!made)
    return made.error();
  auto& cfg = *made;
  // Check every stage before anything runs.
  auto checked = check_spec(spec);
  if (!checked)
    return checked.error();
  auto rt = actors::runtime::start(sys, cfg);
  if (!rt)
    return rt.error();
  auto rep = drive(sys, **rt, cfg, spec, std::move(*checked), opts);
  if (!rep)
    return rep.error();
  auto flushed = (*rt)->flush_audit();
  auto stats = (*rt)->audit_stats();
  (*rt)->stop();
  rep->audit = audit::audit_log::verify(rep->audit_path);
  if (stats)
    rep->audit_run_records = stats->last_seq - stats->opened_at_seq;
  if (!flushed)
    rep->audit_unwritten = describe(flushed.error());
  else if (stats && stats->dropped > 0)
    rep->audit_unwritten = std::to_string(stats->dropped) +
                           " records dropped while the log could not be "
                           "written";
  // A log that missed records of this run does not vouch for it.
  if (!rep->audit_unwritten.empty())
    rep->audit.ok = false;
  return rep;
}

caf::expected<pipeline_report> run_pipeline_on(caf::actor_system& sys,
                                               actors::runtime& rt,
                                               const pb::RuntimeConfig& cfg,
                                               const pb::PipelineSpec& spec,
                                               const run_options& opts) {
  auto checked = check_spec(spec);
  if (!checked)
    return checked.error();
  return drive(sys, rt, cfg, spec, std::move(*checked), opts);
}

void print_report(std::FILE* out, const pipeline_report& r) {
  auto u = [](uint64_t x) { return (unsigned long long)x; };
  std::fprintf(out, "\n== cohort run: %s ==\n", r.name.c_str());
  std::fprintf(out,
               "items       %llu submitted, %llu completed, %llu failed, "
               "%llu rejected, %llu lost, %llu duplicated\n",
               u(r.items), u(r.completed), u(r.failed), u(r.rejected),
               u(r.lost), u(r.duplicates));
  std::fprintf(out, "time        %.3f s, %.0f items/s\n", r.seconds,
               r.seconds > 0 ? double(r.items) / r.seconds : 0.0);
  std::fprintf(out, "\n%-8s %-5s %-10s %-11s %9s %7s %11s %6s %10s %6s %9s\n",
               "device", "kind", "", "status", "items", "share", "busy ms",
               "util", "peak queue", "lost", "restarts");
  uint64_t total = 0;
  for (auto& d : r.placement.devices)
    total += d.completed;
  for (auto& d : r.placement.devices)
    std::fprintf(
        out,
        "%-8s %-5s %-10s %-11s %9llu %6.1f%% %11.1f %5.0f%% %10llu %6u %9u\n",
        d.name.c_str(), d.kind.c_str(), d.simulated ? "simulated" : "",
        to_string(d.status), u(d.completed),
        total ? 100.0 * double(d.completed) / double(total) : 0.0,
        double(d.busy_ns) / 1e6, 100 * d.utilization, u(d.max_queued), d.losses,
        d.restarts);
  std::fprintf(
      out,
      "\nplacement          %llu waiting at the peak, %llu exploration "
      "runs, %llu merged launches of %llu items, %llu gangs (%llu "
      "waited for devices)\n",
      u(r.placement.max_waiting), u(r.placement.explored),
      u(r.placement.batches), u(r.placement.batched_items),
      u(r.placement.gangs), u(r.placement.gang_waits));
  if (!r.memory.empty()) {
    std::fprintf(out, "\n%-8s %10s %10s %10s %11s %9s %9s  %s\n", "memory",
                 "capacity", "peak used", "pool held", "allocations", "refused",
                 "zeroed", "leaks");
    for (auto& m : r.memory) {
      uint64_t refused = 0;
      for (auto& [why, n] : m.refused)
        refused += n;
      std::fprintf(
          out, "%-8s %10s %10s %10s %11llu %9llu %9s  %s\n", m.device.c_str(),
          human_bytes(m.capacity).c_str(), human_bytes(m.peak_used).c_str(),
          human_bytes(m.peak_held).c_str(), u(m.allocations), u(refused),
          m.zero_on_free ? "yes" : "no",
          m.live_allocations == 0
              ? "none"
              : (std::to_string(m.live_allocations) + " LEAKED").c_str());
    }
  }
  std::fprintf(out, "\nCPU fallbacks      %llu (retries %llu)\n",
               u(r.placement.fallbacks), u(r.placement.retries));
  std::fprintf(out, "quota rejections   %llu", u(r.admission.rejected));
  for (auto& [why, n] : r.admission.rejected_by_reason)
    std::fprintf(out, "  %s=%llu", why.c_str(), u(n));
  std::fprintf(out, "\n");
  if (r.admission.held + r.admission.memory_waits +
          r.admission.memory_fallbacks + r.admission.timeouts >
      0)
    std::fprintf(out,
                 "held by limits     %llu held back, %llu waited for device "
                 "memory, %llu ran on a CPU for memory, %llu timed out\n",
                 u(r.admission.held), u(r.admission.memory_waits),
                 u(r.admission.memory_fallbacks), u(r.admission.timeouts));
  for (auto& f : r.faults)
    std::fprintf(out, "fault injected     %s\n", f.c_str());
  if (r.audit.ok)
    std::fprintf(out,
                 "audit chain        verified: %llu records in %s (%llu from "
                 "this run), head %s\n",
                 u(r.audit.good_records), r.audit_path.c_str(),
                 u(r.audit_run_records),
                 audit::to_hex(r.audit.head).substr(0, 16).c_str());
  else if (!r.audit_unwritten.empty())
    std::fprintf(out, "audit chain        INCOMPLETE: %s (%s)\n",
                 r.audit_unwritten.c_str(), r.audit_path.c_str());
  else
    std::fprintf(out, "audit chain        BROKEN at record %llu of %s: %s\n",
                 u(r.audit.first_bad), r.audit_path.c_str(),
                 r.audit.reason.c_str());
  std::fprintf(out,
               "results            %llu of %llu match the CPU reference%s\n",
               u(r.completed - r.mismatches), u(r.completed),
               r.mismatches ? " (MISMATCHES)" : "");
  for (auto& e : r.errors)
    std::fprintf(out, "  error: %s\n", e.c_str());
  std::fprintf(out, "verdict            %s\n",
               r.ok() ? "OK: every item ended exactly once"
                      : "FAILED: see above");
}

} // namespace cohort::tools
