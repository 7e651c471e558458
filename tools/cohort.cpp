// cohort: the command-line program. `cohort help` lists the commands.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <unistd.h>
#include <vector>

#include <caf/all.hpp>

#include "config/compile.hpp"
#include "config/quotas.hpp"
#include "quota/quota_book.hpp"
#include "actors/runtime.hpp"
#include "quota/simulation.hpp"
#include "devices/gpu/discover.hpp"
#include "devices/topology.hpp"
#include "messages/convert.hpp"
#include "messages/errc.hpp"
#include "messages/system_config.hpp"
#include "tools/admin_command.hpp"
#include "tools/audit_command.hpp"
#include "tools/byte_units.hpp"
#include "tools/chaos_command.hpp"
#include "tools/pipeline.hpp"
#include "tools/scheduler_arg.hpp"
#include "tools/serve_command.hpp"

using namespace cohort;

namespace {

constexpr int exit_ok = 0;
constexpr int exit_failed = 1;
constexpr int exit_bad_input = 2;

const char* usage = R"(usage: cohort COMMAND [ARGS]

commands:
  devices [--config FILE]      list every device: CPU workers (hwloc), simulated
                               GPUs, GPU backends. FILE is a runtime config, a
                               pipeline spec or an allocation plan; without it,
                               the default device set
                               (one CPU worker per core + 4 simulated GPUs)
  run PIPELINE [--config FILE] [--audit PATH] [--no-progress]
      [--scheduler KEY=VALUE,...]
                               run a pipeline spec (protobuf text format) and
                               report; exit 1 if any item failed, was lost or
                               differs from the CPU reference. --scheduler
                               sets CAF's scheduler (threads,
                               moderate_sleep_us, ...: cohort.pb.Scheduler)
                               over the config's; so do serve and chaos
  audit verify PATH            check an audit log's hash chain across its
                               rotated segments (PATH.1, PATH.2, ...) and the
                               active file PATH; exit 1 and name the first bad
                               record (file, seq, byte offset) if it fails
  audit show PATH              print every record that verifies (seq, time in
                               ns, kind, tenant, work id, device, kernel,
                               detail), then the verdict
  audit query PATH [--tenant T] [--work-id N] [--device D] [--kind K]
        [--since TIME] [--until TIME] [--json]
                               print the matching records, oldest first,
                               verifying the chain while reading; TIME is ns
                               since the epoch or ISO-8601 UTC
                               (2026-11-24T10:00:00Z); exit 1 if the chain is
                               broken
  quota [--config FILE] [--tenant NAME]
                               what the config grants each tenant: kernels,
                               devices, in-flight cap, rate, memory quotas,
                               reservations, policy, and the headroom per
                               tenant and device of an idle runtime
  chaos SCENARIO... [--seed N] [--scale X] [--soak] [--repeat N]
        [--audit-dir DIR] [--verbose] [--scheduler KEY=VALUE,...]
                               run chaos scenarios (protobuf text format,
                               cohort.pb.ChaosScenario; a directory runs every
                               .textproto in it) and check the invariants:
                               every item ended exactly once, results correct,
                               only allowed errors, no quota passed, the audit
                               chain verifies with a record per item; prints
                               recovery times; exit 1 if an invariant broke.
                               --soak runs 10x the workload over 10x the time;
                               --repeat runs each N times with seeds N, N+1..
  simulate PLAN [--config FILE]
                               dry run of an allocation plan (protobuf text
                               format, cohort.pb.AllocationPlan) against the
                               grants, quotas and device memory; exit 1 if a
                               step would be refused
  serve [--config FILE] [--listen HOST:PORT] [--token-file FILE]
        [--audit PATH] [--pipeline FILE [--repeat N]] [--for SECONDS]
        [--scheduler KEY=VALUE,...]
                               run a node: the runtime plus HTTP on
                               127.0.0.1:9470 by default, Prometheus metrics at
                               /metrics, the admin API under /v1 (mutating
                               calls need the token: --token-file or
                               $COHORT_ADMIN_TOKEN); --pipeline runs a
                               pipeline's batches as its workload. Stops
                               cleanly on SIGINT/SIGTERM (or after --for):
                               what was admitted ends, the audit log is
                               verified; exit 1 if an item did not end
  admin [--url URL] [--token-file FILE] COMMAND
                               the admin API's client: stats, devices,
                               tenants, alerts, metrics, simulate PLAN,
                               drain|offline|online DEVICE, quota TENANT
                               [--max-inflight N] [--memory-quota BYTES]
                               [--rate R] [--burst N]
  help                         this text

exit status: 0 success, 1 the work or the check failed, 2 bad input
)";

int bad_input(const std::string& msg) {
  std::fprintf(stderr, "cohort: %s\n", msg.c_str());
  return exit_bad_input;
}

int bad_input(const caf::error& err) {
  return bad_input(describe(err));
}

// A command's arguments: options that take a value (--config FILE),
// switches (--no-progress) and at most one positional argument (a file).
struct command_args {
  std::map<std::string, std::string> values;
  std::set<std::string> switches;
  /// The first positional argument, and all of them.
  std::string file;
  std::vector<std::string> files;
};

// Parses `args` of command `cmd`; an unknown option, a missing value or a
// second file is bad input (the error says which).
caf::expected<command_args> parse_args(const std::string& cmd,
                                       const std::vector<std::string>& args,
                                       std::set<std::string> with_value,
                                       std::set<std::string> switches = {},
                                       size_t max_files = 0) {
  command_args out;
  auto bad = [&](const std::string& what) {
    return make_error(errc::invalid_arguments, cmd + ": " + what);
  };
  for (size_t i = 0; i < args.size(); ++i) {
    auto& a = args[i];
    if (with_value.count(a) > 0) {
      if (i + 1 >= args.size())
        return bad(a + " needs a value");
      out.values[a] = args[++i];
    } else if (switches.count(a) > 0) {
      out.switches.insert(a);
    } else if (a.rfind("--", 0) == 0 || out.files.size() >= max_files) {
      return bad("unexpected argument '" + a + "'");
    } else {
      out.files.push_back(a);
      out.file = out.files.front();
    }
  }
  return out;
}

// Reads FILE as a pipeline spec or an allocation plan (their runtime
// config), falling back to a runtime config.
caf::expected<pb::RuntimeConfig> read_device_config(const std::string& path) {
  pb::PipelineSpec spec;
  if (!load_text_file(path, spec, errc::malformed_config))
    return tools::config_for(spec);
  pb::AllocationPlan plan;
  if (!load_text_file(path, plan, errc::malformed_config) && plan.has_runtime())
    return plan.runtime();
  return load_config(path);
}

using tools::human_bytes;

// The runtime config of --config FILE, else `fallback`.
caf::expected<pb::RuntimeConfig> config_arg(const command_args& a,
                                            pb::RuntimeConfig fallback) {
  auto i = a.values.find("--config");
  if (i == a.values.end())
    return fallback;
  auto cfg = read_device_config(i->second);
  // The same check as runtime::start's: every command refuses alike.
  if (cfg)
    if (auto err = config::check_config(*cfg))
      return make_error(errc::malformed_config,
                        i->second + ": " + describe(err));
  return cfg;
}

int cmd_devices(const std::vector<std::string>& args) {
  auto a = parse_args("devices", args, {"--config"});
  if (!a)
    return bad_input(a.error());
  auto loaded = config_arg(*a, tools::config_for(pb::PipelineSpec{}));
  if (!loaded)
    return bad_input(loaded.error());
  auto cfg = std::move(*loaded);
  // GPUs are opened here rather than by make_devices, to show what each
  // backend found (or why it found nothing).
  bool use_gpus = !cfg.devices().has_gpus() || cfg.devices().gpus();
  cfg.mutable_devices()->set_gpus(false);
  auto devs = actors::make_devices(cfg);
  if (!devs)
    return bad_input(devs.error());
  devices::gpu::discovery found;
  if (use_gpus) {
    devices::gpu::gpu_options opts;
    if (cfg.devices().gpu_streams() > 0)
      opts.streams = cfg.devices().gpu_streams();
    found = devices::gpu::discover(opts);
    for (auto& g : found.devices)
      devs->push_back(g);
  }
  // Its grants must fit these devices, as runtime::start checks.
  std::vector<device_info> infos;
  for (auto& d : *devs)
    infos.push_back(d->info());
  if (auto lease = config::compile_quotas(cfg, infos); !lease)
    return bad_input(lease.error());
  auto topo = devices::discover_cpu_topology();
  std::printf("CPU topology (hwloc): %u cores, %u hardware threads, %u NUMA "
              "node(s)%s%s\n\n",
              topo.cores, topo.hardware_threads, topo.numa_nodes,
              topo.model.empty() ? "" : ", ", topo.model.c_str());
  std::printf("%-8s %-5s %-10s %-16s %10s %7s %6s %5s %4s\n", "name", "kind",
              "", "model", "memory", "streams", "speed", "cores", "numa");
  for (auto& d : *devs) {
    auto& x = d->info();
    std::string numa = x.numa_node >= 0 ? std::to_string(x.numa_node) : "-";
    std::string cores = x.cores ? std::to_string(x.cores) : "-";
    std::string model = x.model.empty() ? "-" : x.model.substr(0, 16);
    std::printf(
        "%-8s %-5s %-10s %-16s %10s %7u %6.2f %5s %4s\n", x.name.c_str(),
        to_string(x.kind), x.simulated ? "SIMULATED" : "", model.c_str(),
        x.kind == device_kind::cpu ? "host"
                                   : human_bytes(x.memory_bytes).c_str(),
        x.streams, x.speed, cores.c_str(), numa.c_str());
  }
  std::printf("\nGPU backends:\n");
  if (!use_gpus)
    std::printf(
        "  real GPUs disabled by the config (devices { gpus: false })\n");
  for (auto& b : found.backends)
    std::printf("  %-4s %s, %d GPU(s)%s%s\n", b.vendor.c_str(),
                b.built ? "built" : "not built", b.count,
                b.note.empty() ? "" : ": ", b.note.c_str());
  for (auto& g : found.devices) {
    auto& x = g->info();
    std::printf("  %s: %s %s, %u SMs/CUs, PCI %s, NUMA node %s, UUID %s\n",
                x.name.c_str(), x.model.c_str(), x.arch.c_str(),
                x.multiprocessors, x.pci_bus_id.c_str(),
                x.numa_node >= 0 ? std::to_string(x.numa_node).c_str()
                                 : "unknown",
                x.uuid.c_str());
    auto h = g->telemetry();
    if (h.available)
      std::printf("    health: %u%% busy, %s of %s used, %d C, ECC %llu "
                  "corrected / %llu uncorrected\n",
                  h.gpu_util_percent, human_bytes(h.memory_used_bytes).c_str(),
                  human_bytes(h.memory_total_bytes).c_str(), h.temperature_c,
                  (unsigned long long)h.ecc_corrected,
                  (unsigned long long)h.ecc_uncorrected);
    else
      std::printf("    health: unavailable (%s)\n",
                  h.unavailable_reason.c_str());
  }
  return exit_ok;
}

int cmd_run(const std::vector<std::string>& args) {
  auto a = parse_args("run", args, {"--config", "--audit", "--scheduler"},
                      {"--no-progress"}, true);
  if (!a)
    return bad_input(a.error());
  tools::run_options opts;
  opts.progress = a->switches.count("--no-progress") ? nullptr : stderr;
  opts.config_path = a->values["--config"];
  opts.audit_path = a->values["--audit"];
  opts.scheduler = a->values["--scheduler"];
  auto& pipeline = a->file;
  if (pipeline.empty())
    return bad_input("run: missing PIPELINE file (see `cohort help`)");
  auto spec = load_pipeline(pipeline);
  if (!spec)
    return bad_input(spec.error());
  // The actor system runs with the config's scheduler settings.
  auto rt_cfg = tools::runtime_config_of(*spec, opts);
  if (!rt_cfg)
    return bad_input(rt_cfg.error());
  system_config cfg{*rt_cfg};
  caf::actor_system sys{cfg};
  auto report = tools::run_pipeline(sys, *spec, opts);
  if (!report)
    return bad_input(report.error());
  tools::print_report(stdout, *report);
  return report->ok() ? exit_ok : exit_failed;
}

// The devices and the compiled quotas of `cfg` (opens real GPUs if the
// config uses them).
struct quota_setup {
  std::vector<device_info> infos;
  quota_lease lease;
};

caf::expected<quota_setup> setup_quotas(const pb::RuntimeConfig& cfg) {
  auto devs = actors::make_devices(cfg);
  if (!devs)
    return devs.error();
  quota_setup out;
  for (auto& d : *devs)
    out.infos.push_back(d->info());
  auto lease = config::compile_quotas(cfg, out.infos);
  if (!lease)
    return lease.error();
  out.lease = std::move(*lease);
  return out;
}

std::string or_dash(uint64_t b) {
  return b == 0 ? "-" : human_bytes(b);
}

std::string kernel_list(uint32_t mask) {
  std::string out;
  size_t n = 0;
  for (auto id : kernels::all_kernels)
    if (mask & (1u << static_cast<uint32_t>(id))) {
      out += (out.empty() ? "" : " ") + std::string{kernels::name(id)};
      ++n;
    }
  return n == std::size(kernels::all_kernels) ? "* (all)" : out;
}

int cmd_quota(const std::vector<std::string>& args) {
  auto a = parse_args("quota", args, {"--config", "--tenant"});
  if (!a)
    return bad_input(a.error());
  auto cfg = config_arg(*a, tools::config_for(pb::PipelineSpec{}));
  if (!cfg)
    return bad_input(cfg.error());
  auto only = a->values["--tenant"];
  auto setup = setup_quotas(*cfg);
  if (!setup)
    return bad_input(setup.error());
  quota::quota_book book{setup->lease};
  if (!only.empty() && book.tenant_index(only) < 0)
    return bad_input(no_grant(only));
  auto& devs = setup->lease.devices;
  std::printf(
      "devices with device memory (limit: what the runtime hands out)\n");
  std::printf("  %-8s %-10s %10s %10s %10s\n", "device", "", "memory", "limit",
              "reserved");
  std::string cpus;
  for (size_t d = 0; d < devs.size(); ++d) {
    if (!devs[d].has_memory) {
      cpus += " " + devs[d].name;
      continue;
    }
    uint64_t reserved = 0;
    for (size_t t = 0; t < book.tenants(); ++t)
      reserved += book.policy(int(t)).device_reserve[d];
    std::printf("  %-8s %-10s %10s %10s %10s\n", devs[d].name.c_str(),
                setup->infos[d].simulated ? "SIMULATED" : "",
                human_bytes(devs[d].capacity).c_str(),
                human_bytes(devs[d].limit).c_str(), or_dash(reserved).c_str());
  }
  if (!cpus.empty())
    std::printf("CPU workers:%s (host memory, not metered)\n", cpus.c_str());
  if (setup->lease.max_inflight > 0)
    std::printf("runtime: at most %llu items in flight\n",
                (unsigned long long)setup->lease.max_inflight);
  for (size_t t = 0; t < book.tenants(); ++t) {
    auto& p = book.policy(int(t));
    if (!only.empty() && p.tenant != only)
      continue;
    auto h = book.headroom(int(t));
    std::printf("\ntenant %s\n", p.tenant.c_str());
    std::printf("  kernels      %s\n", kernel_list(p.kernel_mask).c_str());
    std::string granted;
    for (size_t d = 0; d < devs.size(); ++d)
      if (p.device_mask & (uint64_t{1} << d))
        granted += (granted.empty() ? "" : " ") + devs[d].name;
    std::printf("  devices      %s\n", granted.c_str());
    std::printf("  in flight    at most %u\n", p.max_inflight);
    if (p.rate > 0)
      std::printf("  rate         %.1f items/s, burst %u\n", p.rate,
                  p.burst > 0 ? p.burst : std::max(1u, uint32_t(p.rate)));
    else
      std::printf("  rate         no limit\n");
    std::printf(
        "  memory quota %s across devices; per item %s\n",
        p.memory_quota ? human_bytes(p.memory_quota).c_str() : "no limit",
        p.max_item_bytes ? human_bytes(p.max_item_bytes).c_str() : "no limit");
    std::printf("  on a limit   %s", to_string(p.on_limit));
    if (p.on_limit != limit_policy::reject)
      std::printf(" (at most %u waiting, %u ms each)", p.queue_limit,
                  p.queue_timeout_ms);
    std::printf("\n");
    if (h.devices.empty())
      continue;
    std::printf("  %-8s %10s %10s %14s\n", "device", "quota", "reserved",
                "headroom");
    for (auto& dh : h.devices)
      std::printf("  %-8s %10s %10s %14s\n", dh.device.c_str(),
                  or_dash(dh.quota).c_str(), or_dash(dh.reserved).c_str(),
                  human_bytes(dh.headroom).c_str());
    if (h.cpu_workers > 0)
      std::printf("  and %u CPU worker(s), for items of any size\n",
                  h.cpu_workers);
  }
  std::printf("\nheadroom: the largest item each tenant could place on each "
              "device of an idle runtime\n");
  return exit_ok;
}

int cmd_simulate(const std::vector<std::string>& args) {
  auto a = parse_args("simulate", args, {"--config"}, {}, true);
  if (!a)
    return bad_input(a.error());
  auto& path = a->file;
  if (path.empty())
    return bad_input("simulate: missing PLAN file (see `cohort help`)");
  auto plan = load_plan(path);
  if (!plan)
    return bad_input(plan.error());
  auto loaded = config_arg(*a, plan->has_runtime()
                                   ? plan->runtime()
                                   : tools::config_for(pb::PipelineSpec{}));
  if (!loaded)
    return bad_input(loaded.error());
  auto& cfg = *loaded;
  auto setup = setup_quotas(cfg);
  if (!setup)
    return bad_input(setup.error());
  auto rep =
      quota::simulate(quota::quota_book{setup->lease}, from_proto(*plan),
                       config::pool_options_for(cfg, setup->lease));
  std::printf("== cohort simulate: %s (dry run, nothing runs) ==\n\n",
              rep.name.empty() ? path.c_str() : rep.name.c_str());
  std::printf("%4s  %-5s %-12s %-8s %10s  %s\n", "step", "op", "tenant",
              "device", "bytes", "outcome");
  size_t refused = 0;
  for (int i = 0; i < plan->step_size(); ++i) {
    auto& st = plan->step(i);
    auto& o = rep.steps[size_t(i)];
    refused += !o.ok;
    std::string outcome =
        o.ok ? (o.detail.empty() ? "ok" : "ok: " + o.detail)
             : std::string{o.soft ? "REFUSED (soft) " : "REFUSED "} + o.detail;
    if (st.free().empty())
      std::printf("%4d  %-5s %-12s %-8s %10s  %s\n", i + 1, "alloc",
                  st.tenant().c_str(), st.device().c_str(),
                  human_bytes(st.bytes()).c_str(), outcome.c_str());
    else
      std::printf("%4d  %-5s %-12s %-8s %10s  %s\n", i + 1, "free",
                  ("'" + st.free() + "'").c_str(), "", "", outcome.c_str());
  }
  std::printf("\n%-8s %10s %10s %10s %10s %12s %13s\n", "device", "limit",
              "in use", "peak", "pool held", "largest free", "fragmentation");
  for (auto& d : rep.devices)
    std::printf("%-8s %10s %10s %10s %10s %12s %12.1f%%\n", d.name.c_str(),
                human_bytes(d.limit).c_str(), human_bytes(d.used).c_str(),
                human_bytes(d.peak_used).c_str(), human_bytes(d.held).c_str(),
                human_bytes(d.largest_free).c_str(), 100.0 * d.fragmentation);
  std::printf("\ntenant peaks:");
  for (auto& [tenant, peak] : rep.tenant_peaks)
    std::printf("  %s=%s", tenant.c_str(), human_bytes(peak).c_str());
  std::printf(
      "\n\nverdict: %s\n",
      refused == 0
          ? "every step fits"
          : (std::to_string(refused) + " step(s) would be refused").c_str());
  return refused == 0 ? exit_ok : exit_failed;
}

} // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "help" || args[0] == "--help" ||
      args[0] == "-h") {
    std::fputs(usage, args.empty() ? stderr : stdout);
    return args.empty() ? exit_bad_input : exit_ok;
  }
  auto cmd = args[0];
  args.erase(args.begin());
  if (cmd == "devices")
    return cmd_devices(args);
  if (cmd == "run")
    return cmd_run(args);
  if (cmd == "audit")
    return tools::run_audit(args, stdout);
  if (cmd == "quota")
    return cmd_quota(args);
  if (cmd == "simulate")
    return cmd_simulate(args);
  if (cmd == "serve")
    return tools::cmd_serve(args);
  if (cmd == "admin")
    return tools::cmd_admin(args);
  if (cmd == "chaos") {
    auto a = parse_args(
        "chaos", args,
        {"--seed", "--scale", "--repeat", "--audit-dir", "--scheduler"},
        {"--soak", "--verbose"}, size_t(-1));
    if (!a)
      return bad_input(a.error());
    tools::chaos_options opts;
    opts.files = a->files;
    opts.soak = a->switches.count("--soak") > 0;
    opts.verbose = a->switches.count("--verbose") > 0;
    for (auto& [k, v] : a->values) {
      if (k == "--audit-dir") {
        opts.audit_dir = v;
        continue;
      }
      if (k == "--scheduler") {
        pb::RuntimeConfig sched;
        if (auto err = tools::apply_scheduler_arg(sched, v))
          return bad_input(err);
        if (auto err = config::check_config(sched))
          return bad_input(err);
        opts.scheduler = sched.scheduler();
        continue;
      }
      char* end = nullptr;
      errno = 0;
      double x = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0' || errno != 0 || !(x > 0) ||
          (k != "--scale" && x != double(uint64_t(x))))
        return bad_input("chaos: " + k + " needs a positive " +
                         (k == "--scale" ? "number" : "integer") + ", got '" +
                         v + "'");
      if (k == "--seed")
        opts.seed = uint64_t(x);
      else if (k == "--scale")
        opts.scale = x;
      else
        opts.repeat = uint32_t(x);
    }
    return tools::run_chaos(opts, stdout);
  }
  return bad_input("unknown command '" + cmd + "' (see `cohort help`)");
}
