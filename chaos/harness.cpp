#include "chaos/harness.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <thread>

#include <caf/all.hpp>
#include <unistd.h>

#include "actors/runtime.hpp"
#include "chaos/quota_observer.hpp"
#include "config/bounds.hpp"
#include "config/compile.hpp"
#include "config/quotas.hpp"
#include "kernels/random_data.hpp"
#include "messages/audit_event.hpp"
#include "messages/convert.hpp"
#include "messages/errc.hpp"

namespace cohort::chaos {

// Errors are described by cohort::describe, faults by ours.
using cohort::describe;

namespace {

using clock = std::chrono::steady_clock;
using ms = std::chrono::milliseconds;
using kernels::kernel_id;

constexpr kernel_id every_kernel[] = {
    kernel_id::axpy,           kernel_id::dot,
    kernel_id::nrm2,           kernel_id::reduce_sum,
    kernel_id::inclusive_scan, kernel_id::gemv,
    kernel_id::gemm,           kernel_id::topk_cosine};

// Items of all loads, at most.
constexpr uint64_t max_scenario_items = 1'000'000;
constexpr uint32_t default_deadline_ms = 60'000;

ms scaled(uint64_t x, double scale) {
  return ms{int64_t(std::llround(double(x) * scale))};
}

// One item of `kernel` with about `n` elements of input, its data drawn
// from `seed`.
work_item make_item(uint64_t id, const std::string& tenant, kernel_id k,
                    uint64_t n, uint64_t seed) {
  work_item item;
  item.id = id;
  item.tenant = tenant;
  item.kernel = k;
  auto add = [&](uint64_t len) {
    item.inputs.emplace_back(kernels::random_floats(seed++, len));
  };
  n = std::max<uint64_t>(n, 64);
  switch (k) {
  case kernel_id::axpy:
    item.args.alpha = 2.0f;
    add(n);
    add(n);
    break;
  case kernel_id::dot:
    add(n);
    add(n);
    break;
  case kernel_id::gemv: {
    item.args.m = 32;
    item.args.n = std::max<uint64_t>(1, n / 32);
    add(item.args.m * item.args.n);
    add(item.args.n);
    break;
  }
  case kernel_id::gemm: {
    auto d = std::clamp<uint64_t>(uint64_t(std::sqrt(double(n))) / 2, 4, 96);
    item.args.m = item.args.n = item.args.k = d;
    add(d * d);
    add(d * d);
    break;
  }
  case kernel_id::topk_cosine:
    item.args.n = 16;
    item.args.m = std::max<uint64_t>(8, n / 16);
    item.args.top_k = 4;
    add(item.args.m * item.args.n);
    add(2 * item.args.n);
    break;
  default: // nrm2, reduce_sum, inclusive_scan
    add(n);
    break;
  }
  return item;
}

// A two-stage chain: axpy, then the sum of its output on the same device.
work_item make_chain(uint64_t id, const std::string& tenant, uint64_t n,
                     uint64_t seed) {
  auto item = make_item(id, tenant, kernel_id::axpy, n, seed);
  chained_stage sum;
  sum.kernel = kernel_id::reduce_sum;
  sum.input_slot = 0;
  item.then.push_back(std::move(sum));
  return item;
}

// A gemm split by rows over `devices` devices at once, at least two rows
// each.
work_item make_gang(uint64_t id, const std::string& tenant, uint64_t n,
                    uint32_t devices, uint64_t seed) {
  auto item = make_item(id, tenant, kernel_id::gemm, n, seed);
  if (item.args.m < 2 * devices) {
    item.args.m = 2 * devices;
    item.inputs[0] =
        host_buffer{kernels::random_floats(seed, item.args.m * item.args.k)};
  }
  item.gang = devices;
  return item;
}

struct planned_item {
  ms at;
  work_item item;
  /// What the checker computes the result from: the item with its objects'
  /// host data in place of their names.
  work_item reference;
};

// The objects a load put before the workload: what was put, and its name.
struct put_object {
  host_buffer data;
  object_info info;
};
using load_objects = std::vector<std::vector<put_object>>;

// Elements of each object of `load` (the size an item's first input has).
uint64_t object_elements(const pb::ChaosLoad& load) {
  return std::max<uint64_t>(load.size() > 0 ? load.size() : 4096, 64);
}

// Kernels whose first input is a vector of the load's size: an object
// stands in for it.
constexpr kernel_id object_kernels[] = {kernel_id::reduce_sum, kernel_id::nrm2,
                                        kernel_id::dot, kernel_id::axpy};

std::vector<planned_item> make_workload(const pb::ChaosScenario& s,
                                        uint64_t seed, double scale,
                                        const load_objects& objects) {
  std::vector<planned_item> out;
  uint64_t id = 0;
  std::mt19937_64 rng{seed};
  size_t load_index = 0;
  for (auto& load : s.load()) {
    auto& mine = objects.at(load_index++);
    auto n = uint64_t(std::llround(double(load.items()) * scale));
    auto over = scaled(load.submit_over_ms(), scale);
    std::vector<kernel_id> ks;
    for (auto k : load.kernel())
      ks.push_back(static_cast<kernel_id>(k));
    if (ks.empty())
      ks.assign(std::begin(every_kernel), std::end(every_kernel));
    auto size = load.size() > 0 ? load.size() : 4096;
    for (uint64_t i = 0; i < n; ++i) {
      ++id;
      auto data_seed = seed * 7919 + id * 16;
      bool chain = load.chain_every() > 0 && (i + 1) % load.chain_every() == 0;
      bool gang =
          !chain && load.gang_every() > 0 && (i + 1) % load.gang_every() == 0;
      bool plain = !chain && !gang;
      bool keep =
          plain && load.keep_every() > 0 && (i + 1) % load.keep_every() == 0;
      bool reads = plain && !keep && !mine.empty() && load.object_every() > 0 &&
                   (i + 1) % load.object_every() == 0;
      auto item =
          chain  ? make_chain(id, load.tenant(), size, data_seed)
          : gang ? make_gang(id, load.tenant(), size,
                             load.gang() > 0 ? load.gang() : 2, data_seed)
          : keep
              ? make_item(id, load.tenant(), kernel_id::axpy, size, data_seed)
          : reads ? make_item(id, load.tenant(),
                              object_kernels[rng() % std::size(object_kernels)],
                              size, data_seed)
                  : make_item(id, load.tenant(), ks[rng() % ks.size()], size,
                              data_seed);
      auto reference = item;
      if (keep)
        item.keep_on_device = reference.keep_on_device = true;
      if (reads) {
        auto& o = mine[rng() % mine.size()];
        reference.inputs[0] = o.data;
        item.inputs[0] =
            host_buffer::object(o.info.id, o.info.elements, o.info.type);
      }
      out.push_back({n > 0 ? ms{over.count() * int64_t(i) / int64_t(n)} : ms{0},
                     std::move(item), std::move(reference)});
    }
  }
  std::stable_sort(out.begin(), out.end(),
                   [](auto& a, auto& b) { return a.at < b.at; });
  return out;
}

fault fault_of(const pb::ChaosEvent& ev) {
  fault f;
  f.kind = ev.kind();
  f.device = ev.device();
  f.xid = ev.xid();
  f.allocations = std::max(1u, ev.allocations());
  f.factor = ev.factor() > 0 ? ev.factor() : 1.0;
  f.stream = ev.stream();
  f.hold = std::chrono::milliseconds{ev.hold_ms()};
  f.degrees = ev.degrees();
  return f;
}

} // namespace

caf::error check_scenario(const pb::ChaosScenario& s) {
  auto bad = [&](const std::string& what) {
    return make_error(errc::malformed_config,
                      "scenario '" + s.name() + "': " + what);
  };
  if (s.name().empty())
    return make_error(errc::malformed_config, "a scenario needs a name");
  if (s.load_size() == 0)
    return bad("it has no load");
  if (auto err = config::check_config(s.runtime()))
    return bad(describe(err));
  using bounds = config::config_bounds;
  auto too_long = [&](const std::string& what, uint64_t ms) {
    return bad(what + " is " + std::to_string(ms) + " ms, at most " +
               std::to_string(bounds::max_ms) + " (one hour)");
  };
  std::set<std::string> tenants;
  for (auto& g : s.runtime().tenant())
    tenants.insert(g.tenant());
  std::set<std::string> sims, hosted;
  for (auto& g : s.runtime().devices().sim_gpu()) {
    sims.insert(g.name());
    if (g.host_process())
      hosted.insert(g.name());
  }
  uint64_t items = 0;
  for (auto& load : s.load()) {
    if (load.items() == 0)
      return bad("a load of tenant '" + load.tenant() + "' has no items");
    if (tenants.count(load.tenant()) == 0)
      return bad("a load of tenant '" + load.tenant() +
                 "', which the runtime grants nothing (grants are "
                 "default-deny)");
    items += load.items();
    if (load.size() > (uint64_t{1} << 24))
      return bad("a load's size is above 16M elements");
    if (load.submit_over_ms() > bounds::max_ms)
      return too_long("a load's submit_over_ms", load.submit_over_ms());
    auto gang = std::max(2u, load.gang());
    if (load.gang_every() > 0 && (load.gang() == 1 || gang > sims.size()))
      return bad("a load of tenant '" + load.tenant() + "' asks for gangs of " +
                 std::to_string(gang) + " devices; gangs need 2 to the " +
                 std::to_string(sims.size()) + " simulated GPUs");
    if (load.objects() > max_load_objects)
      return bad("a load of tenant '" + load.tenant() + "' puts " +
                 std::to_string(load.objects()) + " objects, at most " +
                 std::to_string(max_load_objects));
    if (load.object_every() > 0 && load.objects() == 0)
      return bad("a load of tenant '" + load.tenant() +
                 "' reads objects every " +
                 std::to_string(load.object_every()) +
                 " items but puts none (objects: N)");
    for (auto k : load.kernel())
      if (k == pb::KERNEL_UNSPECIFIED || k > 255 ||
          !kernels::is_known(static_cast<uint8_t>(k)))
        return bad("a load lists kernel " + std::to_string(k) +
                   ", which is not in the catalog");
  }
  if (items > max_scenario_items)
    return bad("the loads have " + std::to_string(items) + " items, at most " +
               std::to_string(max_scenario_items));
  for (auto& ev : s.event()) {
    auto what = "event at " + std::to_string(ev.at_ms()) + " ms: ";
    if (ev.kind() == pb::FAULT_UNSPECIFIED || !pb::FaultKind_IsValid(ev.kind()))
      return bad(what + "kind " + std::to_string(int(ev.kind())) +
                 " is not a fault kind");
    if (sims.count(ev.device()) == 0)
      return bad(what + "no simulated GPU is named '" + ev.device() + "'");
    if ((ev.kind() == pb::KILL_HOST || ev.kind() == pb::STOP_HOST ||
         ev.kind() == pb::CUT_CONNECTION) &&
        hosted.count(ev.device()) == 0)
      return bad(what + pb::FaultKind_Name(ev.kind()) +
                 " needs a device in a " + "host process, and " + ev.device() +
                 " has no host_process: true");
    // In 64 bits: every_ms x count overflows 32.
    auto last = uint64_t{ev.at_ms()} +
                uint64_t{ev.every_ms()} * std::max(1u, ev.count() - 1);
    if (ev.at_ms() > bounds::max_ms || last > bounds::max_ms)
      return too_long(what + "its last repeat", last);
    if (ev.hold_ms() > bounds::max_ms)
      return too_long(what + "hold_ms", ev.hold_ms());
    if (ev.kind() == pb::SLOW_DOWN &&
        !(std::isfinite(ev.factor()) && ev.factor() >= 1e-3 &&
          ev.factor() <= 1e6))
      return bad(what + "SLOW_DOWN needs a finite factor in 0.001..1000000");
  }
  for (auto k : s.random().kind())
    if (k == pb::FAULT_UNSPECIFIED || !pb::FaultKind_IsValid(k))
      return bad("random faults: kind " + std::to_string(k) +
                 " is not a fault kind");
  if (s.random().over_ms() > bounds::max_ms)
    return too_long("random faults: over_ms", s.random().over_ms());
  if (s.deadline_ms() > bounds::max_ms)
    return too_long("deadline_ms", s.deadline_ms());
  auto check_codes = [&](const auto& codes) -> caf::error {
    for (auto& code : codes) {
      bool known = false;
      for (uint8_t c = 1; c < 64 && !known; ++c)
        known = to_string(static_cast<errc>(c)) == code;
      if (!known)
        return bad("allowed_error '" + code + "' is not an error name");
    }
    return caf::none;
  };
  if (auto err = check_codes(s.allowed_error()))
    return err;
  for (auto& load : s.load())
    if (auto err = check_codes(load.allowed_error()))
      return err;
  if (s.random().count() > 0 && s.random().kind_size() == 0)
    return bad("random faults need at least one kind");
  // Bounds on what a scenario makes before it runs: the timeline and every
  // item's inputs are built up front, so a stray digit would otherwise hang
  // or exhaust the machine instead of getting an error (a timeout of
  // fuzz/scenario_fuzzer).
  uint64_t faults = s.random().count();
  for (auto& ev : s.event()) {
    if (ev.count() > max_fault_count)
      return bad("an event repeats " + std::to_string(ev.count()) +
                 " times, at most " + std::to_string(max_fault_count));
    faults += std::max(1u, ev.count());
  }
  if (faults > max_fault_count)
    return bad(std::to_string(faults) + " faults, at most " +
               std::to_string(max_fault_count));
  uint64_t elements = 0;
  for (auto& load : s.load())
    elements += (uint64_t(load.items()) + load.objects()) *
                std::max<uint64_t>(load.size() > 0 ? load.size() : 4096, 64);
  if (elements > max_input_elements)
    return bad("the loads' inputs add up to " + std::to_string(elements) +
               " elements (items x size), at most " +
               std::to_string(max_input_elements));
  return caf::none;
}

namespace {

// A run whose faults did not take proves nothing: below any bound of
// `want`, it is broken.
void check_expectations(const pb::ChaosExpect& want, chaos_report& rep) {
  auto& v = rep.check;
  auto at_least = [&](uint64_t min, uint64_t saw, const char* what) {
    if (min > 0 && saw < min)
      v.violations.push_back("expected at least " + std::to_string(min) + " " +
                             what + ", saw " + std::to_string(saw));
  };
  at_least(want.min_losses(), rep.losses, "device losses");
  at_least(want.min_restarts(), rep.restarts, "restarts");
  at_least(want.min_circuit_opens(), rep.circuit_opens, "circuit openings");
  at_least(want.min_fallbacks(), rep.fallbacks, "CPU fallbacks");
  at_least(want.min_recoveries(), v.recovery_ms.size(),
           "recoveries (losses whose items moved and ended elsewhere)");
  at_least(want.min_completed(), v.completed, "completed items");
  at_least(want.min_gangs_completed(), v.gangs_completed,
           "completed gang items");
}

std::string temp_audit_path(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path();
  return (dir / ("cohort-chaos-" + name + "-" + std::to_string(::getpid()) +
                 "-" + std::to_string(wall_clock_ns()) + ".log"))
      .string();
}

void fill_observer(quota_observer& obs, const pb::RuntimeConfig& cfg) {
  for (auto& g : cfg.devices().sim_gpu())
    obs.device_limit[g.name()] = g.memory_mib() << 20;
  for (auto& t : cfg.tenant()) {
    if (t.memory_quota_bytes() > 0)
      obs.tenant_quota[t.tenant()] = t.memory_quota_bytes();
    for (auto& dq : t.device_quota())
      if (dq.memory_quota_bytes() > 0)
        obs.device_quota[{t.tenant(), dq.device()}] = dq.memory_quota_bytes();
  }
}

} // namespace

caf::expected<pb::ChaosScenario> load_scenario(const std::string& path) {
  pb::ChaosScenario s;
  if (auto err = load_text_file(path, s, errc::malformed_config))
    return err;
  if (auto err = check_scenario(s))
    return make_error(errc::malformed_config, path + ": " + describe(err));
  return s;
}

std::vector<timed_fault> expand_timeline(const pb::ChaosScenario& s,
                                         uint64_t seed, double scale) {
  std::vector<timed_fault> out;
  for (auto& ev : s.event()) {
    auto f = fault_of(ev);
    for (uint32_t i = 0; i < std::max(1u, ev.count()); ++i)
      out.push_back(
          {scaled(ev.at_ms() + uint64_t{ev.every_ms()} * i, scale), f});
  }
  auto& r = s.random();
  std::vector<std::string> sims;
  for (auto& g : s.runtime().devices().sim_gpu())
    sims.push_back(g.name());
  if (r.count() > 0 && r.kind_size() > 0 && !sims.empty()) {
    // Plain modulo draws from a fixed engine: the same on every platform.
    std::mt19937_64 rng{seed ^ 0x9e3779b97f4a7c15ull};
    auto over =
        uint64_t(std::max<int64_t>(1, scaled(r.over_ms(), scale).count()));
    for (uint32_t i = 0; i < r.count(); ++i) {
      fault f;
      f.kind = static_cast<pb::FaultKind>(r.kind(int(rng() % r.kind_size())));
      f.device = sims[rng() % sims.size()];
      static constexpr uint32_t xids[] = {13, 31, 43, 48, 79, 94};
      f.xid = xids[rng() % std::size(xids)];
      f.allocations = 1 + uint32_t(rng() % 8);
      f.factor = double(2 + rng() % 9);
      f.stream = 0;
      // Not a draw of its own: the other faults' draws stay as they were.
      f.degrees = 20 + int32_t(f.allocations) * 8;
      out.push_back({ms{int64_t(rng() % over)}, f});
    }
  }
  std::stable_sort(out.begin(), out.end(),
                   [](auto& a, auto& b) { return a.at < b.at; });
  return out;
}

caf::expected<chaos_report> run_scenario(caf::actor_system& sys,
                                         const pb::ChaosScenario& s,
                                         const run_options& opts) {
  if (auto err = check_scenario(s))
    return err;
  chaos_report rep;
  rep.name = s.name();
  rep.seed = opts.seed != 0 ? opts.seed : s.seed();
  rep.timeline = expand_timeline(s, rep.seed, opts.scale);
  auto cfg = s.runtime();
  rep.audit_path =
      opts.audit_path.empty() ? temp_audit_path(s.name()) : opts.audit_path;
  std::filesystem::remove(rep.audit_path);
  cfg.set_audit_path(rep.audit_path);
  if (!opts.host_binary.empty())
    cfg.mutable_devices()->set_host_binary(opts.host_binary);
  auto obs = std::make_shared<quota_observer>();
  fill_observer(*obs, cfg);
  auto rt = actors::runtime::start(sys, cfg, {}, obs);
  if (!rt)
    return rt.error();
  for (auto& tf : rep.timeline)
    if (auto err = check(**rt, tf.f))
      return make_error(errc::malformed_config,
                        "scenario '" + s.name() + "': " + describe(err));
  // The loads' objects, put before the workload.
  load_objects objects(size_t(s.load_size()));
  for (int l = 0; l < s.load_size(); ++l) {
    auto& load = s.load(l);
    for (uint32_t k = 0; k < load.objects(); ++k) {
      host_buffer data{kernels::random_floats(
          rep.seed * 104729 + uint64_t(l) * 4096 + k, object_elements(load))};
      auto put = (*rt)->put_object(load.tenant(), data);
      if (!put)
        return make_error(code_of(put.error()),
                          "scenario '" + s.name() + "': putting object " +
                              std::to_string(k + 1) + " of tenant '" +
                              load.tenant() + "': " + describe(put.error()));
      objects[size_t(l)].push_back({std::move(data), *put});
    }
  }
  auto work = make_workload(s, rep.seed, opts.scale, objects);
  run_record run;
  // Items keeping their output on a device: their reference (what the
  // output's reader is checked against).
  std::map<uint64_t, work_item> keeps;
  uint64_t next_id = 0;
  for (auto& p : work) {
    run.items.push_back(p.reference);
    next_id = std::max(next_id, p.item.id);
    if (p.item.keep_on_device) {
      run.kept[p.item.id] = p.reference.inputs[0].size();
      keeps.emplace(p.item.id, p.reference);
    }
  }
  for (auto& g : cfg.tenant())
    run.inflight_cap[g.tenant()] = g.max_inflight();
  run.global_inflight_cap = cfg.limits().max_inflight();
  run.allowed_errors.insert(s.allowed_error().begin(), s.allowed_error().end());
  for (auto& load : s.load())
    run.allowed_by_tenant[load.tenant()].insert(load.allowed_error().begin(),
                                                load.allowed_error().end());
  run.audit_path = rep.audit_path;
  auto start = clock::now();
  // The timeline runs on its own thread, beside the submissions.
  std::vector<loss_mark> losses;
  std::vector<std::string> refused;
  std::thread timeline{[&] {
    for (auto& tf : rep.timeline) {
      std::this_thread::sleep_until(start + tf.at);
      auto at = wall_clock_ns();
      if (auto err = inject(**rt, tf.f)) {
        refused.push_back(describe(tf.f) + ": " + describe(err));
        continue;
      }
      if (is_loss(tf.f, (*rt)->xid_policy()))
        losses.push_back(
            {tf.f.device, at, describe(tf.f), tf.f.kind == pb::HANG_STREAM});
    }
  }};
  caf::scoped_actor self{sys};
  auto sink = caf::actor_cast<actors::client_sink>(self);
  size_t received = 0;
  size_t expected = work.size();
  auto since_start = [&] {
    return std::chrono::duration_cast<ms>(clock::now() - start).count();
  };
  // An output kept on a device is read back by a reader item, submitted
  // when it ends; its handle is released when the reader ends.
  std::map<uint64_t, uint64_t> reader_of;
  std::vector<uint64_t> kept_handles;
  uint64_t outputs_read = 0;
  auto read_kept = [&](uint64_t keep_id, const object_info& o) {
    auto k = keeps.find(keep_id);
    if (k == keeps.end() || o.id == 0)
      return;
    kept_handles.push_back(o.id);
    auto& src = k->second;
    auto x = src.inputs[0].view().as<float>();
    auto y = src.inputs[1].view().as<float>();
    std::vector<float> out(x.size());
    for (size_t i = 0; i < x.size(); ++i)
      out[i] = src.args.alpha * x[i] + y[i];
    work_item reader;
    reader.id = ++next_id;
    reader.tenant = src.tenant;
    reader.kernel = kernel_id::reduce_sum;
    auto reference = reader;
    reference.inputs.emplace_back(std::move(out));
    reader.inputs.push_back(host_buffer::object(o.id, o.elements, o.type));
    run.items.push_back(std::move(reference));
    reader_of[reader.id] = o.id;
    ++expected;
    self->send((*rt)->entry(), submit_atom::value, std::move(reader), sink);
  };
  auto reader_ended = [&](uint64_t id) {
    auto r = reader_of.find(id);
    if (r == reader_of.end())
      return;
    ++outputs_read;
    (*rt)->release_object(r->second);
    if (auto h = std::find(kept_handles.begin(), kept_handles.end(), r->second);
        h != kept_handles.end())
      kept_handles.erase(h);
    reader_of.erase(r);
  };
  auto on_result = [&](result_atom, work_result& res) {
    auto id = res.id;
    auto object = res.object;
    bool first = run.ends[id].empty();
    run.ends[id].push_back({true, std::move(res), {}, since_start()});
    ++received;
    if (first && object.id != 0)
      read_kept(id, object);
    else if (object.id != 0)
      (*rt)->release_object(object.id); // a duplicate end's handle
    if (first)
      reader_ended(id);
  };
  auto on_error = [&](failed_atom, uint64_t id, caf::error& err) {
    bool first = run.ends[id].empty();
    run.ends[id].push_back({false, {}, std::move(err), since_start()});
    ++received;
    if (first)
      reader_ended(id);
  };
  for (auto& p : work) {
    std::this_thread::sleep_until(start + p.at);
    self->send((*rt)->entry(), submit_atom::value, std::move(p.item), sink);
  }
  // The deadline stretches with the workload (soak runs).
  auto deadline_ms = std::max<int64_t>(
      1, scaled(s.deadline_ms() > 0 ? s.deadline_ms() : default_deadline_ms,
                opts.scale)
             .count());
  run.deadline_ms = deadline_ms;
  auto deadline = start + ms{deadline_ms};
  bool timed_out = false;
  while (received < expected && !timed_out) {
    auto left = std::chrono::duration_cast<ms>(deadline - clock::now());
    if (left.count() <= 0)
      break;
    self->receive(
        on_result, on_error, caf::after(left) >> [&] { timed_out = true; });
  }
  timeline.join();
  // Late duplicates would arrive now.
  bool quiet = false;
  while (!quiet)
    self->receive(
        on_result, on_error, caf::after(ms{100}) >> [&] { quiet = true; });
  rep.wall = std::chrono::duration_cast<ms>(clock::now() - start);
  if (auto st = (*rt)->placement_stats()) {
    rep.retries = st->retries;
    rep.fallbacks = st->fallbacks;
    for (auto& d : st->devices) {
      rep.device_notes.push_back(
          d.name + ": " + std::to_string(d.completed) + " completed, " +
          std::to_string(d.failed_placements) + " failed placements, " +
          std::to_string(d.losses) + " losses, " + std::to_string(d.restarts) +
          " restarts, " + std::to_string(d.circuit_opens) +
          " circuit opens, ends " + to_string(d.status));
      rep.losses += d.losses;
      rep.restarts += d.restarts;
      rep.circuit_opens += d.circuit_opens;
    }
    for (auto& [tenant, fb] : st->fallback_by_tenant) {
      char line[256];
      std::snprintf(line, sizeof(line),
                    "%s: %llu fallbacks, worst %.1f ms, %llu over a %lld ms "
                    "budget",
                    tenant.c_str(), (unsigned long long)fb.items,
                    double(fb.max_ns) / 1e6, (unsigned long long)fb.over_budget,
                    (long long)(fb.budget_ns / 1000000));
      rep.fallback_notes.push_back(line);
    }
  }
  // Objects: each one put still holds what was put (none was freed or
  // overwritten while held); with every handle released, none is left.
  std::vector<std::string> object_violations;
  uint64_t put_count = 0;
  for (size_t l = 0; l < objects.size(); ++l)
    for (auto& o : objects[l]) {
      ++put_count;
      auto name = "object " + std::to_string(o.info.id) + " of tenant '" +
                  o.info.tenant + "'";
      auto got = (*rt)->get_object(o.info.tenant, o.info.id);
      if (!got)
        object_violations.push_back(
            name + " could not be read back: " + describe(got.error()));
      else if (got->bytes() != o.data.bytes() ||
               std::memcmp(got->view().data, o.data.view().data,
                           o.data.bytes()) != 0)
        object_violations.push_back(name + " does not hold what was put");
      (*rt)->release_object(o.info.id);
    }
  for (auto id : kept_handles)
    (*rt)->release_object(id);
  caf::expected<std::vector<object_info>> left = std::vector<object_info>{};
  for (int i = 0; i < 500; ++i) {
    left = (*rt)->objects();
    if (!left || left->empty())
      break;
    std::this_thread::sleep_for(ms{10});
  }
  if (!left)
    object_violations.push_back("the objects could not be listed: " +
                                describe(left.error()));
  else if (!left->empty())
    object_violations.push_back(
        std::to_string(left->size()) +
        " objects left after every handle was released (leaked), the first "
        "object " +
        std::to_string(left->front().id) + " with " +
        std::to_string(left->front().handles) + " handles and " +
        std::to_string(left->front().readers) + " readers");
  if (put_count > 0 || !keeps.empty())
    rep.objects_note =
        std::to_string(put_count) + " objects put and read " +
        "back unchanged unless noted; " + std::to_string(keeps.size()) +
        " items kept their output on a device, " +
        std::to_string(outputs_read) + " of those outputs read by a later item";
  // A log that could not take every record does not vouch for the run: the
  // checker names the write error instead of each item it has no record of.
  if (auto flushed = (*rt)->flush_audit(); !flushed)
    run.audit_unwritten = describe(flushed.error());
  else if (auto st = (*rt)->audit_stats(); st && st->dropped > 0)
    run.audit_unwritten = std::to_string(st->dropped) +
                          " records were dropped while the log could not be "
                          "written";
  (*rt)->stop();
  rt->reset();
  run.losses = std::move(losses);
  run.memory_violations = obs->violations();
  rep.refused = std::move(refused);
  rep.check = check_invariants(run);
  for (auto& why : object_violations)
    rep.check.violations.push_back(why);
  check_expectations(s.expect(), rep);
  if (!opts.keep_audit && opts.audit_path.empty())
    std::filesystem::remove(rep.audit_path);
  return rep;
}

} // namespace cohort::chaos
