#include "actors/runtime.hpp"

#include <set>

#include <caf/all.hpp>

#include "devices/cpu/cpu_device.hpp"
#include "devices/gpu/discover.hpp"
#include "devices/topology.hpp"
#include "messages/errc.hpp"

namespace cohort::actors {

namespace {

constexpr size_t max_devices = 64;

} // namespace

pb::RuntimeConfig default_config() {
  pb::RuntimeConfig cfg;
  auto* t = cfg.add_tenant();
  t->set_tenant("default");
  t->add_kernels("*");
  t->add_devices("*");
  return cfg;
}

void add_sim_gpus(pb::RuntimeConfig& cfg, uint32_t n) {
  static constexpr double speeds[] = {1, 1, 2, 4};
  for (uint32_t i = 0; i < n; ++i) {
    auto* g = cfg.mutable_devices()->add_sim_gpu();
    g->set_name("sim" + std::to_string(i));
    g->set_memory_mib(16384);
    g->set_streams(4);
    g->set_speed(speeds[i % 4]);
  }
}

caf::expected<std::vector<std::shared_ptr<devices::device>>>
make_devices(const pb::RuntimeConfig& cfg) {
  auto bad = [](const std::string& what) {
    return make_error(errc::malformed_config, what);
  };
  std::vector<std::shared_ptr<devices::device>> out;
  auto topo = devices::discover_cpu_topology();
  uint32_t workers = cfg.devices().has_cpu_workers()
                         ? cfg.devices().cpu_workers()
                         : topo.cores;
  if (workers > max_devices)
    return bad("cpu_workers is " + std::to_string(workers) + ", at most " +
               std::to_string(max_devices) + " devices are supported");
  for (uint32_t i = 0; i < workers; ++i) {
    int32_t node = topo.core_numa_node.empty()
                       ? -1
                       : topo.core_numa_node[i % topo.core_numa_node.size()];
    out.push_back(devices::cpu::make_cpu_device(i, node, topo.model));
  }
  if (!cfg.devices().has_gpus() || cfg.devices().gpus()) {
    devices::gpu::gpu_options opts;
    if (cfg.devices().gpu_streams() > 0)
      opts.streams = cfg.devices().gpu_streams();
    for (auto& d : devices::gpu::discover(opts).devices)
      out.push_back(std::move(d));
  }
  std::set<std::string> names;
  for (auto& g : cfg.devices().sim_gpu()) {
    if (g.name().empty())
      return bad("a simulated GPU has no name");
    if (!names.insert(g.name()).second || g.name().rfind("cpu", 0) == 0)
      return bad("simulated GPU name '" + g.name() +
                 "' is used twice or clashes with a CPU worker");
    if (g.streams() == 0 || g.memory_mib() == 0 || !(g.speed() > 0))
      return bad("simulated GPU '" + g.name() +
                 "' needs positive memory_mib, streams and speed");
    devices::sim::sim_params p;
    p.name = g.name();
    p.memory_bytes = g.memory_mib() << 20;
    p.streams = g.streams();
    p.speed = g.speed();
    out.push_back(devices::sim::make_sim_device(p));
  }
  if (out.empty())
    return bad("the config has no devices (cpu_workers: 0 and no GPUs)");
  if (out.size() > max_devices)
    return bad("at most " + std::to_string(max_devices) +
               " devices are supported, the config has " +
               std::to_string(out.size()));
  return out;
}

runtime::runtime(caf::actor_system& sys) : sys_(sys) {
  // nop
}

runtime::~runtime() {
  stop();
}

caf::expected<std::unique_ptr<runtime>>
runtime::start(caf::actor_system& sys, const pb::RuntimeConfig& cfg,
               std::vector<std::shared_ptr<devices::device>> extra) {
  kernels::use_single_threaded_blas();
  auto devs = make_devices(cfg);
  if (!devs)
    return devs.error();
  for (auto& d : extra)
    devs->push_back(std::move(d));
  std::vector<device_info> infos;
  for (auto& d : *devs)
    infos.push_back(d->info());
  auto policies = compile_grants(cfg, infos);
  if (!policies)
    return policies.error();
  std::string path =
      cfg.audit_path().empty() ? "cohort-audit.log" : cfg.audit_path();
  auto log = audit_log::open(path, cfg.audit_batch());
  if (!log)
    return log.error();
  std::unique_ptr<runtime> rt{new runtime(sys)};
  rt->devs_ = std::move(*devs);
  rt->infos_ = std::move(infos);
  rt->audit_path_ = path;
  rt->audit_ =
      sys.spawn(audit_impl, std::shared_ptr<audit_log>{std::move(*log)});
  balancer_config bcfg;
  if (cfg.max_attempts() > 0)
    bcfg.max_attempts = cfg.max_attempts();
  // The balancer and the quota actor know each other: the balancer learns
  // its quota actor by a first message, before any item can reach it.
  rt->balancer_ =
      sys.spawn(balancer_impl, rt->infos_, quota_listener{}, rt->audit_, bcfg);
  rt->quota_ =
      sys.spawn(quota_impl, std::move(*policies), rt->balancer_, rt->audit_);
  caf::anon_send(rt->balancer_, start_atom::value, quota_listener{rt->quota_});
  supervisor_config scfg;
  if (cfg.kernel_timeout_ms() > 0)
    scfg.kernel_timeout = std::chrono::milliseconds{cfg.kernel_timeout_ms()};
  if (cfg.max_restarts() > 0)
    scfg.max_restarts = cfg.max_restarts();
  if (cfg.restart_period_ms() > 0)
    scfg.restart_period = std::chrono::milliseconds{cfg.restart_period_ms()};
  rt->supervisor_ =
      sys.spawn(supervisor_impl, rt->devs_, rt->balancer_, rt->audit_, scfg);
  caf::scoped_actor self{sys};
  caf::error failure;
  self->request(rt->supervisor_, caf::infinite, start_atom::value)
      .receive([](bool) {}, [&](caf::error& err) { failure = std::move(err); });
  if (failure)
    return failure;
  return rt;
}

caf::expected<work_result> runtime::run(work_item item) {
  caf::scoped_actor self{sys_};
  auto sink = caf::actor_cast<client_sink>(self);
  self->send(quota_, submit_atom::value, std::move(item), sink);
  caf::expected<work_result> out{caf::error{}};
  self->receive(
      [&](result_atom, work_result& res) { out = std::move(res); },
      [&](failed_atom, uint64_t, caf::error& err) { out = std::move(err); });
  return out;
}

std::shared_ptr<devices::sim::sim_device>
runtime::sim_device(const std::string& name) const {
  for (auto& d : devs_)
    if (d->info().name == name && d->info().kind == device_kind::sim_gpu)
      return std::static_pointer_cast<devices::sim::sim_device>(d);
  return nullptr;
}

namespace {

template <class T, class Handle, class... Ts>
caf::expected<T> ask(caf::actor_system& sys, const Handle& dest, Ts... xs) {
  caf::scoped_actor self{sys};
  caf::expected<T> out{caf::error{}};
  self->request(dest, caf::infinite, xs...)
      .receive([&](T& x) { out = std::move(x); },
               [&](caf::error& err) { out = std::move(err); });
  return out;
}

} // namespace

caf::expected<balancer_stats> runtime::placement_stats() {
  return ask<balancer_stats>(sys_, balancer_, stats_atom::value);
}

caf::expected<quota_stats> runtime::admission_stats() {
  return ask<quota_stats>(sys_, quota_, stats_atom::value);
}

caf::expected<uint64_t> runtime::flush_audit() {
  // Each actor sends its buffered events before it replies, so the audit
  // actor has them all before our flush reaches it.
  if (auto x = ask<bool>(sys_, quota_, flush_atom::value); !x)
    return x.error();
  if (auto x = ask<bool>(sys_, balancer_, flush_atom::value); !x)
    return x.error();
  return ask<uint64_t>(sys_, audit_, flush_atom::value);
}

void runtime::stop() {
  if (stopped_)
    return;
  stopped_ = true;
  ask<bool>(sys_, quota_, down_atom::value);
  flush_audit();
  caf::scoped_actor self{sys_};
  for (caf::actor_addr addr : {supervisor_.address(), quota_.address(),
                               balancer_.address(), audit_.address()}) {
    auto handle = caf::actor_cast<caf::actor>(addr);
    if (!handle)
      continue;
    self->monitor(handle);
    self->send_exit(handle, caf::exit_reason::user_shutdown);
    self->receive([](caf::down_msg&) {});
  }
}

} // namespace cohort::actors
