// Real GPUs in device host processes (docs/device-hosts.md), on the fake
// CUDA plugin's two GPUs: where each GPU runs (per GPU, for all, by
// default where the machine has GPUs), a sticky error that restarts only
// its host, a bundle's CUDA code, and MIG instances as devices of their
// own with their own Xids. The simulated GPUs in host processes and remote
// device hosts: tests/actors/device_host_test.cpp.
#include <catch2/catch.hpp>

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <set>
#include <thread>

#include <caf/io/all.hpp>
#include <google/protobuf/text_format.h>

#include "actors/device_host.hpp"
#include "kernels/registry.hpp"
#include "tests/devices/fake_gpu.hpp"
#include "tests/kernels/bundle/bundle_fixture.hpp"
#include "tests/runtime_fixture.hpp"
#include "tests/tools/cli_fixture.hpp"
#include "tools/npy.hpp"

using namespace cohort;
using namespace cohort::actors;
using namespace std::chrono_literals;

namespace {

// A pipeline of `batches` gemv items over the fake CUDA plugin's two GPUs,
// each in the place `devices` says (a DeviceSet's text), and `cpu_workers`
// CPU workers, with the audit log in `dir`.
std::string gpu_pipeline(const test::temp_dir& dir, int batches,
                         const std::string& devices, int cpu_workers = 0) {
  auto path = dir.file("gpus.textproto");
  std::ofstream{path} << "name: \"gpus\" tenant: \"t\" batches: " << batches
                      << " seed: 3 window: 8\n"
                         "stage { name: \"g\" kernel: GEMV args { m: 64 n: "
                         "64 } }\n"
                         "runtime {\n  devices { cpu_workers: "
                      << cpu_workers
                      << " gpu_streams: 2 "
                         "host_binary: \""
                      << COHORT_BINARY << "\" " << devices
                      << " }\n"
                         "  tenant { tenant: \"t\" kernels: \"*\" devices: "
                         "\"*\" }\n"
                         "  audit_path: \""
                      << dir.file("audit.log") << "\"\n  max_attempts: 8\n}\n";
  return path;
}

// `cohort run PIPELINE` with the fake CUDA plugin (two GPUs) and `env`.
test::cli_result run_on_fake_gpus(const std::string& pipeline,
                                  const std::string& env = "") {
  return test::run_command(
      std::string{"COHORT_PLUGIN_PATH="} + COHORT_FAKE_PLUGIN_DIR + " " + env +
      " " + COHORT_BINARY + " run " + pipeline + " --no-progress");
}

// The audit log's device events of `path`, one per line.
std::string device_events_in(const std::string& path) {
  std::string out;
  for (auto& rec : test::read_audit(path))
    if (rec.kind() == pb::DEVICE_EVENT)
      out += rec.device() + ": " + rec.detail() + "\n";
  return out;
}

} // namespace

TEST_CASE("real GPUs run in device host processes, and one with a sticky "
          "error comes back in a new process",
          "[actors][host][gpu]") {
  test::temp_dir dir;
  SECTION("both GPUs in host processes run the work") {
    auto run =
        run_on_fake_gpus(gpu_pipeline(dir, 40, "gpu_host_processes: true"));
    INFO(run.output);
    CHECK(run.status == 0);
    CHECK_THAT(run.output, Catch::Contains("40 completed, 0 failed"));
    auto events = device_events_in(dir.file("audit.log"));
    INFO(events);
    CHECK_THAT(events, Catch::Contains("cuda0: supervisor: resetting -> "
                                       "available (restarted: started in a "
                                       "host process)") &&
                           Catch::Contains("cuda1: supervisor: resetting -> "
                                           "available (restarted: started in "
                                           "a host process)"));
  }
  SECTION("a sticky error ends with a new process, not a lost GPU") {
    // The first host to launch a kernel gets a sticky error that no reset
    // clears; the new process it is replaced with runs clean. Tenant a may
    // run on cuda0 only and b on cuda1 only, so the run lasts until the
    // poisoned GPU is back, however slow the machine.
    auto path = dir.file("sticky.textproto");
    std::ofstream{path}
        << "name: \"sticky\" batches: 40 seed: 5 window: 8\n"
           "stage { name: \"a\" kernel: GEMV args { m: 64 n: 64 } tenant: "
           "\"a\" }\n"
           "stage { name: \"b\" kernel: GEMV args { m: 64 n: 64 } tenant: "
           "\"b\" }\n"
           "runtime {\n  devices { cpu_workers: 0 gpu_streams: 2 "
           "gpu_host_processes: true host_binary: \""
        << COHORT_BINARY
        << "\" }\n"
           "  tenant { tenant: \"a\" kernels: \"*\" devices: \"cuda0\" "
           "queue_timeout_ms: 60000 }\n"
           "  tenant { tenant: \"b\" kernels: \"*\" devices: \"cuda1\" "
           "queue_timeout_ms: 60000 }\n"
           "  audit_path: \""
        << dir.file("audit.log") << "\"\n  max_attempts: 8\n}\n";
    auto run = run_on_fake_gpus(path, "COHORT_FAKE_GPU_STICKY_ONCE=" +
                                          dir.file("sticky-once"));
    INFO(run.output);
    CHECK(run.status == 0);
    CHECK_THAT(run.output, Catch::Contains("80 completed, 0 failed"));
    auto events = device_events_in(dir.file("audit.log"));
    INFO(events);
    CHECK_THAT(events, Catch::Contains("(sticky: the context is lost)") &&
                           Catch::Contains("new host process, restart "));
  }
  SECTION("the node counts the Xids of GPUs in host processes") {
    // The fake health library tells every watcher of a GPU of Xid 13 (an
    // application's fault: a warning, not a loss) as it starts watching.
    // The node watches its hosted GPUs as NVML lets any process do: its
    // report counts one per GPU (their hosts, which watch too, warn).
    auto run =
        run_on_fake_gpus(gpu_pipeline(dir, 20, "gpu_host_processes: true"),
                         "COHORT_FAKE_GPU_XID=13");
    INFO(run.output);
    CHECK(run.status == 0);
    CHECK_THAT(run.output,
               Catch::Contains("20 completed, 0 failed") &&
                   Catch::Contains("Xid errors         cuda0: 1 (the last "
                                   "Xid 13)") &&
                   Catch::Contains("Xid errors         cuda1: 1 (the last "
                                   "Xid 13)"));
    auto events = device_events_in(dir.file("audit.log"));
    INFO(events);
    CHECK_THAT(events, Catch::Contains("cuda0: supervisor: resetting -> "
                                       "available (restarted: started in a "
                                       "host process)"));
  }
  SECTION("a host that finds another GPU at its ordinal refuses to start") {
    // The hosts see other GPUs at the ordinals the node probed (as with a
    // CUDA_VISIBLE_DEVICES of their own): each refuses, saying both UUIDs,
    // the node gives the GPU up at once (a new process would find the
    // same GPU), and the work runs on the CPU worker.
    auto run =
        run_on_fake_gpus(gpu_pipeline(dir, 10, "gpu_host_processes: true", 1),
                         "COHORT_FAKE_GPU_OTHER_IN_HOSTS=1");
    INFO(run.output);
    CHECK(run.status == 0);
    CHECK_THAT(run.output, Catch::Contains("10 completed, 0 failed"));
    auto events = device_events_in(dir.file("audit.log"));
    INFO(events);
    CHECK_THAT(events, Catch::Contains("ordinal 0 is GPU OTHER-0 in this "
                                       "process, not FAKE-0") &&
                           Catch::Contains("ordinal 1 is GPU OTHER-1 in this "
                                           "process, not FAKE-1"));
    CHECK_THAT(events, !Catch::Contains("cuda0: supervisor: resetting -> "
                                        "available"));
    CHECK_THAT(events, Catch::Contains("(not tried again: a new host process "
                                       "would find the same GPU)"));
    CHECK_THAT(events, !Catch::Contains("its host process did not start"));
  }
  SECTION("per GPU: cuda1 kept in the node's process") {
    auto run = run_on_fake_gpus(gpu_pipeline(
        dir, 20, "gpu_host_process { key: \"cuda1\" value: false }"));
    INFO(run.output);
    CHECK(run.status == 0);
    auto events = device_events_in(dir.file("audit.log"));
    INFO(events);
    // By default cuda0 runs in a host process when the node can start one:
    // `cohort run` loads CAF's middleman on a machine with GPU device files
    // or when the config asks for host processes. Without, the audit says
    // why it runs in the node's process.
    bool hosted = events.find("cuda0: supervisor: resetting -> available "
                              "(restarted: started in a host process)") !=
                  std::string::npos;
    CHECK((hosted ||
           events.find("cuda0: runs in the node's process, not in a device "
                       "host process of its own: the actor system has no CAF "
                       "middleman") != std::string::npos));
    // cuda1 stays in the node's process, as its config says (not audited).
    CHECK_THAT(events, !Catch::Contains("cuda1: supervisor: resetting -> "
                                        "available (restarted: started in a "
                                        "host process)") &&
                           !Catch::Contains("cuda1: runs in the node's"));
  }
}

TEST_CASE("a bundle's kernel with CUDA code runs on GPUs in host processes",
          "[actors][host][gpu][kernels]") {
  // A signed bundle whose scale_add (f64: alpha * x + y) has CUDA code: a
  // fake module naming the entry point the fake plugin defines, launched in
  // blocks of 64 over one thread per element. Both fake GPUs run in host
  // processes and there is no CPU worker: every item runs in a host, which
  // gets the kernel's code from the node and each launch's sizes with it.
  test::temp_dir dir;
  auto key = std::move(*kernels::bundle::private_key::generate());
  auto pub = test::write_public_key(dir, key);
  auto b = dir.file("hosted");
  auto text = test::acme_kernels_text("hosted");
  text.replace(text.find("  cpu_symbol: \"acme_scale_add\""), 0,
               "  cuda { blob: \"gpu/k.ptx\" function: \"scale_add\" "
               "block: 64 threads: \"x\" }\n");
  test::make_bundle(b, "hosted", text, nullptr);
  test::add_blob(b, "gpu/k.ptx",
                 std::string{testing::fake_gpu_api::module_magic} +
                     "scale_add\n",
                 "CUDA_PTX");
  auto sig = kernels::bundle::sign_bundle(b, key);
  REQUIRE(std::holds_alternative<pb::BundleSignature>(sig));
  test::write_bytes(
      b + "/manifest.sig",
      kernels::bundle::signature_text(std::get<pb::BundleSignature>(sig)));
  constexpr size_t rows = 1200;
  std::vector<double> x(rows), y(rows);
  for (size_t i = 0; i < rows; ++i) {
    x[i] = double(i) * 0.25;
    y[i] = 1.0 / double(i + 1);
  }
  auto save = [&](const std::string& name, const std::vector<double>& v) {
    auto path = dir.file(name);
    auto w = tools::npy::writer::create(path, kernels::dtype::f64, {rows});
    REQUIRE(w);
    REQUIRE(!w->write(0, {v.data(), v.size(), kernels::dtype::f64}));
    REQUIRE(!w->commit());
    return path;
  };
  auto xs = save("x.npy", x);
  auto ys = save("y.npy", y);
  auto out = dir.file("z.npy");
  auto spec = dir.file("hosted.textproto");
  std::ofstream{spec}
      << "name: \"hosted\" tenant: \"t\" batches: 12 window: 4\n"
         "stage { name: \"s\" kernel_name: \"hosted.scale_add\" args { "
         "alpha: 2 } input { file: \""
      << xs << "\" } input { file: \"" << ys << "\" } output: \"" << out
      << "\" }\n"
         "runtime {\n  devices { cpu_workers: 0 gpu_streams: 2 "
         "gpu_host_processes: true host_binary: \""
      << COHORT_BINARY
      << "\" }\n"
         "  tenant { tenant: \"t\" kernels: \"*\" devices: \"*\" }\n"
         "  kernel_bundles { trusted_key: \""
      << pub << "\" load: \"" << b
      << "\" }\n"
         "  audit_path: \""
      << dir.file("audit.log") << "\"\n  max_attempts: 8\n}\n";
  auto run = run_on_fake_gpus(spec);
  INFO(run.output);
  CHECK(run.status == 0);
  CHECK_THAT(run.output, Catch::Contains("12 completed, 0 failed") &&
                             Catch::Contains("results            12 of 12 "
                                             "match the CPU reference"));
  auto events = device_events_in(dir.file("audit.log"));
  INFO(events);
  CHECK_THAT(events, Catch::Contains("cuda0: supervisor: resetting -> "
                                     "available (restarted: started in a "
                                     "host process)"));
  // What the hosts computed, row by row.
  auto r = tools::npy::reader::open(out);
  REQUIRE(r);
  auto all = r->rows(0, r->info().rows);
  REQUIRE(all);
  auto z = all->view().as<double>();
  REQUIRE(z.size() == rows);
  for (size_t i = 0; i < rows; i += 97)
    CHECK(z[i] == Approx(2 * x[i] + y[i]).epsilon(1e-12));
}

TEST_CASE("where a real GPU runs: per GPU, for all, or by default where the "
          "node can start host processes",
          "[actors][host][gpu]") {
  pb::RuntimeConfig cfg;
  gpu_hosting can;
  gpu_hosting cannot{false, "no cohort program"};
  std::string why;
  // Unset: in a host process when the node can start one, whatever
  // kernels this process registered (their GPU code goes to the hosts).
  CHECK(gpu_in_host(cfg, "cuda0", can, &why));
  CHECK(why.empty());
  CHECK_FALSE(gpu_in_host(cfg, "cuda0", cannot, &why));
  CHECK(why == "no cohort program");
  // Kernel bundles too: their GPU code goes to the hosts as well.
  auto bundled = cfg;
  bundled.mutable_kernel_bundles()->add_load("/opt/bundles/acme");
  bundled.mutable_kernel_bundles()->add_trusted_key("/etc/cohort/acme.pub");
  why.clear();
  CHECK(gpu_in_host(bundled, "cuda0", can, &why));
  CHECK(why.empty());
  // Objects shared through IPC keep GPUs in the node's process.
  auto sharing = cfg;
  sharing.set_share_socket("/run/cohort/share.sock");
  why.clear();
  CHECK_FALSE(gpu_in_host(sharing, "cuda0", can, &why));
  CHECK_THAT(why, Catch::Contains("share_socket"));
  // Said for all, then per GPU: no reason is given (nothing to explain).
  cfg.mutable_devices()->set_gpu_host_processes(false);
  why.clear();
  CHECK_FALSE(gpu_in_host(cfg, "cuda0", can, &why));
  CHECK(why.empty());
  (*cfg.mutable_devices()->mutable_gpu_host_process())["cuda1"] = true;
  CHECK(gpu_in_host(cfg, "cuda1", cannot, &why));
  CHECK_FALSE(gpu_in_host(cfg, "cuda0", can, &why));
}

TEST_CASE("the node's stand-in of a hosted GPU counts its Xids and reads "
          "its health",
          "[actors][host][gpu]") {
  auto monitor = std::make_shared<testing::fake_monitor>();
  device_info info;
  info.name = "cuda0";
  info.kind = device_kind::cuda_gpu;
  info.pci_bus_id = "0000:98:00.0";
  info.host_process = true;
  using kind = devices::health::gpu_event::kind;
  // NVML tells of Xid 79 (fallen off the bus) as a loss with its code.
  devices::health::gpu_event xid79{kind::lost, 79, ""};
  {
    hosted_device dev{info, pb::HostSpec{}};
    CHECK_FALSE(dev.telemetry().available);
    CHECK_THAT(dev.telemetry().unavailable_reason,
               Catch::Contains("no health monitor for cuda0"));
    auto watch =
        std::make_shared<devices::health::gpu_watch>(monitor, info.pci_bus_id);
    dev.watch_health(monitor, watch);
    REQUIRE(watch->start());
    watch.reset();
    CHECK(monitor->watching(info.pci_bus_id));
    CHECK(dev.telemetry().available);
    CHECK(dev.telemetry().gpu_util_percent == 42);
    monitor->raise(info.pci_bus_id, {kind::xid, 13, ""});
    monitor->raise(info.pci_bus_id, {kind::ecc_corrected, 0, ""});
    monitor->raise("0000:99:00.0", xid79);
    CHECK(dev.xid_errors() == 1);
    CHECK(dev.last_xid() == 13);
    // A device-level Xid is counted: the host acts on it.
    monitor->raise(info.pci_bus_id, xid79);
    CHECK(dev.xid_errors() == 2);
    CHECK(dev.last_xid() == 79);
    // Nothing launches on the stand-in, whatever its health.
    CHECK_FALSE(dev.health());
  }
  // Its watch ended with it.
  CHECK_FALSE(monitor->watching(info.pci_bus_id));
  // A simulated device has no bus id, and a remote one's names a GPU of
  // another machine: neither is watched.
  device_info sim;
  sim.name = "sim0";
  hosted_device plain{sim, pb::HostSpec{}};
  plain.watch_health(monitor);
  CHECK_FALSE(plain.telemetry().available);
  auto far = info;
  far.remote = "gpu-7.example:9471";
  hosted_device remote{far, endpoint{"gpu-7.example", 9471}, 0};
  remote.watch_health(monitor);
  CHECK_FALSE(monitor->watching(info.pci_bus_id));
  CHECK_FALSE(remote.telemetry().available);
}

TEST_CASE("the node's stand-ins of the MIG instances of one GPU share its "
          "watch and count their own GPU instance's Xids",
          "[actors][host][gpu]") {
  auto monitor = std::make_shared<testing::fake_monitor>();
  auto instance = [](const std::string& name) {
    device_info info;
    info.name = name;
    info.kind = device_kind::cuda_gpu;
    info.pci_bus_id = "0000:98:00.0";
    info.host_process = true;
    return info;
  };
  hosted_device first{instance("mig0.0"), pb::HostSpec{}};
  hosted_device second{instance("mig0.1"), pb::HostSpec{}};
  auto watch =
      std::make_shared<devices::health::gpu_watch>(monitor, "0000:98:00.0");
  first.watch_health(monitor, watch, 1);
  second.watch_health(monitor, watch, 2);
  REQUIRE(watch->start());
  CHECK(first.event_watch() == second.event_watch());
  using kind = devices::health::gpu_event::kind;
  auto xid = [](uint32_t code, uint32_t gi) {
    devices::health::gpu_event ev{kind::xid, code, ""};
    ev.gpu_instance = gi;
    return ev;
  };
  // Xid 31 of GPU instance 2 is the second's alone; Xid 48 (a double-bit
  // ECC error) of the whole GPU is both instances'.
  monitor->raise("0000:98:00.0", xid(31, 2));
  CHECK(first.xid_errors() == 0);
  CHECK(second.xid_errors() == 1);
  CHECK(second.last_xid() == 31);
  monitor->raise("0000:98:00.0",
                 xid(48, devices::health::gpu_event::whole_gpu));
  CHECK(first.xid_errors() == 1);
  CHECK(first.last_xid() == 48);
  CHECK(second.xid_errors() == 2);
  // Both read their health through the library.
  CHECK(first.telemetry().available);
  CHECK(second.telemetry().available);
}

TEST_CASE("CAF's network modules are loaded once however often asked",
          "[actors][host]") {
  // A config whose devices need the middleman: system_config loads it, and
  // a caller that loads it again (device hosts do) adds nothing.
  pb::RuntimeConfig rc;
  rc.mutable_devices()->add_sim_gpu()->set_host_process(true);
  system_config cfg{rc};
  auto modules = cfg.module_factories.size();
  REQUIRE(modules >= 1);
  load_network(cfg);
  load_network(cfg);
  CHECK(cfg.module_factories.size() == modules);
  // A config without: loaded once by the first call.
  system_config plain{pb::RuntimeConfig{}};
  auto before = plain.module_factories.size();
  load_network(plain);
  auto after = plain.module_factories.size();
  CHECK(after <= before + 1);
  load_network(plain);
  CHECK(plain.module_factories.size() == after);
}

TEST_CASE("cohort devices says where each real GPU runs",
          "[actors][host][gpu]") {
  test::temp_dir dir;
  auto cfg = dir.file("c.textproto");
  std::ofstream{cfg} << "devices { cpu_workers: 0 gpu_host_processes: true "
                        "gpu_host_process { key: \"cuda1\" value: false } "
                        "host_binary: \""
                     << COHORT_BINARY
                     << "\" }\n"
                        "tenant { tenant: \"t\" kernels: \"*\" devices: "
                        "\"*\" }\n";
  auto out = test::run_command(std::string{"COHORT_PLUGIN_PATH="} +
                               COHORT_FAKE_PLUGIN_DIR + " " + COHORT_BINARY +
                               " devices --config " + cfg);
  INFO(out.output);
  CHECK(out.status == 0);
  CHECK_THAT(
      out.output,
      Catch::Matches("(.|\n)*cuda0 [^\n]*a host process\n(.|\n)*") &&
          Catch::Matches("(.|\n)*cuda1 [^\n]*the node's process\n(.|\n)*") &&
          Catch::Contains("cuda0: Fake GPU (test plugin)") &&
          Catch::Contains("runs in a device host process\n    health: 42% "
                          "busy, 0 B of 256.0 MiB used, 55 C"));
  // A name that is no GPU's is refused.
  std::ofstream{cfg} << "devices { cpu_workers: 1 gpu_host_process { key: "
                        "\"gpu0\" value: true } }\n";
  auto bad = test::run_command(std::string{COHORT_BINARY} +
                               " devices --config " + cfg);
  INFO(bad.output);
  CHECK(bad.status == 2);
  CHECK_THAT(bad.output, Catch::Contains("'gpu0' is not a GPU's name"));
}

TEST_CASE("an Xid of one MIG instance is that instance's, in the node and "
          "in its host process",
          "[actors][host][gpu]") {
  // GPU 0000:98:00.0 in MIG mode: mig0.0 on GPU instance 1, mig0.1 on 2.
  // NVML tells each watcher of Xid 13 of GPU instance 2 as it starts
  // watching: the node counts it for mig0.1 alone, and of the two hosts
  // only mig0.1's acts on it (the default policy: a warning, which the
  // node hears at the host's next health check, 50 ms on: the run lasts
  // long enough). cuda1 (not in MIG mode) takes it as its GPU's.
  test::temp_dir dir;
  auto run =
      run_on_fake_gpus(gpu_pipeline(dir, 10000, "gpu_host_processes: true", 1),
                       "env -u CUDA_VISIBLE_DEVICES COHORT_FAKE_GPU_MIG=1 "
                       "COHORT_FAKE_GPU_XID=13 COHORT_FAKE_GPU_XID_INSTANCE=2");
  INFO(run.output);
  CHECK(run.status == 0);
  CHECK_THAT(run.output,
             Catch::Contains("10000 completed, 0 failed") &&
                 Catch::Contains("Xid errors         mig0.1: 1 (the last "
                                 "Xid 13)") &&
                 Catch::Contains("Xid errors         cuda1: 1 (the last "
                                 "Xid 13)") &&
                 !Catch::Contains("Xid errors         mig0.0"));
  auto events = device_events_in(dir.file("audit.log"));
  INFO(events);
  CHECK_THAT(events, Catch::Contains("mig0.1: warning: fake NVML reported "
                                     "Xid 13") &&
                         Catch::Contains("cuda1: warning: fake NVML reported "
                                         "Xid 13") &&
                         !Catch::Contains("mig0.0: warning"));
}

TEST_CASE("the instances of a GPU in MIG mode are devices of their own, "
          "each in a host process that sees it alone",
          "[actors][host][gpu]") {
  // The fake plugin's first GPU (0000:98:00.0) is in MIG mode with two
  // instances; CUDA in the node shows it as cuda0, a view of one instance.
  test::temp_dir dir;
  auto cfg = dir.file("c.textproto");
  std::ofstream{cfg} << "devices { cpu_workers: 0 gpu_host_processes: true "
                        "host_binary: \""
                     << COHORT_BINARY
                     << "\" }\n"
                        "tenant { tenant: \"t\" kernels: \"*\" devices: "
                        "\"*\" }\n";
  // The node's own CUDA_VISIBLE_DEVICES chooses among the instances: the
  // test's environment must not.
  const std::string env =
      std::string{"env -u CUDA_VISIBLE_DEVICES COHORT_FAKE_GPU_MIG=1 "} +
      "COHORT_PLUGIN_PATH=" + COHORT_FAKE_PLUGIN_DIR + " ";
  auto out =
      test::run_command(env + COHORT_BINARY + " devices --config " + cfg);
  INFO(out.output);
  CHECK(out.status == 0);
  CHECK_THAT(out.output,
             Catch::Contains("mig0.0: Fake GPU (test plugin) MIG 3g.128mb "
                             "sm_90") &&
                 Catch::Contains("UUID MIG-fake-98-1\n    runs in a device "
                                 "host process") &&
                 Catch::Contains("cuda1: Fake GPU (test plugin)") &&
                 !Catch::Contains("cuda0"));
  // NVML reads an instance's own memory, and no utilization in MIG mode.
  CHECK_THAT(out.output, Catch::Contains("UUID MIG-fake-98-0\n    runs in a "
                                         "device host process\n    health: "
                                         "n/a (MIG) busy, 0 B of 128.0 MiB "
                                         "used"));
  CHECK_THAT(out.output,
             Catch::Matches("(.|\n)*mig0.1 [^\n]*128.0 MiB[^\n]*a host "
                            "process\n(.|\n)*"));
  // An instance cannot run in the node's process: left out, with the
  // reason.
  std::ofstream{cfg} << "devices { cpu_workers: 0 gpu_host_processes: true "
                        "gpu_host_process { key: \"mig0.1\" value: false } "
                        "host_binary: \""
                     << COHORT_BINARY
                     << "\" }\n"
                        "tenant { tenant: \"t\" kernels: \"*\" devices: "
                        "\"*\" }\n";
  out = test::run_command(env + COHORT_BINARY + " devices --config " + cfg);
  INFO(out.output);
  CHECK(out.status == 0);
  CHECK_THAT(out.output, Catch::Contains("mig0.0: Fake GPU") &&
                             !Catch::Contains("mig0.1: Fake GPU") &&
                             Catch::Contains("mig0.1: a MIG instance runs in "
                                             "a device host process"));
  // A node that keeps every GPU in its own process hosts no instance: the
  // GPU is the one instance its CUDA shows, not gone.
  std::ofstream{cfg} << "devices { cpu_workers: 0 }\n"
                        "tenant { tenant: \"t\" kernels: \"*\" devices: "
                        "\"*\" }\n";
  out = test::run_command(env + COHORT_BINARY + " devices --config " + cfg);
  INFO(out.output);
  CHECK(out.status == 0);
  CHECK_THAT(out.output, Catch::Contains("cuda0: Fake GPU") &&
                             Catch::Contains("cuda1: Fake GPU") &&
                             !Catch::Contains("mig0.0: Fake GPU") &&
                             Catch::Contains("mig0.0: a MIG instance runs in "
                                             "a device host process"));
  // The node's CUDA_VISIBLE_DEVICES gives it one instance: the other is
  // someone else's.
  std::ofstream{cfg} << "devices { cpu_workers: 0 gpu_host_processes: true "
                        "host_binary: \""
                     << COHORT_BINARY
                     << "\" }\n"
                        "tenant { tenant: \"t\" kernels: \"*\" devices: "
                        "\"*\" }\n";
  out = test::run_command(env + "CUDA_VISIBLE_DEVICES=MIG-fake-98-1 " +
                          COHORT_BINARY + " devices --config " + cfg);
  INFO(out.output);
  CHECK(out.status == 0);
  CHECK_THAT(out.output,
             Catch::Contains("mig0.1: Fake GPU") &&
                 !Catch::Contains("mig0.0: Fake GPU") &&
                 !Catch::Contains("cuda0: Fake GPU") &&
                 Catch::Contains("1 MIG instance(s) left out: this process's "
                                 "CUDA_VISIBLE_DEVICES does not name them"));
  // Instances named while the node's CUDA sees no device at all (it takes
  // one UUID only): NVML still lists them.
  out = test::run_command(env +
                          "CUDA_VISIBLE_DEVICES=MIG-fake-98-0,MIG-fake-98-1 " +
                          COHORT_BINARY + " devices --config " + cfg);
  INFO(out.output);
  CHECK(out.status == 0);
  CHECK_THAT(out.output, Catch::Contains("mig0.0: Fake GPU") &&
                             Catch::Contains("mig0.1: Fake GPU") &&
                             !Catch::Contains("cuda1: Fake GPU"));
  // A start of a UUID names an instance only when no other UUID has it
  // (with no GPU left, a CPU worker keeps the config valid).
  auto with_cpu = dir.file("cpu.textproto");
  std::ofstream{with_cpu} << "devices { cpu_workers: 1 }\n";
  out = test::run_command(env + "CUDA_VISIBLE_DEVICES=MIG-fake-98- " +
                          COHORT_BINARY + " devices --config " + with_cpu);
  INFO(out.output);
  CHECK(out.status == 0);
  CHECK_THAT(out.output, !Catch::Contains("mig0.0: Fake GPU") &&
                             !Catch::Contains("mig0.1: Fake GPU") &&
                             Catch::Contains("2 MIG instance(s) left out"));
  // Naming the GPU gives it all its instances.
  out = test::run_command(env + "CUDA_VISIBLE_DEVICES=GPU-fake-98 " +
                          COHORT_BINARY + " devices --config " + cfg);
  INFO(out.output);
  CHECK(out.status == 0);
  CHECK_THAT(out.output, Catch::Contains("mig0.0: Fake GPU") &&
                             Catch::Contains("mig0.1: Fake GPU") &&
                             !Catch::Contains("left out"));
  // Two compute instances of one GPU instance share its memory in halves.
  out = test::run_command(
      "env -u CUDA_VISIBLE_DEVICES COHORT_FAKE_GPU_MIG=shared "
      "COHORT_PLUGIN_PATH=" +
      std::string{COHORT_FAKE_PLUGIN_DIR} + " " + COHORT_BINARY +
      " devices --config " + cfg);
  INFO(out.output);
  CHECK(out.status == 0);
  CHECK_THAT(
      out.output,
      Catch::Contains("mig0.0: Fake GPU (test plugin) MIG 1c.3g.128mb") &&
          Catch::Matches("(.|\n)*mig0.1 [^\n]*64.0 MiB(.|\n)*"));
  // Work granted to the two instances runs there, each in its own host
  // process that sees its instance alone (CUDA_VISIBLE_DEVICES, which the
  // fake plugin notes in each host), and cuda1 in one that sees all.
  auto path = dir.file("mig.textproto");
  std::ofstream{path} << "name: \"mig\" tenant: \"t\" batches: 30 seed: 3 "
                         "window: 8\n"
                         "stage { name: \"g\" kernel: GEMV args { m: 64 n: "
                         "64 } }\n"
                         "runtime {\n  devices { cpu_workers: 0 gpu_streams: "
                         "2 gpu_host_processes: true host_binary: \""
                      << COHORT_BINARY
                      << "\" }\n"
                         "  tenant { tenant: \"t\" kernels: \"*\" devices: "
                         "\"mig0.0\" devices: \"mig0.1\" }\n"
                         "  audit_path: \""
                      << dir.file("audit.log") << "\"\n}\n";
  auto run =
      test::run_command(env + "COHORT_FAKE_GPU_SEEN=" + dir.file("seen") + " " +
                        COHORT_BINARY + " run " + path + " --no-progress");
  INFO(run.output);
  CHECK(run.status == 0);
  CHECK_THAT(run.output, Catch::Contains("30 completed, 0 failed"));
  auto events = device_events_in(dir.file("audit.log"));
  INFO(events);
  for (auto name : {"mig0.0", "mig0.1"})
    CHECK_THAT(events, Catch::Contains(std::string{name} +
                                       ": supervisor: resetting -> available "
                                       "(restarted: started in a host "
                                       "process)"));
  std::multiset<std::string> seen;
  std::ifstream in{dir.file("seen")};
  for (std::string line; std::getline(in, line);)
    seen.insert(line);
  // Once each (more if a slow start was tried again), and nothing else.
  auto mig0 = seen.count("MIG-fake-98-0"), mig1 = seen.count("MIG-fake-98-1"),
       all = seen.count("(unset)");
  CHECK(mig0 >= 1);
  CHECK(mig1 >= 1);
  CHECK(all >= 1);
  CHECK(mig0 + mig1 + all == seen.size());
  // A name that is neither a GPU's nor an instance's is refused.
  std::ofstream{cfg} << "devices { cpu_workers: 1 gpu_host_process { key: "
                        "\"mig0\" value: true } }\n";
  auto bad = test::run_command(std::string{COHORT_BINARY} +
                               " devices --config " + cfg);
  INFO(bad.output);
  CHECK(bad.status == 2);
  CHECK_THAT(bad.output, Catch::Contains("'mig0' is not a GPU's name"));
}
