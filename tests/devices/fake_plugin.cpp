// A GPU plugin for tests: libcohort-cuda.so over the fake runtime
// (tests/devices/fake_gpu.hpp), two fake GPUs. Built twice: as it should be
// (tests/plugins/fake_cuda/) and with the wrong ABI (tests/plugins/bad_abi/),
// so the loader's whole path runs on machines without a GPU.
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <set>
#include <string>

#include "devices/gpu/plugin.hpp"
#include "tests/devices/fake_gpu.hpp"

#ifndef FAKE_PLUGIN_ABI
#define FAKE_PLUGIN_ABI cohort::devices::gpu::plugin_abi
#endif

namespace {

// Whether this process is a device host (`cohort device-host`).
bool device_host() {
  std::ifstream in{"/proc/self/cmdline"};
  std::string args{std::istreambuf_iterator<char>{in}, {}};
  return args.find(std::string{"device-host"} + '\0') != std::string::npos;
}

// With COHORT_FAKE_GPU_MIG set, the first GPU (0000:98:00.0) is in MIG mode
// with two instances of half its memory and SMs, as its health library
// reports; a process whose CUDA_VISIBLE_DEVICES names one of them sees that
// instance alone, as CUDA does (and none for another MIG UUID). With
// COHORT_FAKE_GPU_MIG=shared the two are compute instances of one GPU
// instance, sharing its memory.
bool mig() {
  return std::getenv("COHORT_FAKE_GPU_MIG") != nullptr;
}

bool mig_shared() {
  auto* v = std::getenv("COHORT_FAKE_GPU_MIG");
  return v != nullptr && std::string{v} == "shared";
}

constexpr const char* mig_uuids[] = {"MIG-fake-98-0", "MIG-fake-98-1"};

std::shared_ptr<cohort::devices::gpu::api> make_fake() {
  cohort::testing::fake_device_spec a;
  a.name = "Fake GPU (test plugin)";
  a.pci_bus_id = "0000:98:00.0";
  auto b = a;
  b.pci_bus_id = "0000:99:00.0";
  std::vector<cohort::testing::fake_device_spec> specs;
  auto* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  // With COHORT_FAKE_GPU_SEEN=FILE, each device host appends what its
  // CUDA_VISIBLE_DEVICES was as its runtime was made.
  if (auto* seen = std::getenv("COHORT_FAKE_GPU_SEEN");
      seen != nullptr && device_host())
    std::ofstream{seen, std::ios::app}
        << (visible != nullptr ? visible : "(unset)") << "\n";
  bool mig_view =
      mig() && visible != nullptr && std::string{visible}.rfind("MIG-", 0) == 0;
  if (mig_view) {
    for (auto* uuid : mig_uuids)
      if (std::string{visible} == uuid) {
        auto x = a;
        x.uuid = uuid;
        x.memory_bytes /= 2;
        x.multiprocessors /= 2;
        specs.push_back(x);
      }
  }
  // For the check of a GPU's identity in device hosts: with
  // COHORT_FAKE_GPU_OTHER_IN_HOSTS set, a device host finds other GPUs
  // (other UUIDs) at the ordinals its node probed.
  if (std::getenv("COHORT_FAKE_GPU_OTHER_IN_HOSTS") != nullptr &&
      device_host()) {
    a.uuid = "OTHER-0";
    b.uuid = "OTHER-1";
  }
  if (!mig_view)
    specs = {a, b};
  // For device rescan: with COHORT_FAKE_GPU_PRESENT=FILE, the GPUs are
  // those whose bus numbers the file lists now, one per line ("98", "99",
  // "9a"...), in bus order, each with UUID "FAKE-<bus>": a runtime made
  // later (a new process's) sees the file as it is then.
  if (auto* present = std::getenv("COHORT_FAKE_GPU_PRESENT");
      present != nullptr && !mig_view) {
    std::set<std::string> buses;
    std::ifstream in{present};
    for (std::string line; std::getline(in, line) && buses.size() < 16;)
      if (line.size() == 2 &&
          line.find_first_not_of("0123456789abcdef") == std::string::npos)
        buses.insert(line);
    specs.clear();
    for (auto& bus : buses) {
      auto x = a;
      x.pci_bus_id = "0000:" + bus + ":00.0";
      x.uuid = "FAKE-" + bus;
      specs.push_back(x);
    }
  }
  bool none = specs.empty();
  auto fake = std::make_shared<cohort::testing::fake_gpu_api>(std::move(specs));
  // CUDA_VISIBLE_DEVICES naming no instance (or several): CUDA finds none.
  fake->set_no_device(none);
  // The entry point of the test bundles' CUDA code (a fake module naming
  // `scale_add`): z = alpha * x + y in f64, as their CPU code computes it.
  fake->define_function("scale_add", [](const cohort_gpu_call& c) {
    auto* x = static_cast<const double*>(c.inputs[0]);
    auto* y = static_cast<const double*>(c.inputs[1]);
    auto* z = static_cast<double*>(c.output);
    for (uint64_t i = 0; i < c.output_length; ++i)
      z[i] = c.alpha * x[i] + y[i];
  });
  // For the tests of GPUs in device host processes: the first host process
  // to create this file gets a sticky error at its first kernel, which no
  // reset clears (as with CUDA); later ones find the file and run clean.
  // The node, which only probes its GPUs, is left alone.
  auto* once = std::getenv("COHORT_FAKE_GPU_STICKY_ONCE");
  if (once != nullptr && device_host()) {
    int fd = ::open(once, O_CREAT | O_EXCL | O_WRONLY, 0600);
    if (fd >= 0) {
      ::close(fd);
      fake->set_sticky_survives_reset(true);
      fake->fault_next_launch(cohort::devices::gpu::status::illegal_address);
    }
  }
  return fake;
}

// The fake GPUs' health library: fixed samples and, with
// COHORT_FAKE_GPU_XID=N, Xid N told to each watcher of a GPU as it starts
// watching (the node and every device host alike, as NVML tells each
// process that watches), of GPU instance COHORT_FAKE_GPU_XID_INSTANCE when
// set (else of the whole GPU).
std::shared_ptr<cohort::devices::health::gpu_monitor> make_fake_monitor() {
  auto m = std::make_shared<cohort::testing::fake_monitor>();
  if (auto* xid = std::getenv("COHORT_FAKE_GPU_XID"); xid != nullptr) {
    cohort::devices::health::gpu_event ev;
    ev.what = cohort::devices::health::gpu_event::kind::xid;
    ev.xid = uint32_t(std::strtoul(xid, nullptr, 10));
    ev.detail = "raised by the test plugin";
    if (auto* gi = std::getenv("COHORT_FAKE_GPU_XID_INSTANCE"); gi != nullptr)
      ev.gpu_instance = uint32_t(std::strtoul(gi, nullptr, 10));
    m->raise_on_watch(std::move(ev));
  }
  // With COHORT_FAKE_GPU_LINK=nvlink (or pcie), the two GPUs are linked.
  if (auto* link = std::getenv("COHORT_FAKE_GPU_LINK"); link != nullptr) {
    auto kind = std::string{link} == "nvlink" ? cohort::link_kind::fabric
                : std::string{link} == "pcie" ? cohort::link_kind::pcie
                                              : cohort::link_kind::none;
    m->set_link("0000:98:00.0", "0000:99:00.0", kind);
  }
  if (mig()) {
    cohort::devices::health::mig_gpu g;
    g.index = 0;
    g.pci_bus_id = "0000:98:00.0";
    g.uuid = "GPU-fake-98";
    g.model = "Fake GPU (test plugin)";
    g.arch = "sm_90";
    for (uint32_t i = 0; i < 2; ++i) {
      cohort::devices::health::mig_instance x;
      x.index = i;
      x.uuid = mig_uuids[i];
      x.gpu_instance_id = mig_shared() ? 1 : 1 + i;
      x.compute_instance_id = mig_shared() ? i : 0;
      x.memory_bytes = uint64_t{128} << 20;
      x.multiprocessors = 4;
      x.gpu_slices = 3;
      x.compute_slices = mig_shared() ? 1 : 3;
      // Named as NVML names instances, but for the memory's unit.
      x.name = mig_shared() ? "Fake GPU (test plugin) MIG 1c.3g.128mb"
                            : "Fake GPU (test plugin) MIG 3g.128mb";
      g.instances.push_back(x);
    }
    m->add_mig_gpu(std::move(g));
  }
  return m;
}

cohort::devices::gpu::plugin_entry make_entry() {
  auto e = cohort::devices::gpu::make_plugin_entry("CUDA", &make_fake,
                                                   &make_fake_monitor);
  e.abi = FAKE_PLUGIN_ABI;
  return e;
}

const auto fake_entry = make_entry();

} // namespace

extern "C" __attribute__((visibility("default")))
const cohort::devices::gpu::plugin_entry*
cohort_gpu_plugin_v1() {
  return &fake_entry;
}
