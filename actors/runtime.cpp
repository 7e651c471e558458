#include "actors/runtime.hpp"

#include "actors/balancer/state.hpp"
#include "config/compile.hpp"
#include "config/quotas.hpp"
#include "config/supervision.hpp"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <thread>

#include <caf/all.hpp>

#include "actors/device_host.hpp"
#include "devices/cpu/cpu_device.hpp"
#include "devices/gpu/bundle_isolation.hpp"
#include "devices/gpu/discover.hpp"
#include "devices/gpu/plugin.hpp"
#include "devices/memory/device_memory.hpp"
#include "devices/topology.hpp"
#include "kernels/bundle/loader.hpp"
#include "kernels/registry.hpp"
#include "messages/errc.hpp"
#include "objects/share_server.hpp"

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

caf::expected<devices::sim::sim_params> sim_params_of(const pb::SimGpu& g) {
  auto bad = [](const std::string& what) {
    return make_error(errc::malformed_config, what);
  };
  if (g.streams() == 0 || g.memory_mib() == 0 || !(g.speed() > 0))
    return bad("simulated GPU '" + g.name() +
               "' needs positive memory_mib, streams and speed");
  if (g.memory_mib() > (uint64_t{1} << 30))
    return bad("simulated GPU '" + g.name() + "': memory_mib " +
               std::to_string(g.memory_mib()) + " is too large");
  devices::sim::sim_params p;
  p.name = g.name();
  p.memory_bytes = g.memory_mib() << 20;
  p.streams = g.streams();
  p.speed = g.speed();
  if (g.gflops() < 0 || g.gbytes_per_s() < 0 || g.spike_fraction() < 0 ||
      g.spike_fraction() > 1 || g.spike_factor() < 0)
    return bad("simulated GPU '" + g.name() +
               "': gflops, gbytes_per_s and spike_factor must not be "
               "negative, spike_fraction must be in 0..1");
  if (g.gflops() > 0)
    p.gflops = g.gflops();
  if (g.gbytes_per_s() > 0)
    p.gbytes_per_s = g.gbytes_per_s();
  if (g.has_numa_node())
    p.numa_node = g.numa_node();
  p.spike_fraction = g.spike_fraction();
  if (g.spike_factor() > 0)
    p.spike_factor = g.spike_factor();
  p.cpu = g.cpu();
  if (g.launch_latency_us() > 1'000'000)
    return bad("simulated GPU '" + g.name() +
               "': launch_latency_us is at most 1 s");
  if (g.launch_latency_us() > 0)
    p.launch_latency = std::chrono::microseconds{g.launch_latency_us()};
  return p;
}

bool gpu_in_host(const pb::RuntimeConfig& cfg, const std::string& name,
                 const gpu_hosting& hosting, std::string* why) {
  auto& d = cfg.devices();
  if (auto i = d.gpu_host_process().find(name); i != d.gpu_host_process().end())
    return i->second;
  if (d.has_gpu_host_processes())
    return d.gpu_host_processes();
  auto because = [&](std::string what) {
    if (why != nullptr)
      *why = std::move(what);
    return false;
  };
  if (!cfg.share_socket().empty())
    return because("the node shares objects with other processes "
                   "(share_socket), which map GPU memory of the node's "
                   "process (CUDA or HIP IPC)");
  if (!hosting.can_host)
    return because(hosting.why_not);
  return true;
}

namespace {

// Where bundles load (in isolation, `timeout`) and where their CPU code
// runs, as the config's kernel_bundles section says.
kernels::bundle::isolation bundle_code(std::chrono::milliseconds timeout,
                                       bool in_process, uint64_t memory) {
  auto iso = devices::gpu::bundle_isolation(timeout);
  iso.cpu_in_process = in_process;
  iso.host_memory_limit = memory;
  return iso;
}

// Sets on `devs` the `links` between them (of the GPU backends' health
// libraries, and as simulated GPUs' configs name them), both ways; the
// better kind where a pair is named twice. A simulated GPU's link to a
// device that is not another simulated GPU of the config is refused.
caf::error set_links(std::vector<std::shared_ptr<devices::device>>& devs,
                     const std::vector<devices::gpu::discovery::link>& links) {
  std::map<std::string, devices::device*> by_name;
  for (auto& d : devs)
    by_name[d->info().name] = d.get();
  std::map<std::string, std::map<std::string, link_kind>> table;
  for (auto& l : links) {
    auto a = by_name.find(l.a);
    auto b = by_name.find(l.b);
    if (a == by_name.end() || b == by_name.end() || l.a == l.b ||
        a->second->info().kind != b->second->info().kind ||
        a->second->info().kind == device_kind::cpu)
      return make_error(errc::malformed_config,
                        "simulated GPU '" + l.a + "' is linked to '" +
                            l.b.substr(0, 64) +
                            "', which is not another simulated GPU of "
                            "the config");
    auto& ab = table[l.a][l.b];
    ab = std::max(ab, l.kind);
    table[l.b][l.a] = ab;
  }
  for (auto& [name, peers] : table) {
    std::vector<device_link> out;
    for (auto& [peer, kind] : peers)
      out.push_back({peer, kind});
    by_name[name]->set_links(std::move(out));
  }
  return {};
}

} // namespace

namespace {

// The node's stand-in of real GPU `info` (its name and streams as it will
// run), which a host process opens at `ordinal` of `vendor`'s runtime,
// seeing it through CUDA_VISIBLE_DEVICES `visible` (a MIG instance's
// UUID; empty: the node's own).
std::shared_ptr<hosted_device> hosted_gpu(const std::string& vendor,
                                          int ordinal,
                                          const std::string& visible,
                                          device_info info) {
  pb::HostSpec spec;
  auto* g = spec.mutable_gpu();
  g->set_vendor(vendor);
  g->set_ordinal(uint32_t(ordinal));
  g->set_name(info.name);
  g->set_streams(info.streams);
  // A MIG instance is named by CUDA_VISIBLE_DEVICES; the runtime there may
  // spell its UUID as the GPU's, so it is not checked.
  g->set_uuid(visible.empty() ? info.uuid : "");
  g->set_visible(visible);
  info.host_process = true;
  return std::make_shared<hosted_device>(std::move(info), std::move(spec));
}

} // namespace

caf::expected<std::vector<std::shared_ptr<devices::device>>>
make_devices(const pb::RuntimeConfig& cfg, const gpu_hosting& hosting,
             devices::gpu::discovery* found) {
  auto bad = [](const std::string& what) {
    return make_error(errc::malformed_config, what);
  };
  std::vector<std::shared_ptr<devices::device>> out;
  std::vector<devices::gpu::discovery::link> links;
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
  // A GPU has one more stream than it launches on: its pool's fill stream.
  constexpr uint32_t max_gpu_streams =
      devices::memory::pool_resource::max_streams - 1;
  if (cfg.devices().gpu_streams() > max_gpu_streams)
    return bad("gpu_streams is " + std::to_string(cfg.devices().gpu_streams()) +
               ", at most " + std::to_string(max_gpu_streams) +
               " are supported");
  if (!cfg.devices().has_gpus() || cfg.devices().gpus()) {
    devices::gpu::gpu_options opts;
    if (cfg.devices().gpu_streams() > 0)
      opts.streams = cfg.devices().gpu_streams();
    // A GPU that runs in a host process is only probed here: its context,
    // streams and memory are made in that process.
    auto gpus = devices::gpu::discover(opts, [&](const std::string& name) {
      return !gpu_in_host(cfg, name, hosting);
    });
    size_t opened = 0, probed = 0;
    // One watch per bus, shared by the MIG instances of one card (each
    // hears its own GPU instance's events and the whole GPU's); started
    // once they all joined.
    std::map<std::string, std::shared_ptr<devices::health::gpu_watch>> watches;
    for (auto& name : gpus.order) {
      if (opened < gpus.devices.size() &&
          gpus.devices[opened]->info().name == name) {
        out.push_back(gpus.devices[opened++]);
        continue;
      }
      auto& p = gpus.probed[probed++];
      auto dev = hosted_gpu(p.vendor, p.ordinal, p.visible, p.info);
      // A health library watches a bus id once: a GPU of the node's
      // process on the same card keeps its watch.
      bool shared = std::any_of(
          gpus.devices.begin(), gpus.devices.end(), [&](const auto& g) {
            return g->info().pci_bus_id == p.info.pci_bus_id;
          });
      if (!shared) {
        auto& w = watches[p.info.pci_bus_id];
        if (!w && p.monitor)
          w = std::make_shared<devices::health::gpu_watch>(p.monitor,
                                                           p.info.pci_bus_id);
        dev->watch_health(p.monitor, w, p.gpu_instance);
      }
      out.push_back(std::move(dev));
    }
    for (auto& [bus, w] : watches)
      if (w)
        w->start();
    links = gpus.links;
    if (found != nullptr)
      *found = std::move(gpus);
  }
  // Names are unique in the fleet: the real GPUs' are taken.
  std::set<std::string> names;
  for (auto& d : out)
    names.insert(d->info().name);
  for (auto& g : cfg.devices().sim_gpu()) {
    if (g.name().empty())
      return bad("a simulated GPU has no name");
    if (!names.insert(g.name()).second || g.name().rfind("cpu", 0) == 0)
      return bad("simulated GPU name '" + g.name() +
                 "' is used twice or clashes with a CPU worker or a GPU of "
                 "this machine");
    auto p = sim_params_of(g);
    if (!p)
      return p.error();
    for (auto& peer : g.nvlink())
      links.push_back({g.name(), peer, link_kind::fabric});
    for (auto& peer : g.p2p())
      links.push_back({g.name(), peer, link_kind::pcie});
    if (g.host_process()) {
      pb::HostSpec spec;
      *spec.mutable_sim_gpu() = g;
      auto info = devices::sim::sim_info(*p);
      info.host_process = true;
      out.push_back(
          std::make_shared<hosted_device>(std::move(info), std::move(spec)));
      continue;
    }
    auto dev = devices::sim::make_sim_device(std::move(*p));
    if (!dev)
      return dev.error();
    out.push_back(std::move(*dev));
  }
  if (auto err = set_links(out, links))
    return err;
  // A node may have no devices of its own when it joins remote hosts
  // (each of which serves one at least).
  if (out.empty() && cfg.network().join_size() == 0)
    return bad("the config has no devices (cpu_workers: 0 and no GPUs)");
  if (out.size() > max_devices)
    return bad("at most " + std::to_string(max_devices) +
               " devices are supported, the config has " +
               std::to_string(out.size()));
  return out;
}

namespace {

bool runnable(const std::string& path) {
  return !path.empty() && ::access(path.c_str(), X_OK) == 0;
}

} // namespace

caf::expected<std::string> host_binary(const pb::RuntimeConfig& cfg) {
  auto& named = cfg.devices().host_binary();
  if (!named.empty()) {
    if (!runnable(named))
      return make_error(errc::malformed_config,
                        "devices.host_binary: cannot run " + named + ": " +
                            std::strerror(errno));
    return named;
  }
  // The `cohort` beside the running program (the build tree, an install),
  // else the installed one.
  std::error_code ec;
  auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    auto beside = (self.parent_path() / "cohort").string();
    if (runnable(beside))
      return beside;
  }
  if (runnable(COHORT_INSTALLED_BINARY))
    return std::string{COHORT_INSTALLED_BINARY};
  return make_error(errc::malformed_config,
                    "devices in host processes run the cohort program, found "
                    "neither beside this program nor at " +
                        std::string{COHORT_INSTALLED_BINARY} +
                        ": set devices.host_binary");
}

runtime::runtime(caf::actor_system& sys) : sys_(sys) {
  // nop
}

runtime::~runtime() {
  stop();
}

namespace {

// Configures device `i`'s memory for `lease`: the runtime's share of it,
// `pool`, its tenants' quotas and reservations; an in-process device's
// charges also go to `ledger`. Used at start for every device, and for one
// a rescan adds.
caf::error configure_device_memory(
    devices::device& dev, size_t i, const pb::RuntimeConfig& cfg,
    const quota_lease& lease, const devices::memory::pool_options& pool,
    const std::shared_ptr<devices::memory::tenant_ledger>& ledger,
    const std::shared_ptr<devices::memory::memory_observer>& observer) {
  if (auto* hosted = dynamic_cast<hosted_device*>(&dev)) {
    // A remote host's config sets its devices' memory.
    if (hosted->remote())
      return {};
    // Its memory is made in its host process, from its spec. Tenants'
    // global quotas are kept by the balancer's books there, not by a
    // ledger shared with the node's other devices.
    auto& spec = hosted->mutable_spec();
    auto limit = lease.devices[i].limit;
    // A MIG compute instance's host sees its whole GPU instance, which
    // other compute instances share: it is held to its part.
    if (!spec.gpu().visible().empty()) {
      auto part = dev.info().memory_bytes;
      limit = limit == 0 ? part : std::min(limit, part);
    }
    spec.set_memory_limit(limit);
    *spec.mutable_pool() = cfg.pool();
    for (auto& p : lease.policies) {
      if (p.device_quota[i] > 0)
        (*spec.mutable_tenant_limit())[p.tenant] = p.device_quota[i];
      if (p.device_reserve[i] > 0)
        (*spec.mutable_reservation())[p.tenant] = p.device_reserve[i];
    }
    return {};
  }
  auto* mem = dev.memory();
  if (mem == nullptr)
    return {};
  devices::memory::memory_options opts;
  opts.limit = lease.devices[i].limit;
  opts.pool = pool;
  for (auto& p : lease.policies) {
    if (p.device_quota[i] > 0)
      opts.tenant_limits[p.tenant] = p.device_quota[i];
    if (p.device_reserve[i] > 0)
      opts.reservations[p.tenant] = p.device_reserve[i];
  }
  opts.ledger = ledger;
  opts.observer = observer;
  if (auto err = mem->configure(std::move(opts)))
    return make_error(errc::malformed_config, describe(err));
  return {};
}

} // namespace

caf::expected<memory_setup>
configure_memory(const std::vector<std::shared_ptr<devices::device>>& devs,
                 const pb::RuntimeConfig& cfg, const quota_lease& lease,
                 std::shared_ptr<devices::memory::memory_observer> observer) {
  std::map<std::string, uint64_t> global;
  for (auto& p : lease.policies)
    global[p.tenant] = p.memory_quota;
  memory_setup out;
  out.ledger = std::make_shared<devices::memory::tenant_ledger>(global);
  out.pools = config::pool_options_for(cfg, lease);
  for (size_t i = 0; i < devs.size(); ++i)
    if (auto err = configure_device_memory(*devs[i], i, cfg, lease,
                                           out.pools[i], out.ledger, observer))
      return err;
  return out;
}

namespace {

using bundle_result =
    std::variant<kernels::bundle::loaded_bundle, kernels::bundle::refused>;

// The audit detail of a bundle that loaded.
std::string loaded_detail(const std::string& dir,
                          const kernels::bundle::loaded_bundle& b) {
  auto out = "loaded " + b.name + " " + b.version + " from " + dir + " (key " +
             b.key_id + ", manifest SHA-256 " + b.manifest_sha256 +
             (b.fresh ? "" : ", loaded before") + "): ";
  for (size_t i = 0; i < b.kernels.size(); ++i)
    out += (i == 0 ? "" : ", ") + b.kernels[i].first;
  if (!b.probed.loaded.empty()) {
    out += "; loaded first in isolation: ";
    for (size_t i = 0; i < b.probed.loaded.size(); ++i)
      out += (i == 0 ? "" : ", ") + b.probed.loaded[i];
  }
  for (auto& note : b.probed.notes)
    out += "; " + note;
  return out;
}

} // namespace

caf::expected<std::unique_ptr<runtime>>
runtime::start(caf::actor_system& sys, const pb::RuntimeConfig& cfg,
               std::vector<std::shared_ptr<devices::device>> extra,
               std::shared_ptr<devices::memory::memory_observer> observer) {
  kernels::use_single_threaded_blas();
  // Every section but the grants, compiled and checked once, before
  // anything is allocated or started.
  auto settings = config::compile(cfg);
  if (!settings)
    return settings.error();
  // Real GPUs run in host processes of their own unless the config says
  // otherwise or the node cannot start them (then in its own process, and
  // the audit says why).
  gpu_hosting hosting;
  if (!sys.has_middleman()) {
    hosting.can_host = false;
    hosting.why_not =
        "the actor system has no CAF middleman (cohort::system_config loads "
        "it on a machine with /dev/nvidiactl or /dev/kfd, or for a config "
        "with gpu_host_processes: true; an application's own actor system "
        "config calls cohort::load_network)";
  } else if (auto binary = host_binary(cfg); !binary) {
    hosting.can_host = false;
    hosting.why_not = describe(binary.error());
  }
  devices::gpu::discovery found;
  auto devs = make_devices(cfg, hosting, &found);
  if (!devs)
    return devs.error();
  std::vector<audit_event> hosting_notes;
  for (auto& d : *devs) {
    auto& x = d->info();
    if (x.simulated || x.host_process ||
        (x.kind != device_kind::cuda_gpu && x.kind != device_kind::hip_gpu))
      continue;
    std::string why;
    gpu_in_host(cfg, x.name, hosting, &why);
    if (!why.empty())
      hosting_notes.push_back(
          {audit_kind::device_event, "", 0, x.name, "",
           "runs in the node's process, not in a device host process of its "
           "own: " +
               why,
           wall_clock_ns()});
  }
  for (auto& d : extra)
    devs->push_back(std::move(d));
  // The devices of the remote hosts it joins come last.
  auto net = compile_network(cfg);
  if (!net)
    return net.error();
  if (!net->join.empty()) {
    auto joined = join_remote_hosts(sys, *net);
    if (!joined)
      return joined.error();
    std::set<std::string> names;
    for (auto& d : *devs)
      names.insert(d->info().name);
    for (auto& d : *joined) {
      if (!names.insert(d->info().name).second)
        return make_error(errc::malformed_config,
                          "the remote device host " + d->info().remote +
                              " has a device named '" + d->info().name +
                              "', as this node has already: device names are "
                              "unique in a fleet");
      devs->push_back(std::move(d));
    }
    if (devs->size() > max_devices)
      return make_error(errc::malformed_config,
                        "at most " + std::to_string(max_devices) +
                            " devices are supported, the fleet has " +
                            std::to_string(devs->size()) +
                            " with its remote hosts'");
    settings->supervisor.fleet_token = net->token;
    settings->supervisor.connect_timeout = net->connect_timeout;
  }
  // GPUs that a rescan adds run in host processes too: the program is
  // found whenever the node can start them.
  if (hosting.can_host || std::any_of(devs->begin(), devs->end(), [](auto& d) {
        auto* h = dynamic_cast<hosted_device*>(d.get());
        return h != nullptr && !h->remote();
      })) {
    if (!sys.has_middleman())
      return make_error(errc::malformed_config,
                        "devices in host processes need CAF's middleman in "
                        "the actor system: make its config with "
                        "cohort::system_config from the runtime config, or "
                        "load caf::io::middleman");
    auto binary = host_binary(cfg);
    if (!binary)
      return binary.error();
    settings->supervisor.host_binary = std::move(*binary);
    if (cfg.devices().host_start_timeout_ms() > 0)
      settings->supervisor.host_start_timeout =
          std::chrono::milliseconds{cfg.devices().host_start_timeout_ms()};
  }
  std::vector<device_info> infos;
  for (auto& d : *devs)
    infos.push_back(d->info());
  // The config's bundles load before its grants compile: a grant may name
  // their kernels. What became of each is recorded once the audit and
  // alert actors run.
  std::vector<std::pair<std::string, bundle_result>> bundles;
  // Where the isolated loader is and which GPU plugins it loads with: found
  // (plugins loaded) only when a bundle is loaded.
  std::shared_ptr<const kernels::bundle::isolation> isolation;
  if (!settings->bundles.empty())
    isolation = std::make_shared<const kernels::bundle::isolation>(bundle_code(
        settings->bundle_load_timeout, settings->bundle_cpu_in_process,
        settings->bundle_host_memory));
  for (auto& dir : settings->bundles)
    bundles.emplace_back(
        dir, kernels::bundle::load_bundle(dir, *settings->trust, *isolation));
  bool refused = std::any_of(bundles.begin(), bundles.end(), [](auto& b) {
    return std::holds_alternative<kernels::bundle::refused>(b.second);
  });
  if (auto err = config::resolve_kernel_timeouts(settings->supervisor, refused))
    return err;
  auto lease = config::compile_quotas(cfg, infos);
  if (!lease)
    return lease.error();
  auto memory = configure_memory(*devs, cfg, *lease, observer);
  if (!memory)
    return memory.error();
  auto& path = settings->audit_path;
  auto log = audit::audit_log::open(path, settings->audit);
  if (!log)
    return log.error();
  // The balancer records its common events by index: tenants in the
  // lease's order, devices by index.
  {
    std::vector<std::string> tenants, names;
    for (auto& p : lease->policies)
      tenants.push_back(p.tenant);
    for (auto& d : infos)
      names.push_back(d.name);
    (*log)->set_names(std::move(tenants), std::move(names));
  }
  std::unique_ptr<runtime> rt{new runtime(sys)};
  if (cfg.shutdown_drain_ms() > 0)
    rt->drain_timeout_ = std::chrono::milliseconds{cfg.shutdown_drain_ms()};
  rt->roster_ = std::make_shared<device_roster>(std::move(*devs));
  rt->audit_path_ = path;
  // Detached: the log blocks in write(2) and fdatasync, which must not hold
  // a scheduler thread that other actors need.
  rt->audit_ = sys.spawn<caf::detached>(
      audit_impl, std::shared_ptr<audit::audit_log>{std::move(*log)});
  auto& bcfg = settings->balancer;
  auto& scfg = settings->supervisor;
  bcfg.pools = memory->pools;
  // The quota actor leases every tenant's terms to the balancer, which
  // admits under them without a message per item.
  rt->balancer_ =
      sys.spawn(balancer_impl, std::move(infos), *lease, rt->audit_, bcfg);
  rt->quota_ = sys.spawn(quota_impl, std::move(*lease), rt->balancer_);
  rt->hub_ = std::make_unique<client_hub>(sys, rt->balancer_);
  rt->xid_policy_ = scfg.xid_policy;
  rt->supervisor_ =
      sys.spawn(supervisor_impl, rt->roster_, rt->balancer_, rt->audit_, scfg);
  // The balancer hears when the audit log stops or starts being writable.
  caf::anon_send(rt->audit_, watch_atom::value,
                 caf::actor_cast<audit_listener>(rt->balancer_));
  rt->cfg_ = cfg;
  rt->ledger_ = memory->ledger;
  rt->observer_ = std::move(observer);
  rt->hosting_ = hosting;
  for (auto& b : found.backends)
    if (b.monitor)
      rt->monitors_[b.vendor] = b.monitor;
  // The alert actor reads the devices' Xid counts (atomics) itself.
  auto xids = [roster = rt->roster_] {
    std::vector<device_xids> out;
    for (auto& d : roster->devices())
      out.push_back({d->info().name, d->xid_errors(), d->last_xid()});
    return out;
  };
  rt->alerts_ =
      sys.spawn(alert_impl, settings->alerts, rt->balancer_, rt->supervisor_,
                rt->quota_, rt->audit_, xid_source{std::move(xids)});
  // Health counters are read on a thread of their own (a vendor library's
  // call may block).
  if (auto ms = cfg.supervision().telemetry_interval_ms(); ms > 0)
    rt->telemetry_interval_ = std::chrono::milliseconds{std::max(ms, 10u)};
  rt->telemetry_ = sys.spawn<caf::detached>(
      telemetry_impl, rt->roster_, rt->telemetry_interval_, scfg.heat,
      caf::actor_cast<heat_listener>(rt->supervisor_));
  rt->trust_ = settings->trust;
  rt->isolation_ = std::move(isolation);
  rt->bundle_timeout_ = settings->bundle_load_timeout;
  rt->bundle_in_process_ = settings->bundle_cpu_in_process;
  rt->bundle_host_memory_ = settings->bundle_host_memory;
  for (auto& [dir, r] : bundles) {
    if (auto* no = std::get_if<kernels::bundle::refused>(&r))
      rt->record_bundle(dir, "", to_string(no->reason), no->detail);
    else
      rt->record_bundle(
          dir, std::get<kernels::bundle::loaded_bundle>(r).name, "",
          loaded_detail(dir, std::get<kernels::bundle::loaded_bundle>(r)));
  }
  if (!hosting_notes.empty())
    caf::anon_send(rt->audit_, record_atom::value, std::move(hosting_notes));
  caf::scoped_actor self{sys};
  caf::error failure;
  self->request(rt->supervisor_, caf::infinite, start_atom::value)
      .receive([](bool) {}, [&](caf::error& err) { failure = std::move(err); });
  if (failure)
    return failure;
  rt->share_socket_ = cfg.share_socket();
  if (!rt->share_socket_.empty()) {
    // The share socket's thread asks the balancer as any client does.
    auto* raw = rt.get();
    cohort::objects::share_backend backend;
    backend.attach = [raw](const std::string& token, const share_peer& peer,
                           bool write) {
      return raw->ask<attachment_info>(raw->balancer_, object_atom::value,
                                       attach_atom::value, token, peer, write);
    };
    backend.detach = [raw](uint64_t id, bool died) {
      caf::anon_send(raw->balancer_, object_atom::value, detach_atom::value, id,
                     died);
    };
    auto server =
        cohort::objects::share_server::start(rt->share_socket_, backend);
    if (!server) {
      rt->stop();
      return server.error();
    }
    rt->share_ = std::move(*server);
  }
  rt->start_rescans(cfg);
  if (settings->exec_sessions) {
    // The exec socket's thread charges leases to the balancer's quota book
    // and records what happens to sessions in the audit log.
    auto* raw = rt.get();
    exec::session_backend backend;
    std::set<std::string> tenants;
    for (auto& t : cfg.tenant())
      tenants.insert(t.tenant());
    backend.known = [tenants = std::move(tenants)](const std::string& t) {
      return tenants.contains(t);
    };
    backend.charge = [raw](const std::string& tenant,
                           uint64_t bytes) -> caf::error {
      auto ok = raw->ask<bool>(raw->balancer_, exec_atom::value,
                               charge_atom::value, tenant, bytes);
      return ok ? caf::error{} : ok.error();
    };
    backend.refund = [raw](const std::string& tenant, uint64_t bytes) {
      caf::anon_send(raw->balancer_, exec_atom::value, refund_atom::value,
                     tenant, bytes);
    };
    backend.audit = [raw](const std::string& tenant, uint64_t session,
                          const std::string& detail) {
      std::vector<audit_event> evs{{audit_kind::exec_session, tenant, session,
                                    "", "", detail, wall_clock_ns()}};
      caf::anon_send(raw->audit_, record_atom::value, std::move(evs));
    };
    auto server = exec::session_server::start(*settings->exec_sessions,
                                              std::move(backend));
    if (!server) {
      rt->stop();
      return server.error();
    }
    rt->exec_ = std::move(*server);
  }
  return rt;
}

std::optional<exec::session_stats> runtime::exec_sessions() const {
  if (!exec_)
    return std::nullopt;
  return exec_->stats();
}

std::string runtime::exec_socket() const {
  return exec_ ? exec_->path() : std::string{};
}

void runtime::start_rescans(const pb::RuntimeConfig& cfg) {
  auto& d = cfg.devices();
  if (d.has_gpus() && !d.gpus())
    return;
  // The node's own real GPUs on this machine (not a remote host's).
  std::vector<rescan_gpu> gpus;
  auto devs = roster_->devices();
  for (size_t i = 0; i < devs.size(); ++i) {
    auto& x = devs[i]->info();
    if (x.simulated || !x.remote.empty() ||
        (x.kind != device_kind::cuda_gpu && x.kind != device_kind::hip_gpu))
      continue;
    rescan_gpu g;
    g.index = i;
    g.vendor = x.kind == device_kind::cuda_gpu ? "CUDA" : "HIP";
    g.info = x;
    if (auto* h = dynamic_cast<hosted_device*>(devs[i].get())) {
      if (h->remote() || !h->spec().has_gpu())
        continue;
      g.hosted = true;
      g.ordinal = int(h->spec().gpu().ordinal());
      g.visible = h->spec().gpu().visible();
    }
    gpus.push_back(std::move(g));
  }
  rescan_settings s;
  bool plugin_loaded = devices::gpu::plugin("CUDA").entry != nullptr ||
                       devices::gpu::plugin("HIP").entry != nullptr;
  s.interval = std::chrono::milliseconds{d.has_rescan_interval_ms()
                                             ? d.rescan_interval_ms()
                                         : plugin_loaded ? 60'000u
                                                         : 0u};
  if (d.rescan_missing_scans() > 0)
    s.missing_scans = d.rescan_missing_scans();
  if (d.rescan_timeout_ms() > 0)
    s.timeout = std::chrono::milliseconds{d.rescan_timeout_ms()};
  rescan_actions act;
  auto sup = supervisor_;
  auto audit = audit_;
  act.remove = [sup](size_t index, const std::string& why) {
    caf::anon_send(sup, remove_atom::value, uint32_t(index), why);
  };
  act.move = [sup](size_t index, int ordinal, const std::string& visible) {
    caf::anon_send(sup, move_atom::value, uint32_t(index), int32_t(ordinal),
                   visible);
  };
  act.restore = [sup](size_t index) {
    caf::anon_send(sup, restore_atom::value, uint32_t(index));
  };
  act.add = [this](const devices::gpu::scanned_gpu& found) {
    return add_scanned_gpu(found);
  };
  act.audit = [audit](const std::string& device, const std::string& detail) {
    std::vector<audit_event> evs{
        {audit_kind::device_event, "", 0, device, "", detail, wall_clock_ns()}};
    caf::anon_send(audit, record_atom::value, std::move(evs));
  };
  rescanner_ =
      std::make_unique<device_rescanner>(std::move(gpus), s, std::move(act));
  rescanner_->start();
}

std::string fresh_gpu_name(const std::string& listed,
                           const std::vector<std::string>& taken) {
  if (!listed.empty() &&
      std::find(taken.begin(), taken.end(), listed) == taken.end())
    return listed;
  size_t letters = 0;
  while (letters < listed.size() &&
         std::isalpha(static_cast<unsigned char>(listed[letters])))
    ++letters;
  auto prefix = letters > 0 ? listed.substr(0, letters) : std::string{"gpu"};
  uint64_t next = 0;
  for (auto& t : taken) {
    if (!t.starts_with(prefix))
      continue;
    uint64_t n = 0;
    size_t digits = 0;
    for (size_t i = prefix.size();
         i < t.size() && std::isdigit(static_cast<unsigned char>(t[i])) &&
         digits < 9;
         ++i, ++digits)
      n = n * 10 + uint64_t(t[i] - '0');
    if (digits > 0)
      next = std::max(next, n + 1);
  }
  return prefix + std::to_string(next);
}

caf::expected<size_t>
runtime::add_device(std::shared_ptr<devices::device> dev) {
  auto bad = [](const std::string& why) {
    return make_error(errc::invalid_arguments, "add_device: " + why);
  };
  if (!dev)
    return bad("no device given");
  // One change of the fleet or its terms at a time (set_tenant_limits).
  std::lock_guard<std::mutex> guard{cfg_mtx_};
  if (stopped_)
    return make_error(errc::shutting_down, "the runtime is stopped");
  auto info = dev->info();
  auto infos = roster_->infos();
  if (info.name.empty())
    return bad("the device has no name");
  for (auto& x : infos)
    if (x.name == info.name)
      return bad("a device is named '" + info.name +
                 "' already: device names are unique in a fleet");
  if (infos.size() >= max_devices)
    return bad("the fleet has " + std::to_string(infos.size()) +
               " devices, the most it can hold");
  auto index = infos.size();
  infos.push_back(info);
  // The config's grants, quotas and pool, compiled for the fleet with it:
  // its column is what they say for its name.
  auto lease = config::compile_quotas(cfg_, infos);
  if (!lease)
    return lease.error();
  auto pools = config::pool_options_for(cfg_, *lease);
  if (auto err = configure_device_memory(*dev, index, cfg_, *lease,
                                         pools[index], ledger_, observer_))
    return err;
  // The audit log knows its name before any entry refers to it.
  if (auto named =
          ask<bool>(audit_, device_atom::value, uint32_t(index), info.name);
      !named)
    return named.error();
  auto joined = ask<uint32_t>(quota_, add_atom::value, info, std::move(*lease),
                              pools[index]);
  if (!joined)
    return joined.error();
  if (*joined != index)
    return make_error(errc::invalid_transition,
                      "add_device: the balancer gave index " +
                          std::to_string(*joined) + ", not " +
                          std::to_string(index));
  roster_->add(dev);
  if (auto started = ask<bool>(supervisor_, add_atom::value, *joined); !started)
    return started.error();
  return index;
}

caf::expected<rescan_gpu>
runtime::add_scanned_gpu(const devices::gpu::scanned_gpu& found) {
  pb::RuntimeConfig cfg;
  {
    std::lock_guard<std::mutex> guard{cfg_mtx_};
    cfg = cfg_;
  }
  std::vector<std::string> taken;
  for (auto& x : roster_->infos())
    taken.push_back(x.name);
  auto name = fresh_gpu_name(found.info.name, taken);
  std::string why;
  if (!gpu_in_host(cfg, name, hosting_, &why))
    return make_error(
        errc::invalid_transition,
        "it would run in the node's process (" +
            (why.empty() ? std::string{"devices.gpu_host_processes"} : why) +
            "), whose GPU runtime lists its GPUs once: restart the node to "
            "use it");
  auto streams = cfg.devices().gpu_streams() > 0
                     ? cfg.devices().gpu_streams()
                     : devices::gpu::gpu_options{}.streams;
  auto info = found.info;
  info.name = name;
  info.streams = streams;
  auto dev = hosted_gpu(found.vendor, found.ordinal, found.visible, info);
  // Its health is read and its events watched here, as for the GPUs found
  // at start: a MIG instance that appears beside instances of its card
  // the node runs joins their watch (a library watches a bus once), with
  // its own GPU instance; a card a GPU of the node's process holds keeps
  // that GPU's watch.
  if (auto m = monitors_.find(found.vendor); m != monitors_.end()) {
    auto bus = devices::canonical_pci_bus_id(info.pci_bus_id);
    std::shared_ptr<devices::health::gpu_watch> w;
    bool in_node = false;
    for (auto& d : roster_->devices()) {
      if (bus.empty() ||
          devices::canonical_pci_bus_id(d->info().pci_bus_id) != bus)
        continue;
      auto* h = dynamic_cast<hosted_device*>(d.get());
      if (h == nullptr)
        in_node = true;
      else if (h->event_watch())
        w = h->event_watch();
    }
    if (!in_node) {
      if (!w)
        w = std::make_shared<devices::health::gpu_watch>(m->second,
                                                         info.pci_bus_id);
      auto gi =
          found.visible.empty()
              ? devices::health::gpu_event::whole_gpu
              : devices::health::mig_gpu_instance(*m->second, found.visible);
      dev->watch_health(m->second, w, gi);
      w->start();
    }
  }
  auto index = add_device(dev);
  if (!index)
    return index.error();
  rescan_gpu out;
  out.index = *index;
  out.vendor = found.vendor;
  out.ordinal = found.ordinal;
  out.visible = found.visible;
  out.info = dev->info();
  out.hosted = true;
  return out;
}

caf::expected<rescan_report> runtime::rescan() {
  if (stopped_)
    return make_error(errc::shutting_down, "the runtime is stopping");
  if (!rescanner_)
    return make_error(errc::invalid_transition,
                      "this node runs no GPUs of this machine (devices.gpus: "
                      "false): there is nothing to rescan");
  return rescanner_->rescan();
}

std::optional<rescan_counts> runtime::rescans() const {
  if (!rescanner_)
    return std::nullopt;
  return rescanner_->counts();
}

std::map<std::string, std::string> runtime::removed_devices() const {
  return rescanner_ ? rescanner_->removed()
                    : std::map<std::string, std::string>{};
}

std::chrono::milliseconds runtime::rescan_interval() const {
  return rescanner_ ? rescanner_->settings().interval
                    : std::chrono::milliseconds{0};
}

namespace {

caf::error stopped_error() {
  return make_error(errc::shutting_down, "the runtime is stopped");
}

} // namespace

work_future runtime::submit(work_item item) {
  if (stopped_)
    return client_hub::ready(item.id, stopped_error());
  return hub_->submit(std::move(item));
}

work_ticket runtime::submit(work_item item, work_callback done) {
  if (stopped_) {
    done(stopped_error());
    return {};
  }
  return hub_->submit(std::move(item), std::move(done));
}

std::vector<work_future> runtime::submit(std::vector<work_item> items) {
  if (!stopped_)
    return hub_->submit(std::move(items));
  std::vector<work_future> out;
  out.reserve(items.size());
  for (auto& item : items)
    out.push_back(client_hub::ready(item.id, stopped_error()));
  return out;
}

void runtime::submit(std::vector<work_item> items, batch_callback done) {
  if (!stopped_)
    return hub_->submit(std::move(items), std::move(done));
  for (auto& item : items)
    done(item.id, stopped_error());
}

void runtime::cancel(const work_future& f) {
  hub_->cancel(f);
}

void runtime::cancel(const work_ticket& t) {
  if (!stopped_)
    hub_->cancel(t);
}

void runtime::cancel(uint64_t id) {
  if (!stopped_)
    hub_->cancel(id);
}

caf::expected<work_result> runtime::run(work_item item) {
  return submit(std::move(item)).get();
}

caf::expected<work_result> runtime::run(work_item item,
                                        std::chrono::milliseconds timeout) {
  if (timeout.count() <= 0)
    return make_error(errc::invalid_arguments,
                      "run: the timeout must be positive, not " +
                          std::to_string(timeout.count()) + " ms");
  auto id = item.id;
  auto f = submit(std::move(item));
  if (f.wait_for(timeout))
    return f.get();
  // Its end now goes nowhere: it is cancelled so that it ends at once if it
  // still waits.
  cancel(f);
  return make_error(errc::timed_out, "item " + std::to_string(id) +
                                         " did not end within " +
                                         std::to_string(timeout.count()) +
                                         " ms; it was cancelled");
}

caf::expected<device_health_view>
runtime::device_health(const std::string& name) const {
  for (auto& d : roster_->devices()) {
    if (d->info().name != name)
      continue;
    device_health_view v;
    v.device = name;
    v.simulated = d->info().simulated;
    v.samples = d->telemetry_history();
    // The newest sample stands for now: a vendor library's call may block
    // (a GPU that fell off the bus), and this answers the admin API's
    // threads. Devices that never had one (CPU workers, no library) say
    // why at no cost.
    if (!v.samples.empty()) {
      v.now = v.samples.back().sample;
      v.now_ns = v.samples.back().wall_ns;
    } else {
      v.now = d->telemetry();
    }
    v.interval = telemetry_interval_;
    v.xid_errors = d->xid_errors();
    v.last_xid = d->last_xid();
    v.xids = d->recent_xids();
    return v;
  }
  return make_error(errc::unknown_device, "no device is named '" + name + "'");
}

std::shared_ptr<devices::sim::sim_device>
runtime::sim_device(const std::string& name) const {
  for (auto& d : roster_->devices())
    if (d->info().name == name && d->info().simulated)
      return std::dynamic_pointer_cast<devices::sim::sim_device>(d);
  return nullptr;
}

caf::error runtime::inject_sim_fault(const std::string& name,
                                     const sim_fault& f) {
  for (auto& d : roster_->devices()) {
    if (d->info().name != name)
      continue;
    if (auto sim = std::dynamic_pointer_cast<devices::sim::sim_device>(d))
      return apply_sim_fault(*sim, f);
    auto* h = dynamic_cast<hosted_device*>(d.get());
    if (h == nullptr || !d->info().simulated)
      return make_error(errc::invalid_fault,
                        "faults are injected into simulated devices only, "
                        "and " +
                            name + " is not one");
    auto [gate, token] = h->gate();
    if (!gate)
      return make_error(errc::invalid_transition,
                        name + (h->remote() ? " is not joined now"
                                            : " has no host process up now"));
    caf::scoped_actor self{sys_};
    caf::error out;
    self->request(gate, std::chrono::seconds{5}, fault_atom::value, token,
                  h->remote_index(), f)
        .receive([](bool) {},
                 [&](caf::error& err) {
                   if (err == caf::sec::request_timeout)
                     out = make_error(errc::device_lost,
                                      "the host of " + name +
                                          " did not answer within 5 s");
                   else
                     out = std::move(err);
                 });
    if (!out && f.kind == pb::LOSE_PERMANENTLY)
      h->mark_gone();
    return out;
  }
  return make_error(errc::unknown_device, "no device is named '" + name + "'");
}

caf::error runtime::cut_connection(const std::string& name,
                                   std::chrono::milliseconds hold) {
  for (auto& d : roster_->devices()) {
    if (d->info().name != name)
      continue;
    auto* h = dynamic_cast<hosted_device*>(d.get());
    if (h == nullptr)
      return make_error(errc::invalid_fault,
                        name + " runs in the node's process: it has no "
                               "connection to cut");
    endpoint where;
    // A remote host's devices (they share the connection), each with the
    // hold it had, restored when nothing was cut.
    std::vector<
        std::pair<hosted_device*, std::chrono::steady_clock::time_point>>
        held;
    if (h->remote()) {
      where = h->where();
      // Before the cut: no rejoin slips in between.
      auto until = std::chrono::steady_clock::now() + hold;
      for (auto& other : roster_->devices())
        if (auto* o = dynamic_cast<hosted_device*>(other.get());
            o != nullptr && o->remote() &&
            o->info().remote == h->info().remote) {
          held.emplace_back(o, o->held_until());
          o->hold_until(until);
        }
    } else {
      where = endpoint{"127.0.0.1", h->port()};
      if (h->pid() <= 0 || where.port == 0)
        return make_error(errc::invalid_transition,
                          name + " has no host process up now");
    }
    auto n = shut_down_connections(where);
    if (!n || *n == 0)
      for (auto& [o, before] : held)
        o->hold_until(before);
    if (!n)
      return n.error();
    if (*n == 0)
      return make_error(errc::invalid_transition,
                        name + ": this node has no connection to " +
                            to_string(where) + " now");
    return caf::none;
  }
  return make_error(errc::unknown_device, "no device is named '" + name + "'");
}

int runtime::host_pid(const std::string& name) const {
  for (auto& d : roster_->devices())
    if (d->info().name == name)
      if (auto* h = dynamic_cast<hosted_device*>(d.get()))
        return h->pid();
  return 0;
}

template <class T, class Handle, class... Ts>
caf::expected<T> runtime::ask(const Handle& dest, Ts... xs) {
  caf::scoped_actor self{sys_};
  caf::expected<T> out{caf::error{}};
  self->request(dest, caf::infinite, xs...)
      .receive([&](T& x) { out = std::move(x); },
               [&](caf::error& err) {
                 // The actors of a stopped runtime are gone: say so in
                 // Cohort's own terms.
                 if (stopped_ && code_of(err) == errc::none)
                   out = stopped_error();
                 else
                   out = std::move(err);
               });
  return out;
}

namespace {

caf::error error_of(const caf::expected<bool>& x) {
  return x ? caf::error{} : x.error();
}

} // namespace

caf::expected<balancer_stats> runtime::placement_stats() {
  return ask<balancer_stats>(balancer_, stats_atom::value);
}

caf::expected<quota_stats> runtime::admission_stats() {
  auto s = placement_stats();
  if (!s)
    return s.error();
  return std::move(s->admission);
}

caf::expected<headroom_report> runtime::headroom(const std::string& tenant) {
  return ask<headroom_report>(quota_, headroom_atom::value, tenant);
}

caf::expected<object_info> runtime::put_object(const std::string& tenant,
                                               host_buffer data,
                                               const std::string& device) {
  return ask<object_info>(balancer_, object_atom::value, put_atom::value,
                          tenant, std::move(data), device);
}

caf::expected<host_buffer> runtime::get_object(const std::string& tenant,
                                               uint64_t id) {
  return ask<host_buffer>(balancer_, object_atom::value, get_atom::value,
                          tenant, id);
}

void runtime::release_object(uint64_t id) {
  caf::anon_send(balancer_, object_atom::value, release_atom::value, id);
}

caf::expected<std::vector<object_info>>
runtime::objects(const std::string& tenant) {
  return ask<std::vector<object_info>>(balancer_, object_atom::value,
                                       list_atom::value, tenant);
}

caf::expected<std::vector<item_view>> runtime::items(const item_filter& f) {
  return ask<std::vector<item_view>>(balancer_, jobs_atom::value,
                                     list_atom::value, f);
}

caf::expected<item_view> runtime::item(uint64_t job) {
  return ask<item_view>(balancer_, jobs_atom::value, get_atom::value, job);
}

caf::expected<uint64_t> runtime::cancel_items(const item_filter& f,
                                              const std::string& who) {
  return ask<uint64_t>(balancer_, jobs_atom::value, cancel_atom::value, f, who);
}

caf::error runtime::start_trace(uint64_t max_events) {
  return error_of(
      ask<bool>(balancer_, trace_atom::value, start_atom::value, max_events));
}

caf::expected<trace_snapshot> runtime::trace(bool stop) {
  return ask<trace_snapshot>(balancer_, trace_atom::value, get_atom::value,
                             stop);
}

uint64_t runtime::client() const {
  return hub_ ? hub_->client() : 0;
}

caf::expected<std::string> runtime::export_object(const std::string& tenant,
                                                  uint64_t id,
                                                  share_grant grant) {
  if (share_socket_.empty())
    return make_error(errc::invalid_arguments,
                      "this runtime does not share objects: it has no share "
                      "socket (share_socket in its config)");
  return ask<std::string>(balancer_, object_atom::value, export_atom::value,
                          tenant, id, grant);
}

caf::error runtime::unexport_object(const std::string& tenant,
                                    const std::string& token) {
  auto r = ask<bool>(balancer_, object_atom::value, unexport_atom::value,
                     tenant, token);
  if (!r)
    return r.error();
  if (!*r)
    return make_error(errc::invalid_arguments,
                      "no export of " +
                          (tenant.empty() ? std::string{"any tenant"}
                                          : "tenant '" + tenant + "'") +
                          " has this token");
  return caf::none;
}

caf::expected<simulation_report> runtime::simulate(allocation_plan plan) {
  return ask<simulation_report>(quota_, simulate_atom::value, std::move(plan));
}

caf::expected<std::vector<memory_snapshot>> runtime::memory_stats() {
  return ask<std::vector<memory_snapshot>>(supervisor_, memory_atom::value);
}

caf::error runtime::drain(const std::string& device) {
  return error_of(ask<bool>(supervisor_, drain_atom::value, device));
}

caf::error runtime::set_offline(const std::string& device) {
  return error_of(ask<bool>(supervisor_, offline_atom::value, device));
}

caf::error runtime::set_online(const std::string& device) {
  return error_of(ask<bool>(supervisor_, online_atom::value, device));
}

caf::error runtime::set_tenant_limits(const std::string& tenant,
                                      const pb::TenantLimits& limits) {
  std::lock_guard<std::mutex> guard{cfg_mtx_};
  auto next = cfg_;
  pb::TenantGrant* grant = nullptr;
  for (auto& g : *next.mutable_tenant())
    if (g.tenant() == tenant)
      grant = &g;
  if (grant == nullptr)
    return make_error(errc::unknown_tenant,
                      "no tenant is named '" + tenant + "'");
  if (limits.has_max_inflight())
    grant->set_max_inflight(limits.max_inflight());
  if (limits.has_memory_quota_bytes())
    grant->set_memory_quota_bytes(limits.memory_quota_bytes());
  if (limits.has_rate_limit())
    *grant->mutable_rate_limit() = limits.rate_limit();
  auto lease = config::compile_quotas(next, roster_->infos());
  if (!lease)
    return lease.error();
  if (limits.has_memory_quota_bytes())
    if (auto slot = ledger_->slot(tenant); slot >= 0)
      ledger_->set_quota(slot, limits.memory_quota_bytes());
  if (auto x = ask<bool>(quota_, lease_atom::value, std::move(*lease)); !x)
    return x.error();
  cfg_ = std::move(next);
  return caf::none;
}

void runtime::audit_admin(std::string detail) {
  std::vector<audit_event> evs{
      {audit_kind::admin, "", 0, "", "", std::move(detail), wall_clock_ns()}};
  caf::anon_send(audit_, record_atom::value, std::move(evs));
}

caf::expected<std::vector<cohort::alert>> runtime::alerts() {
  return ask<std::vector<cohort::alert>>(alerts_, alerts_atom::value);
}

void runtime::record_bundle(const std::string& dir, const std::string& name,
                            const std::string& reason,
                            const std::string& detail) {
  {
    std::lock_guard guard{bundle_mtx_};
    if (reason.empty())
      ++bundle_counts_.loaded;
    else
      ++bundle_counts_.refused[reason];
    bundle_counts_.last_reason[dir] = reason;
  }
  std::vector<audit_event> evs{
      {audit_kind::kernel_bundle, "", 0, "", reason.empty() ? name : dir,
       reason.empty() ? detail : "refused (" + reason + "): " + detail,
       wall_clock_ns()}};
  caf::anon_send(audit_, record_atom::value, std::move(evs));
  caf::anon_send(alerts_, bundle_atom::value, dir,
                 reason.empty() ? std::string{} : reason + ": " + detail);
}

caf::expected<std::vector<std::string>>
runtime::load_kernel_bundle(const std::string& dir) {
  if (stopped_)
    return make_error(errc::shutting_down, "the runtime has stopped");
  std::shared_ptr<const kernels::bundle::isolation> iso;
  {
    std::lock_guard guard{bundle_mtx_};
    if (!isolation_)
      isolation_ =
          std::make_shared<const kernels::bundle::isolation>(bundle_code(
              bundle_timeout_, bundle_in_process_, bundle_host_memory_));
    iso = isolation_;
  }
  auto r = kernels::bundle::load_bundle(dir, *trust_, *iso);
  if (auto* no = std::get_if<kernels::bundle::refused>(&r)) {
    auto reason = std::string{to_string(no->reason)};
    record_bundle(dir, "", reason, no->detail);
    return make_error(errc::bundle_refused, reason + ": " + no->detail);
  }
  auto& b = std::get<kernels::bundle::loaded_bundle>(r);
  record_bundle(dir, b.name, "", loaded_detail(dir, b));
  std::vector<std::string> names;
  for (auto& [n, id] : b.kernels)
    names.push_back(n);
  return names;
}

bundle_counts runtime::kernel_bundles() const {
  bundle_counts out;
  {
    std::lock_guard guard{bundle_mtx_};
    out = bundle_counts_;
  }
  for (auto& [dir, reason] : out.last_reason)
    if (!reason.empty())
      ++out.refused_now[reason];
  auto hosts = kernels::bundle::hosts_counted();
  out.hosts_started = hosts.started;
  out.host_crashes = hosts.crashed;
  out.host_timeouts = hosts.timed_out;
  return out;
}

std::vector<std::pair<uint64_t, uint32_t>> runtime::xid_errors() const {
  std::vector<std::pair<uint64_t, uint32_t>> out;
  for (auto& d : roster_->devices())
    out.emplace_back(d->xid_errors(), d->last_xid());
  return out;
}

caf::error runtime::crash_device_actor(const std::string& device) {
  return error_of(ask<bool>(supervisor_, crash_atom::value, device));
}

caf::expected<uint64_t> runtime::flush_audit() {
  // The balancer and the supervisor send their buffered events before they
  // reply, so the audit actor has them all before our flush reaches it.
  if (auto x = ask<bool>(balancer_, flush_atom::value); !x)
    return x.error();
  return ask<uint64_t>(audit_, flush_atom::value);
}

caf::expected<cohort::audit_stats> runtime::audit_stats() {
  return ask<cohort::audit_stats>(audit_, stats_atom::value);
}

void runtime::after_callbacks(std::function<void()> fn) {
  if (hub_)
    hub_->after_callbacks(std::move(fn));
  else
    fn();
}

bool runtime::on_callback_thread() const {
  return hub_ && hub_->on_callback_thread();
}

void runtime::stop() {
  // What callbacks submitted before this call (stop from a callback) is
  // admitted before the door closes.
  if (hub_)
    hub_->flush_held();
  if (stopped_.exchange(true)) {
    // Another call stops the runtime: wait until it has, and for the
    // callbacks queued behind it (from a callback: at once, since that
    // call may be waiting for this very callback).
    if (on_callback_thread())
      return;
    std::unique_lock<std::mutex> guard{stop_mtx_};
    stop_cv_.wait(guard, [this] { return stop_done_; });
    guard.unlock();
    hub_->drain();
    return;
  }
  // No rescan acts on a stopping fleet (one under way is stopped), and a
  // device being added has joined every actor before they stop (a later
  // add sees stopped_).
  if (rescanner_)
    rescanner_->stop();
  { std::lock_guard<std::mutex> added{cfg_mtx_}; }
  // What the callback thread still holds goes in before the door closes,
  // or ends with shutting_down.
  hub_->close();
  // Attached processes are detached (their mappings stay theirs) and the
  // share socket goes first: nothing attaches to a stopping runtime.
  if (share_)
    share_->stop();
  // Sessions end (their credit back in the book, each end audited) while
  // the balancer and the audit log still take it.
  if (exec_)
    exec_->stop();
  ask<bool>(balancer_, down_atom::value);
  // Let what is running finish.
  auto deadline = std::chrono::steady_clock::now() + drain_timeout_;
  for (;;) {
    auto s = placement_stats();
    if (!s || s->outstanding == 0 ||
        std::chrono::steady_clock::now() >= deadline)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  caf::scoped_actor self{sys_};
  auto stop_one = [&](caf::actor_addr addr) {
    auto handle = caf::actor_cast<caf::actor>(addr);
    if (!handle)
      return;
    self->monitor(handle);
    self->send_exit(handle, caf::exit_reason::user_shutdown);
    // Its own down message (a gate's may come late, see below).
    bool down = false;
    while (!down)
      self->receive([&](caf::down_msg& dm) { down = dm.source == addr; });
  };
  // Devices first; the balancer then ends what they still held, and its
  // audit events reach the log before the final flush. The balancer stays
  // as a closed door: a client that still holds its handle hears
  // shutting_down rather than nothing.
  stop_one(alerts_.address());
  stop_one(telemetry_.address());
  // The gates of the hosts that run now: gone once the middleman has seen
  // their connections close.
  std::vector<host_gate_actor> gates;
  // (A remote host's connection stays until the actor system ends.)
  for (auto& d : roster_->devices())
    if (auto* h = dynamic_cast<hosted_device*>(d.get()); h && !h->remote())
      if (auto g = h->gate().first)
        gates.push_back(std::move(g));
  stop_one(supervisor_.address());
  // The supervisor ended its hosts. Stop returns once the middleman has
  // taken down what stood for them here (a proxy that outlives the actor
  // system, created by traffic that crossed its shutdown, keeps CAF's
  // network layer alive in a cycle with it), or after a second.
  if (!gates.empty()) {
    for (auto& g : gates)
      self->monitor(g);
    auto left = gates.size();
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds{1};
    while (left > 0 && std::chrono::steady_clock::now() < until)
      self->receive([&](const caf::down_msg&) { --left; },
                    caf::after(std::chrono::milliseconds{100}) >> [] {});
    for (auto& g : gates)
      self->demonitor(g.address());
    gates.clear();
  }
  // Its host processes are gone with the supervisor. CAF registered the
  // balancer when it first sent them a message (a remote node may name an
  // actor it heard from) and would hold it until it quits; the balancer
  // stays for its clients until they let go of it, so the registry lets go
  // now.
  bool hosted = false;
  for (auto& d : roster_->devices())
    if (auto* h = dynamic_cast<hosted_device*>(d.get())) {
      hosted = true;
      h->set_gate({}, {});
    }
  if (hosted)
    sys_.registry().erase(balancer_->id());
  ask<bool>(balancer_, halt_atom::value);
  // Every item has ended now: the callbacks of their ends run before stop
  // returns.
  hub_->drain();
  ask<uint64_t>(audit_, flush_atom::value);
  stop_one(quota_.address());
  stop_one(audit_.address());
  {
    std::lock_guard<std::mutex> guard{stop_mtx_};
    stop_done_ = true;
  }
  stop_cv_.notify_all();
}

} // namespace cohort::actors
