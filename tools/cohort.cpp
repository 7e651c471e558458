// cohort: the command-line program. `cohort help` lists the commands.
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include <CLI/CLI.hpp>
#include <caf/all.hpp>

#include "actors/device_host.hpp"
#include "actors/runtime.hpp"
#include "config/compile.hpp"
#include "config/quotas.hpp"
#include "devices/gpu/discover.hpp"
#include "devices/topology.hpp"
#include "ipc/stop_signals.hpp"
#include "kernels/registry.hpp"
#include "messages/convert.hpp"
#include "messages/errc.hpp"
#include "messages/system_config.hpp"
#include "quota/quota_book.hpp"
#include "quota/simulation.hpp"
#include "tools/admin_command.hpp"
#include "tools/audit_command.hpp"
#include "tools/byte_units.hpp"
#include "tools/chaos_command.hpp"
#include "tools/cli.hpp"
#include "tools/exec_command.hpp"
#include "tools/health_command.hpp"
#include "tools/jobs_command.hpp"
#include "tools/kernel_command.hpp"
#include "tools/pipeline.hpp"
#include "tools/scheduler_arg.hpp"
#include "tools/serve_command.hpp"
#include "tools/terminal_text.hpp"
#include "tools/trace_command.hpp"
#include "tools/version.hpp"
#include "tools/watch_command.hpp"

using namespace cohort;

namespace {

using tools::exit_bad_input;
using tools::exit_failed;
using tools::exit_ok;

int bad_input(const std::string& msg) {
  std::fprintf(stderr, "cohort: %s\n", tools::terminal_text(msg).c_str());
  return exit_bad_input;
}

int bad_input(const caf::error& err) {
  return bad_input(describe(err));
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

// The runtime config of --config FILE (when `path` is not empty), else
// `fallback`.
caf::expected<pb::RuntimeConfig> config_arg(const std::string& path,
                                            pb::RuntimeConfig fallback) {
  if (path.empty())
    return fallback;
  auto cfg = read_device_config(path);
  // The same check as runtime::start's: every command refuses alike.
  if (cfg)
    if (auto err = config::check_config(*cfg))
      return make_error(errc::malformed_config, path + ": " + describe(err));
  return cfg;
}

// One GPU's health line of `cohort devices`.
void print_health(const devices::health::gpu_sample& h) {
  if (h.available)
    std::printf("    health: %s busy, %s of %s used, %d C, ECC %llu "
                "corrected / %llu uncorrected\n",
                h.utilization_known
                    ? (std::to_string(h.gpu_util_percent) + "%").c_str()
                    : "n/a (MIG)",
                human_bytes(h.memory_used_bytes).c_str(),
                human_bytes(h.memory_total_bytes).c_str(), h.temperature_c,
                (unsigned long long)h.ecc_corrected,
                (unsigned long long)h.ecc_uncorrected);
  else
    std::printf("    health: unavailable (%s)\n", h.unavailable_reason.c_str());
}

int cmd_devices(const std::string& config_path) {
  auto loaded = config_arg(config_path, tools::config_for(pb::PipelineSpec{}));
  if (!loaded)
    return bad_input(loaded.error());
  auto cfg = std::move(*loaded);
  bool use_gpus = !cfg.devices().has_gpus() || cfg.devices().gpus();
  // What each GPU backend found (or why it found nothing) is shown too. A
  // GPU that would run in a host process is only probed here: where a node
  // of this config, with its own actor system, would run it.
  actors::gpu_hosting hosting;
  if (!needs_network(cfg)) {
    hosting.can_host = false;
    hosting.why_not = "no middleman";
  } else if (!actors::host_binary(cfg)) {
    hosting.can_host = false;
    hosting.why_not = "no cohort program";
  }
  devices::gpu::discovery found;
  auto devs = actors::make_devices(cfg, hosting, &found);
  if (!devs)
    return bad_input(devs.error());
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
  std::printf("%-8s %-5s %-10s %-16s %10s %7s %6s %5s %4s  %s\n", "name",
              "kind", "", "model", "memory", "streams", "speed", "cores",
              "numa", "runs in");
  for (auto& d : *devs) {
    auto& x = d->info();
    std::string numa = x.numa_node >= 0 ? std::to_string(x.numa_node) : "-";
    std::string cores = x.cores ? std::to_string(x.cores) : "-";
    std::string model = x.model.empty() ? "-" : x.model.substr(0, 16);
    std::printf(
        "%-8s %-5s %-10s %-16s %10s %7u %6.2f %5s %4s  %s\n", x.name.c_str(),
        to_string(x.kind), x.simulated ? "SIMULATED" : "", model.c_str(),
        x.kind == device_kind::cpu ? "host"
                                   : human_bytes(x.memory_bytes).c_str(),
        x.streams, x.speed, cores.c_str(), numa.c_str(),
        x.host_process ? "a host process" : "the node's process");
  }
  // Each pair once; gang placement prefers linked sets.
  std::string links;
  for (auto& d : *devs)
    for (auto& l : d->info().links)
      if (d->info().name < l.peer)
        links += "  " + d->info().name + " <-> " + l.peer + ": " +
                 to_string(l.kind, d->info().kind) +
                 (d->info().simulated ? " (SIMULATED)" : "") + "\n";
  if (!links.empty())
    std::printf("\nLinks between GPUs (gang placement prefers linked "
                "sets):\n%s",
                links.c_str());
  // Remote hosts are reached by a running node only (the devices it
  // joined: `cohort admin devices`).
  for (auto& j : cfg.network().join())
    std::printf("(and the devices of the remote device host %s, which a "
                "running node joins)\n",
                j.c_str());
  std::printf("\nGPU backends (plugins):\n");
  if (!use_gpus)
    std::printf(
        "  real GPUs disabled by the config (devices { gpus: false })\n");
  for (auto& b : found.backends) {
    if (b.loaded)
      std::printf("  %-4s plugin loaded from %s, %d GPU(s)%s%s\n",
                  b.vendor.c_str(), b.plugin.c_str(), b.count,
                  b.note.empty() ? "" : ": ", b.note.c_str());
    else
      std::printf("  %-4s plugin not loaded: %s\n", b.vendor.c_str(),
                  b.note.c_str());
  }
  for (auto& g : found.devices) {
    auto& x = g->info();
    std::printf("  %s: %s %s, %u SMs/CUs, PCI %s, NUMA node %s, UUID %s\n",
                x.name.c_str(), x.model.c_str(), x.arch.c_str(),
                x.multiprocessors, x.pci_bus_id.c_str(),
                x.numa_node >= 0 ? std::to_string(x.numa_node).c_str()
                                 : "unknown",
                x.uuid.c_str());
    print_health(g->telemetry());
  }
  // Their host processes open them; the node reads their health too.
  for (auto& p : found.probed) {
    auto& x = p.info;
    std::printf("  %s: %s %s, %u SMs/CUs, PCI %s, NUMA node %s, UUID %s\n"
                "    runs in a device host process\n",
                x.name.c_str(), x.model.c_str(), x.arch.c_str(),
                x.multiprocessors, x.pci_bus_id.c_str(),
                x.numa_node >= 0 ? std::to_string(x.numa_node).c_str()
                                 : "unknown",
                x.uuid.c_str());
    if (p.monitor)
      print_health(p.monitor->sample_device(x.pci_bus_id, x.uuid));
    else
      std::printf("    health: unavailable (no health library for %s)\n",
                  p.vendor.c_str());
  }
  return exit_ok;
}

struct run_cli {
  std::string pipeline;
  std::string config;
  std::string audit;
  std::string scheduler;
  std::string trace;
  uint64_t trace_events = default_trace_events;
  std::string report_html;
  bool no_progress = false;
};

int cmd_run(const run_cli& a) {
  // SIGINT or SIGTERM stops the run: no more items are submitted, those
  // submitted end, the report is printed (exit 1: the work was not all
  // done). Taken before any thread starts.
  ipc::stop_signals stop{"cohort run"};
  tools::run_options opts;
  opts.cancel = std::make_shared<std::atomic<bool>>(false);
  opts.progress = a.no_progress ? nullptr : stderr;
  opts.config_path = a.config;
  opts.audit_path = a.audit;
  opts.scheduler = a.scheduler;
  opts.trace_path = a.trace;
  opts.trace_events = a.trace_events;
  opts.report_html_path = a.report_html;
  auto& pipeline = a.pipeline;
  auto spec = load_pipeline(pipeline);
  if (!spec)
    return bad_input(spec.error());
  // The actor system runs with the config's scheduler settings.
  auto rt_cfg = tools::runtime_config_of(*spec, opts);
  if (!rt_cfg)
    return bad_input(rt_cfg.error());
  system_config cfg{*rt_cfg};
  caf::actor_system sys{cfg};
  std::atomic<bool> ended{false};
  std::thread watch{[&] {
    while (!ended.load()) {
      if (int sig = stop.wait(0.05); sig > 0) {
        std::fprintf(stderr,
                     "cohort run: stopping (%s): no more items are "
                     "submitted; those submitted end\n",
                     strsignal(sig));
        opts.cancel->store(true);
        return;
      }
    }
  }};
  auto report = tools::run_pipeline(sys, *spec, opts);
  ended = true;
  watch.join();
  if (!report)
    return bad_input(report.error());
  tools::print_report(stdout, *report);
  return report->ok() && !opts.cancel->load() ? exit_ok : exit_failed;
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

std::string kernel_list(const kernel_grant& grant) {
  if (grant.all)
    return "* (all)";
  std::string out;
  for (auto& k : kernels::registered_kernels())
    if (grant.allows(k.id))
      out += (out.empty() ? "" : " ") + k.name;
  return out;
}

int cmd_quota(const std::string& config_path, const std::string& only) {
  auto cfg = config_arg(config_path, tools::config_for(pb::PipelineSpec{}));
  if (!cfg)
    return bad_input(cfg.error());
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
    std::printf("  kernels      %s\n", kernel_list(p.kernels).c_str());
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

int cmd_simulate(const std::string& path, const std::string& config_path) {
  auto plan = load_plan(path);
  if (!plan)
    return bad_input(plan.error());
  auto loaded = config_arg(
      config_path, plan->has_runtime() ? plan->runtime()
                                       : tools::config_for(pb::PipelineSpec{}));
  if (!loaded)
    return bad_input(loaded.error());
  auto& cfg = *loaded;
  auto setup = setup_quotas(cfg);
  if (!setup)
    return bad_input(setup.error());
  auto rep = quota::simulate(quota::quota_book{setup->lease}, from_proto(*plan),
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

// `cohort chaos`, its values read strictly.
int cmd_chaos(const std::vector<std::string>& files, bool soak, bool verbose,
              const tools::string_options& values) {
  // SIGINT or SIGTERM stops after the scenario run in progress, with the
  // summary of those that ran.
  ipc::stop_signals stop{"cohort chaos"};
  tools::chaos_options opts;
  opts.stop_requested = [&stop] { return stop.wait(0.001); };
  opts.files = files;
  opts.soak = soak;
  opts.verbose = verbose;
  for (auto& [k, v] : values.given()) {
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
                       (k == "--scale" ? "number" : "integer") + ", got '" + v +
                       "'");
    if (k == "--seed")
      opts.seed = uint64_t(x);
    else if (k == "--scale")
      opts.scale = x;
    else
      opts.repeat = uint32_t(x);
  }
  return tools::run_chaos(opts, stdout);
}

} // namespace

int main(int argc, char** argv) {
  // Past a file-size limit (RLIMIT_FSIZE) a write fails with EFBIG instead
  // of killing the process: the audit log fails closed, as on a full disk.
  std::signal(SIGXFSZ, SIG_IGN);
  CLI::App app{"cohort: run, serve, inspect and test a Cohort fleet (an actor "
               "runtime for GPUs). Every file is protobuf text format "
               "(cohort.pb.*).",
               "cohort"};
  app.require_subcommand(1, 1);
  app.footer("exit status: 0 success, 1 the work or the check failed, 2 bad "
             "input. `cohort COMMAND --help` for a command's options.");
  app.set_help_all_flag("--help-all", "every command and its options");
  auto* help = app.add_subcommand("help", "this text (also --help)");
  auto* version = app.add_subcommand(
      "version", "the version, the commit this program was built from and "
                 "the GPU plugins it finds (also --version)");

  std::string devices_config;
  auto* devices = app.add_subcommand(
      "devices", "list every device: CPU workers (hwloc), simulated GPUs, GPU "
                 "backends; without --config, the default device set (one CPU "
                 "worker per core + 4 simulated GPUs)");
  devices
      ->add_option("--config", devices_config,
                   "a runtime config, a pipeline spec or an allocation plan")
      ->type_name("FILE");

  run_cli run_args;
  auto* run = app.add_subcommand(
      "run", "run a pipeline spec and report; exit 1 if any item failed, was "
             "lost or differs from the CPU reference");
  run->add_option("PIPELINE", run_args.pipeline, "the pipeline spec")
      ->required();
  run->add_option("--config", run_args.config,
                  "runtime config over the pipeline's")
      ->type_name("FILE");
  run->add_option("--audit", run_args.audit, "the audit log")
      ->type_name("PATH");
  run->add_flag("--no-progress", run_args.no_progress,
                "no progress line on stderr");
  run->add_option("--trace", run_args.trace,
                  "write the run's timeline there in the Chrome trace event "
                  "format (Perfetto, chrome://tracing; docs/tracing.md)")
      ->type_name("FILE");
  run->add_option("--trace-events", run_args.trace_events,
                  "the most events the trace keeps (default 1000000)")
      ->check(CLI::Range(uint64_t{1}, max_trace_events))
      ->type_name("N");
  run->add_option("--report-html", run_args.report_html,
                  "also write the report there as an HTML page with plots of "
                  "each device's utilization and queue over the run and of "
                  "the latency (docs/tracing.md)")
      ->type_name("FILE");
  run->add_option("--scheduler", run_args.scheduler,
                  "CAF's scheduler over the config's (threads, "
                  "moderate_sleep_us, ...: cohort.pb.Scheduler)")
      ->type_name("KEY=VALUE,...");

  tools::audit_cli audit_args;
  tools::add_audit_command(app, audit_args);

  tools::kernel_cli kernel_args;
  tools::add_kernel_command(app, kernel_args);

  std::string quota_config, quota_tenant;
  auto* quota = app.add_subcommand(
      "quota", "what the config grants each tenant (kernels, devices, "
               "in-flight cap, rate, memory quotas, reservations, policy) and "
               "the headroom per tenant and device of an idle runtime");
  quota->add_option("--config", quota_config, "runtime config")
      ->type_name("FILE");
  quota->add_option("--tenant", quota_tenant, "only this tenant")
      ->type_name("NAME");

  std::vector<std::string> chaos_files;
  bool chaos_soak = false, chaos_verbose = false;
  tools::string_options chaos_values;
  auto* chaos = app.add_subcommand(
      "chaos",
      "run chaos scenarios (cohort.pb.ChaosScenario; a directory runs every "
      ".textproto in it) and check the invariants: every item ended exactly "
      "once, results correct, only allowed errors, no quota passed, the audit "
      "chain verifies; exit 1 if an invariant broke");
  chaos->add_option("SCENARIO", chaos_files, "scenario files or directories")
      ->required();
  chaos_values.add(*chaos, "--seed", "the first seed", "N");
  chaos_values.add(*chaos, "--scale", "scale the workload by X", "X");
  chaos_values.add(*chaos, "--repeat", "run each N times, seeds N, N+1, ...",
                   "N");
  chaos_values.add(*chaos, "--audit-dir", "keep the audit logs here", "DIR");
  chaos_values.add(*chaos, "--scheduler", "CAF's scheduler settings",
                   "KEY=VALUE,...");
  chaos->add_flag("--soak", chaos_soak, "10x the workload over 10x the time");
  chaos->add_flag("--verbose", chaos_verbose, "every event as it happens");

  std::string simulate_plan, simulate_config;
  auto* simulate = app.add_subcommand(
      "simulate", "dry run of an allocation plan (cohort.pb.AllocationPlan) "
                  "against the grants, quotas and device memory; exit 1 if a "
                  "step would be refused");
  simulate->add_option("PLAN", simulate_plan, "the plan")->required();
  simulate->add_option("--config", simulate_config, "runtime config")
      ->type_name("FILE");

  tools::serve_cli serve_args;
  tools::add_serve_command(app, serve_args);
  tools::admin_cli admin_args;
  tools::add_admin_command(app, admin_args);
  tools::objects_cli objects_args;
  tools::add_objects_command(app, objects_args);
  tools::jobs_cli jobs_args;
  tools::add_jobs_command(app, jobs_args);

  tools::trace_cli trace_args;
  tools::add_trace_command(app, trace_args);
  tools::watch_cli watch_args;
  tools::add_watch_command(app, watch_args);
  tools::health_cli health_args;
  tools::add_health_command(app, health_args);
  tools::exec_cli exec_args;
  tools::add_exec_command(app, exec_args);

  std::string host_listen, host_config;
  auto* device_host = app.add_subcommand(
      "device-host",
      "run devices for nodes (docs/device-hosts.md): with --listen, serve "
      "this machine's devices (its --config) to nodes on other machines, "
      "over TLS; without, one device in a process a node started, with its "
      "spec on standard input (not run by hand)");
  device_host
      ->add_option("--listen", host_listen,
                   "HOST:PORT to serve on (port 0: any free port)")
      ->type_name("HOST:PORT");
  device_host
      ->add_option("--config", host_config,
                   "the runtime config: its devices and its network section "
                   "(TLS files, token file)")
      ->type_name("FILE");

  std::string shell;
  auto* completion = app.add_subcommand(
      "completion", "print a shell completion script: `source <(cohort "
                    "completion bash)`");
  completion->add_option("SHELL", shell, "bash")
      ->required()
      ->check(CLI::IsMember({"bash"}));

  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) {
    std::fputs(app.help().c_str(), stderr);
    return exit_bad_input;
  }
  // --version alone, as most programs take it; `cohort version` the same.
  if (args.size() == 1 && args[0] == "--version") {
    std::fputs(tools::version_text().c_str(), stdout);
    return exit_ok;
  }
  if (args[0].rfind('-', 0) != 0 &&
      app.get_subcommands(
             [&](const CLI::App* sub) { return sub->get_name() == args[0]; })
          .empty())
    return bad_input("unknown command '" + args[0] + "' (see `cohort --help`)");
  if (auto done = tools::parse_cli(app, args))
    return *done;
  if (help->parsed()) {
    std::fputs(app.help().c_str(), stdout);
    return exit_ok;
  }
  if (version->parsed()) {
    std::fputs(tools::version_text().c_str(), stdout);
    return exit_ok;
  }
  if (devices->parsed())
    return cmd_devices(devices_config);
  if (run->parsed())
    return cmd_run(run_args);
  if (audit_args.verify->parsed() || audit_args.show->parsed() ||
      audit_args.query->parsed())
    return tools::run_audit(audit_args, stdout);
  if (app.got_subcommand("kernel"))
    return tools::run_kernel(kernel_args, stdout);
  if (quota->parsed())
    return cmd_quota(quota_config, quota_tenant);
  if (chaos->parsed())
    return cmd_chaos(chaos_files, chaos_soak, chaos_verbose, chaos_values);
  if (simulate->parsed())
    return cmd_simulate(simulate_plan, simulate_config);
  if (serve_args.app->parsed())
    return tools::cmd_serve(serve_args);
  if (admin_args.app->parsed())
    return tools::cmd_admin(admin_args);
  if (objects_args.app->parsed())
    return tools::cmd_objects(objects_args);
  if (jobs_args.app->parsed())
    return tools::cmd_jobs(jobs_args);
  if (trace_args.app->parsed())
    return tools::cmd_trace(trace_args);
  if (watch_args.app->parsed())
    return tools::cmd_watch(watch_args);
  if (health_args.app->parsed())
    return tools::cmd_health(health_args);
  if (exec_args.app->parsed())
    return tools::cmd_exec(exec_args);
  if (device_host->parsed()) {
    if (host_listen.empty() && host_config.empty())
      return actors::run_device_host();
    if (host_listen.empty() || host_config.empty())
      return bad_input("cohort device-host serves devices to other machines "
                       "with both --listen HOST:PORT and --config FILE");
    auto cfg = config_arg(host_config, {});
    if (!cfg)
      return bad_input(cfg.error());
    return actors::run_remote_host(host_listen, *cfg);
  }
  if (completion->parsed()) {
    std::fputs(tools::bash_completion(app).c_str(), stdout);
    return exit_ok;
  }
  return bad_input("no command (see `cohort --help`)");
}
