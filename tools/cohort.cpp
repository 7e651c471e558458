// cohort: the command-line program. `cohort help` lists the commands.
#include <cstdio>
#include <cstring>
#include <string>
#include <unistd.h>
#include <vector>

#include <caf/all.hpp>

#include "actors/audit_log.hpp"
#include "actors/runtime.hpp"
#include "devices/gpu/discover.hpp"
#include "devices/topology.hpp"
#include "messages/convert.hpp"
#include "messages/errc.hpp"
#include "messages/system_config.hpp"
#include "tools/pipeline.hpp"

using namespace cohort;

namespace {

constexpr int exit_ok = 0;
constexpr int exit_failed = 1;
constexpr int exit_bad_input = 2;

const char* usage = R"(usage: cohort COMMAND [ARGS]

commands:
  devices [--config FILE]      list every device: CPU workers (hwloc), simulated
                               GPUs, GPU backends. FILE is a runtime config or a
                               pipeline spec; without it, the default device set
                               (one CPU worker per core + 4 simulated GPUs)
  run PIPELINE [--config FILE] [--audit PATH] [--no-progress]
                               run a pipeline spec (protobuf text format) and
                               report; exit 1 if any item failed, was lost or
                               differs from the CPU reference
  audit verify FILE            check an audit log's hash chain; exit 1 and name
                               the first bad record if it does not verify
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

// Reads FILE as a pipeline spec, falling back to a runtime config.
caf::expected<pb::RuntimeConfig> read_device_config(const std::string& path) {
  pb::PipelineSpec spec;
  if (!load_text_file(path, spec, errc::malformed_config))
    return tools::config_for(spec);
  return load_config(path);
}

std::string human_bytes(uint64_t b) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f GiB", double(b) / double(1ull << 30));
  return buf;
}

int cmd_devices(const std::vector<std::string>& args) {
  pb::RuntimeConfig cfg = tools::config_for(pb::PipelineSpec{});
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--config" && i + 1 < args.size()) {
      auto loaded = read_device_config(args[++i]);
      if (!loaded)
        return bad_input(loaded.error());
      cfg = std::move(*loaded);
    } else {
      return bad_input("devices: unexpected argument '" + args[i] + "'");
    }
  }
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
  std::string pipeline;
  tools::run_options opts;
  opts.progress = stderr;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--config" && i + 1 < args.size())
      opts.config_path = args[++i];
    else if (args[i] == "--audit" && i + 1 < args.size())
      opts.audit_path = args[++i];
    else if (args[i] == "--no-progress")
      opts.progress = nullptr;
    else if (args[i].rfind("--", 0) == 0 || !pipeline.empty())
      return bad_input("run: unexpected argument '" + args[i] + "'");
    else
      pipeline = args[i];
  }
  if (pipeline.empty())
    return bad_input("run: missing PIPELINE file (see `cohort help`)");
  auto spec = load_pipeline(pipeline);
  if (!spec)
    return bad_input(spec.error());
  system_config cfg;
  caf::actor_system sys{cfg};
  auto report = tools::run_pipeline(sys, *spec, opts);
  if (!report)
    return bad_input(report.error());
  tools::print_report(stdout, *report);
  return report->ok() ? exit_ok : exit_failed;
}

int cmd_audit(const std::vector<std::string>& args) {
  if (args.size() != 2 || args[0] != "verify")
    return bad_input("usage: cohort audit verify FILE");
  if (::access(args[1].c_str(), R_OK) != 0)
    return bad_input("audit: cannot read '" + args[1] +
                     "': " + std::strerror(errno));
  auto v = actors::audit_log::verify(args[1]);
  if (v.ok) {
    std::printf("%s: OK, %llu records, chain head %s\n", args[1].c_str(),
                (unsigned long long)v.good_records,
                actors::to_hex(v.head).c_str());
    return exit_ok;
  }
  std::printf("%s: BROKEN at record %llu (%s); %llu records before it verify\n",
              args[1].c_str(), (unsigned long long)v.first_bad,
              v.reason.c_str(), (unsigned long long)v.good_records);
  return exit_failed;
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
    return cmd_audit(args);
  return bad_input("unknown command '" + cmd + "' (see `cohort help`)");
}
