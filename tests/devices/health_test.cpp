// GPU health monitors: NVML against a fake libnvidia-ml (tests/devices/
// fake_nvml.cpp, built as a shared module), ROCm SMI as it is on this host.
#include <catch2/catch.hpp>

#include <dlfcn.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "devices/gpu/plugin.hpp"
#include "devices/health/gpu_watch.hpp"
#include "devices/health/health.hpp"
#include "tests/devices/fake_gpu.hpp"

using namespace cohort::devices::health;
using namespace std::chrono_literals;

namespace {

/// The fake's test controls, reached by dlopen-ing the file open_nvml loads.
struct fake_nvml {
  void* lib = nullptr;
  void (*reset)() = nullptr;
  void (*set)(const char*, unsigned, unsigned, unsigned long long,
              unsigned long long, unsigned, unsigned long long,
              unsigned long long) = nullptr;
  void (*set_result)(const char*, const char*, int) = nullptr;
  void (*set_power)(const char*, unsigned, unsigned) = nullptr;
  void (*set_init_result)(int) = nullptr;
  void (*set_wait_result)(int) = nullptr;
  int (*raise)(const char*, unsigned long long, unsigned long long) = nullptr;
  int (*raise_xid)(const char*, unsigned long long) = nullptr;
  int (*raise_instance)(const char*, unsigned long long, unsigned long long,
                        unsigned) = nullptr;
  int (*init_count)() = nullptr;
  void (*set_link)(const char*, const char*, int) = nullptr;
  void (*set_mig_mode)(const char*, int, unsigned) = nullptr;
  void (*add_mig)(const char*, unsigned, const char*, unsigned, unsigned,
                  unsigned long long, unsigned, unsigned, unsigned) = nullptr;
  void (*set_mig_result)(const char*, const char*, int) = nullptr;
  void (*set_mig_used)(const char*, unsigned long long) = nullptr;

  fake_nvml() {
    lib = dlopen(COHORT_FAKE_NVML, RTLD_NOW | RTLD_LOCAL);
    REQUIRE(lib != nullptr);
    bind("fake_nvml_reset", reset);
    bind("fake_nvml_set", set);
    bind("fake_nvml_set_result", set_result);
    bind("fake_nvml_set_power", set_power);
    bind("fake_nvml_set_init_result", set_init_result);
    bind("fake_nvml_set_wait_result", set_wait_result);
    bind("fake_nvml_raise", raise);
    bind("fake_nvml_raise_xid", raise_xid);
    bind("fake_nvml_raise_instance", raise_instance);
    bind("fake_nvml_init_count", init_count);
    bind("fake_nvml_set_link", set_link);
    bind("fake_nvml_set_mig_mode", set_mig_mode);
    bind("fake_nvml_add_mig", add_mig);
    bind("fake_nvml_set_mig_result", set_mig_result);
    bind("fake_nvml_set_mig_used", set_mig_used);
    reset();
  }

  ~fake_nvml() {
    reset();
    dlclose(lib);
  }

  template <class F> void bind(const char* name, F& fn) {
    fn = reinterpret_cast<F>(dlsym(lib, name));
    REQUIRE(fn != nullptr);
  }
};

/// Collects the events a watch delivers, from the monitor's thread.
struct event_log {
  std::mutex mtx;
  std::condition_variable cv;
  std::vector<gpu_event> events;

  std::function<void(gpu_event)> sink() {
    return [this](gpu_event ev) {
      std::lock_guard<std::mutex> guard{mtx};
      events.push_back(std::move(ev));
      cv.notify_all();
    };
  }

  bool wait_for(size_t n, std::chrono::milliseconds timeout = 5s) {
    std::unique_lock<std::mutex> guard{mtx};
    return cv.wait_for(guard, timeout, [&] { return events.size() >= n; });
  }

  size_t size() {
    std::lock_guard<std::mutex> guard{mtx};
    return events.size();
  }
};

constexpr const char* gpu0 = "0000:3b:00.0";
constexpr const char* gpu1 = "0000:af:00.0";

} // namespace

TEST_CASE("NVML without its library is unavailable and says why", "[devices]") {
  auto m = open_nvml("/nonexistent/libnvidia-ml-missing.so.1");
  REQUIRE(m);
  CHECK(std::string{m->library()} == "NVML");
  CHECK_FALSE(m->available());
  CHECK_THAT(m->unavailable_reason(),
             Catch::Contains("/nonexistent/libnvidia-ml-missing.so.1"));
  auto s = m->sample(gpu0);
  CHECK_FALSE(s.available);
  CHECK(s.unavailable_reason == m->unavailable_reason());
  CHECK_FALSE(m->watch(gpu0, [](gpu_event) {}));
  m->unwatch(gpu0); // harmless
}

TEST_CASE("NVML from a library that lacks its symbols is unavailable",
          "[devices]") {
  // A real shared library, but not NVML.
  auto m = open_nvml("libc.so.6");
  CHECK_FALSE(m->available());
  CHECK_THAT(m->unavailable_reason(), Catch::Contains("nvmlInit_v2"));
}

TEST_CASE("NVML whose init fails is unavailable with NVML's error",
          "[devices]") {
  fake_nvml fake;
  fake.set_init_result(9); // NVML_ERROR_DRIVER_NOT_LOADED
  auto m = open_nvml(COHORT_FAKE_NVML);
  CHECK_FALSE(m->available());
  CHECK_THAT(m->unavailable_reason(), Catch::Contains("Driver Not Loaded"));
  CHECK(fake.init_count() == 0);
}

TEST_CASE("NVML samples a GPU's counters", "[devices]") {
  fake_nvml fake;
  fake.set(gpu0, 37, 12, 3ull << 30, 80ull << 30, 61, 5, 1);
  fake.set(gpu1, 90, 70, 70ull << 30, 80ull << 30, 74, 0, 0);
  fake.set_power(gpu0, 312'500, 700'000);
  {
    auto m = open_nvml(COHORT_FAKE_NVML);
    REQUIRE(m->available());
    CHECK(m->unavailable_reason().empty());
    CHECK(fake.init_count() == 1);

    // CUDA spells bus ids with an 8-digit domain in upper case.
    for (auto id : {gpu0, "00000000:3B:00.0"}) {
      auto s = m->sample(id);
      REQUIRE(s.available);
      CHECK(s.gpu_util_percent == 37);
      CHECK(s.memory_util_percent == 12);
      CHECK(s.memory_used_bytes == 3ull << 30);
      CHECK(s.memory_total_bytes == 80ull << 30);
      CHECK(s.temperature_c == 61);
      CHECK(s.ecc_corrected == 5);
      CHECK(s.ecc_uncorrected == 1);
      CHECK(s.power_w == Approx(312.5));
      CHECK(s.power_limit_w == Approx(700.0));
      CHECK(s.source == "NVML");
    }
    auto s1 = m->sample(gpu1);
    REQUIRE(s1.available);
    CHECK(s1.gpu_util_percent == 90);
    CHECK(s1.temperature_c == 74);

    SECTION("an unknown bus id is unavailable with NVML's error") {
      auto s = m->sample("0000:99:00.0");
      CHECK_FALSE(s.available);
      CHECK_THAT(s.unavailable_reason, Catch::Contains("Not Found"));
      CHECK_THAT(s.unavailable_reason, Catch::Contains("0000:99:00.0"));
    }
    SECTION("a failing call makes the sample unavailable, not a crash") {
      fake.set_result(gpu0, nullptr, 15); // NVML_ERROR_GPU_IS_LOST
      auto s = m->sample(gpu0);
      CHECK_FALSE(s.available);
      CHECK_THAT(s.unavailable_reason, Catch::Contains("GPU is lost"));
      CHECK(m->sample(gpu1).available);
      fake.set_result(gpu0, nullptr, 0);
      fake.set_result(gpu0, "nvmlDeviceGetMemoryInfo", 4); // NO_PERMISSION
      s = m->sample(gpu0);
      CHECK_FALSE(s.available);
      CHECK_THAT(s.unavailable_reason,
                 Catch::Contains("nvmlDeviceGetMemoryInfo"));
    }
    SECTION("a GPU without temperature or ECC support still samples") {
      fake.set_result(gpu0, "nvmlDeviceGetTemperature", 3); // NOT_SUPPORTED
      fake.set_result(gpu0, "nvmlDeviceGetTotalEccErrors", 3);
      auto s = m->sample(gpu0);
      REQUIRE(s.available);
      CHECK(s.temperature_c == -1);
      CHECK(s.ecc_corrected == 0);
      CHECK(s.ecc_uncorrected == 0);
      CHECK(s.gpu_util_percent == 37);
    }
    SECTION("a GPU without a power sensor still samples, power unknown") {
      fake.set_result(gpu0, "nvmlDeviceGetPowerUsage", 3); // NOT_SUPPORTED
      fake.set_result(gpu0, "nvmlDeviceGetEnforcedPowerLimit", 3);
      auto s = m->sample(gpu0);
      REQUIRE(s.available);
      CHECK(s.power_w == -1);
      CHECK(s.power_limit_w == -1);
      CHECK(s.temperature_c == 61);
    }
  }
  // Destruction shuts NVML down.
  CHECK(fake.init_count() == 0);
}

TEST_CASE("NVML tells NVLink from PCIe peer-to-peer between two GPUs",
          "[devices]") {
  fake_nvml fake;
  constexpr const char* gpu2 = "0000:d8:00.0";
  for (auto id : {gpu0, gpu1, gpu2})
    fake.set(id, 0, 0, 0, 80ull << 30, 40, 0, 0);
  fake.set_link(gpu0, gpu1, 2);
  fake.set_link(gpu1, gpu2, 1);
  auto m = open_nvml(COHORT_FAKE_NVML);
  REQUIRE(m->available());
  CHECK(m->link_between(gpu0, gpu1) == cohort::link_kind::fabric);
  CHECK(m->link_between("00000000:AF:00.0", gpu0) == cohort::link_kind::fabric);
  CHECK(m->link_between(gpu1, gpu2) == cohort::link_kind::pcie);
  CHECK(m->link_between(gpu0, gpu2) == cohort::link_kind::none);
  // Itself, a GPU NVML does not know, a bad bus id: no link.
  CHECK(m->link_between(gpu0, gpu0) == cohort::link_kind::none);
  CHECK(m->link_between(gpu0, "0000:01:00.0") == cohort::link_kind::none);
  CHECK(m->link_between(gpu0, "not a bus id") == cohort::link_kind::none);
  // A driver that cannot answer: no link, not an error.
  fake.set_result(gpu0, "nvmlDeviceGetP2PStatus", 3);
  CHECK(m->link_between(gpu0, gpu1) == cohort::link_kind::none);
}

TEST_CASE("NVML lists the MIG instances of GPUs in MIG mode", "[devices]") {
  fake_nvml fake;
  constexpr const char* gpu2 = "0000:d8:00.0";
  for (auto id : {gpu0, gpu1, gpu2})
    fake.set(id, 0, 0, 0, 80ull << 30, 40, 0, 0);
  auto m = open_nvml(COHORT_FAKE_NVML);
  REQUIRE(m->available());
  CHECK(m->mig_gpus().empty());
  // GPU 1 in MIG mode with 7 slots: a 3g.40gb and a 1g.10gb instance, in
  // slots 0 and 4; GPU 2 in MIG mode without instances.
  fake.set_mig_mode(gpu1, 1, 7);
  fake.add_mig(gpu1, 0, "MIG-aaaa", 1, 0, 40ull << 30, 60, 3, 3);
  fake.add_mig(gpu1, 4, "MIG-bbbb", 9, 0, 10ull << 30, 16, 1, 1);
  fake.set_mig_mode(gpu2, 1, 7);
  auto migs = m->mig_gpus();
  REQUIRE(migs.size() == 2);
  auto& g = migs[0];
  CHECK(g.index == 1);
  CHECK(g.pci_bus_id == "0000:af:00.0");
  CHECK(g.uuid == "GPU-fake-00000000:af:00.0");
  CHECK(g.model == "Fake NVML GPU");
  CHECK(g.arch == "sm_90");
  CHECK(g.problems.empty());
  REQUIRE(g.instances.size() == 2);
  CHECK(g.instances[0].index == 0);
  CHECK(g.instances[0].uuid == "MIG-aaaa");
  // NVML's name for the instance, with its profile.
  CHECK(g.instances[0].name == "Fake NVML GPU MIG 3g.40gb");
  CHECK(g.instances[0].gpu_instance_id == 1);
  CHECK(g.instances[0].memory_bytes == 40ull << 30);
  CHECK(g.instances[0].multiprocessors == 60);
  CHECK(g.instances[0].gpu_slices == 3);
  CHECK(g.instances[1].index == 4);
  CHECK(g.instances[1].uuid == "MIG-bbbb");
  CHECK(g.instances[1].gpu_instance_id == 9);
  CHECK(g.instances[1].compute_slices == 1);
  CHECK(migs[1].pci_bus_id == "0000:d8:00.0");
  CHECK(migs[1].instances.empty());
  // A GPU in MIG mode reports no utilization; an instance is read with
  // its own memory and its GPU's temperature.
  fake.set_mig_used("MIG-bbbb", 3ull << 30);
  auto whole = m->sample(gpu1);
  CHECK(whole.available);
  CHECK_FALSE(whole.utilization_known);
  CHECK(whole.memory_total_bytes == 80ull << 30);
  auto part = m->sample_device(gpu1, "MIG-bbbb");
  INFO(part.unavailable_reason);
  CHECK(part.available);
  CHECK_FALSE(part.utilization_known);
  CHECK(part.memory_total_bytes == 10ull << 30);
  CHECK(part.memory_used_bytes == 3ull << 30);
  CHECK(part.temperature_c == 40);
  CHECK(m->sample_device(gpu0, "GPU-whatever").utilization_known);
  auto gone = m->sample_device(gpu1, "MIG-cccc");
  CHECK_FALSE(gone.available);
  CHECK_THAT(gone.unavailable_reason, Catch::Contains("MIG-cccc"));
  // An instance NVML cannot read is left out, and the GPU says why.
  fake.set_mig_result("MIG-aaaa", "nvmlDeviceGetAttributes_v2", 999);
  migs = m->mig_gpus();
  REQUIRE(migs.size() == 2);
  REQUIRE(migs[0].instances.size() == 1);
  CHECK(migs[0].instances[0].uuid == "MIG-bbbb");
  REQUIRE(migs[0].problems.size() == 1);
  CHECK_THAT(migs[0].problems[0],
             Catch::Contains("nvmlDeviceGetAttributes_v2") &&
                 Catch::Contains("MIG device 0 of 0000:af:00.0"));
  fake.set_mig_result("MIG-aaaa", "nvmlDeviceGetAttributes_v2", 0);
  // A GPU whose bus id cannot be read is reported with the reason alone.
  fake.set_result(gpu2, "nvmlDeviceGetPciInfo_v3", 999);
  migs = m->mig_gpus();
  REQUIRE(migs.size() == 2);
  CHECK(migs[1].pci_bus_id.empty());
  CHECK(migs[1].instances.empty());
  REQUIRE(migs[1].problems.size() == 1);
  CHECK_THAT(migs[1].problems[0], Catch::Contains("nvmlDeviceGetPciInfo_v3"));
  fake.set_result(gpu2, "nvmlDeviceGetPciInfo_v3", 0);
  // A GPU whose MIG mode cannot be read is not in MIG mode.
  fake.set_result(gpu1, "nvmlDeviceGetMigMode", 3);
  migs = m->mig_gpus();
  REQUIRE(migs.size() == 1);
  CHECK(migs[0].pci_bus_id == "0000:d8:00.0");
}

TEST_CASE("NVML delivers Xid and ECC events of watched GPUs", "[devices]") {
  fake_nvml fake;
  fake.set(gpu0, 0, 0, 0, 1 << 30, 40, 0, 0);
  fake.set(gpu1, 0, 0, 0, 1 << 30, 40, 0, 0);
  // Declared before the monitor: they outlive its event thread.
  event_log log0, log1;
  auto m = open_nvml(COHORT_FAKE_NVML);
  REQUIRE(m->available());
  REQUIRE(m->watch(gpu0, log0.sink()));
  REQUIRE(m->watch("00000000:AF:00.0", log1.sink()));
  CHECK_FALSE(m->watch("0000:99:00.0", log0.sink()));

  REQUIRE(fake.raise_xid(gpu0, 48) == 1);
  REQUIRE(log0.wait_for(1));
  {
    std::lock_guard<std::mutex> guard{log0.mtx};
    CHECK(log0.events[0].what == gpu_event::kind::xid);
    CHECK(log0.events[0].xid == 48);
    CHECK_THAT(log0.events[0].detail, Catch::Contains("48"));
  }

  REQUIRE(fake.raise_xid(gpu1, 79) == 1);
  REQUIRE(log1.wait_for(1));
  {
    std::lock_guard<std::mutex> guard{log1.mtx};
    CHECK(log1.events[0].what == gpu_event::kind::lost);
    CHECK(log1.events[0].xid == 79);
  }

  REQUIRE(fake.raise(gpu0, 0x2, 0) == 1); // double-bit ECC
  REQUIRE(fake.raise(gpu0, 0x1, 0) == 1); // single-bit ECC
  REQUIRE(log0.wait_for(3));
  {
    std::lock_guard<std::mutex> guard{log0.mtx};
    CHECK(log0.events[1].what == gpu_event::kind::ecc_uncorrectable);
    CHECK(log0.events[2].what == gpu_event::kind::ecc_corrected);
  }
  CHECK(log1.size() == 1); // events stay with their GPU

  // After unwatch nothing more arrives; the other GPU is still watched.
  m->unwatch(gpu0);
  fake.raise_xid(gpu0, 13);
  fake.raise_xid(gpu1, 31);
  // The fake's queue is in order: once gpu1's Xid 31 is in, gpu0's Xid 13
  // has been handled.
  REQUIRE(log1.wait_for(2));
  CHECK(log0.size() == 3);

  // Watching again resumes delivery.
  REQUIRE(m->watch(gpu0, log0.sink()));
  fake.raise_xid(gpu0, 43);
  REQUIRE(log0.wait_for(4));
  {
    std::lock_guard<std::mutex> guard{log0.mtx};
    CHECK(log0.events[3].gpu_instance == gpu_event::whole_gpu);
  }
  // On a GPU in MIG mode NVML says which GPU instance an event is of.
  REQUIRE(fake.raise_instance(gpu0, 0x8, 31, 2) == 1);
  REQUIRE(log0.wait_for(5));
  {
    std::lock_guard<std::mutex> guard{log0.mtx};
    CHECK(log0.events[4].xid == 31);
    CHECK(log0.events[4].gpu_instance == 2);
    CHECK(concerns(log0.events[4], 2));
    CHECK_FALSE(concerns(log0.events[4], 1));
    CHECK(concerns(log0.events[4], gpu_event::whole_gpu));
    CHECK(concerns(log0.events[3], 1));
  }
  // A device-level error is the whole card's, whichever instance NVML
  // names: Xid 48 (double-bit ECC) and an uncorrectable ECC event.
  REQUIRE(fake.raise_instance(gpu0, 0x8, 48, 2) == 1);
  REQUIRE(fake.raise_instance(gpu0, 0x2, 0, 2) == 1);
  REQUIRE(log0.wait_for(7));
  std::lock_guard<std::mutex> guard{log0.mtx};
  CHECK(log0.events[5].xid == 48);
  CHECK(log0.events[5].gpu_instance == gpu_event::whole_gpu);
  CHECK(log0.events[6].what == gpu_event::kind::ecc_uncorrectable);
  CHECK(log0.events[6].gpu_instance == gpu_event::whole_gpu);
}

TEST_CASE("NVML reports a GPU that stops answering as lost, once",
          "[devices]") {
  fake_nvml fake;
  fake.set(gpu0, 0, 0, 0, 1 << 30, 40, 0, 0);
  fake.set(gpu1, 0, 0, 0, 1 << 30, 40, 0, 0);
  event_log log0, log1;
  auto m = open_nvml(COHORT_FAKE_NVML);
  REQUIRE(m->watch(gpu0, log0.sink()));
  REQUIRE(m->watch(gpu1, log1.sink()));
  // The event wait fails without naming a GPU; only gpu0 is gone.
  fake.set_result(gpu0, nullptr, 15); // NVML_ERROR_GPU_IS_LOST
  fake.set_wait_result(15);
  REQUIRE(log0.wait_for(1));
  // Further failed waits (one per 250 ms) do not repeat it.
  std::this_thread::sleep_for(600ms);
  fake.set_wait_result(0);
  std::lock_guard<std::mutex> guard{log0.mtx};
  REQUIRE(log0.events.size() == 1);
  CHECK(log0.events[0].what == gpu_event::kind::lost);
  CHECK_THAT(log0.events[0].detail, Catch::Contains("GPU is lost"));
  CHECK(log1.size() == 0);
}

TEST_CASE("an NVML monitor with a running event thread stops promptly",
          "[devices]") {
  fake_nvml fake;
  fake.set(gpu0, 0, 0, 0, 1 << 30, 40, 0, 0);
  auto m = open_nvml(COHORT_FAKE_NVML);
  REQUIRE(m->watch(gpu0, [](gpu_event) {}));
  std::this_thread::sleep_for(50ms); // the thread is inside its wait
  auto start = std::chrono::steady_clock::now();
  m.reset();
  auto took = std::chrono::steady_clock::now() - start;
  CHECK(took < 1s);
  CHECK(fake.init_count() == 0);
}

TEST_CASE("an NVML callback may unwatch and release its monitor", "[devices]") {
  fake_nvml fake;
  fake.set(gpu0, 0, 0, 0, 1 << 30, 40, 0, 0);
  auto m = open_nvml(COHORT_FAKE_NVML);
  std::mutex mtx;
  std::condition_variable cv;
  bool done = false;
  std::shared_ptr<gpu_monitor> keep = m;
  REQUIRE(m->watch(gpu0, [&](gpu_event) {
    // The last reference goes away on the monitor's own thread.
    std::shared_ptr<gpu_monitor> last;
    {
      std::lock_guard<std::mutex> guard{mtx};
      last = std::move(keep);
    }
    last->unwatch(gpu0);
    last.reset();
    // Notify under the lock: the test's locals outlive this callback.
    std::lock_guard<std::mutex> guard{mtx};
    done = true;
    cv.notify_all();
  }));
  m.reset();
  fake.raise_xid(gpu0, 48);
  {
    std::unique_lock<std::mutex> guard{mtx};
    REQUIRE(cv.wait_for(guard, 5s, [&] { return done; }));
  }
  // The event thread winds the session down on its own: NVML shut down.
  for (int i = 0; i < 100 && fake.init_count() != 0; ++i)
    std::this_thread::sleep_for(20ms);
  CHECK(fake.init_count() == 0);
}

TEST_CASE("ROCm SMI on this host", "[devices]") {
  // ROCm SMI lives in the HIP plugin, with the HIP runtime.
  auto& hip = cohort::devices::gpu::plugin("HIP");
  if (!hip.entry) {
    WARN("SKIPPED: the HIP plugin did not load: " << hip.note);
    return;
  }
  REQUIRE(hip.entry->make_monitor);
  auto m = hip.entry->make_monitor();
  REQUIRE(m);
  CHECK(std::string{m->library()} == "ROCm SMI");
  if (!m->available()) {
    // No AMD driver (or no HIP backend): it says why and samples nothing.
    CHECK_FALSE(m->unavailable_reason().empty());
    CHECK_THAT(m->unavailable_reason(), Catch::Contains("ROCm SMI"));
    auto s = m->sample(gpu0);
    CHECK_FALSE(s.available);
    CHECK_FALSE(s.unavailable_reason.empty());
    CHECK_FALSE(m->watch(gpu0, [](gpu_event) {}));
  } else {
    CHECK(m->unavailable_reason().empty());
    auto s = m->sample("ffff:ff:1f.7");
    CHECK_FALSE(s.available);
    CHECK_FALSE(s.unavailable_reason.empty());
    CHECK_FALSE(m->watch("ffff:ff:1f.7", [](gpu_event) {}));
  }
}

TEST_CASE("one watch of a GPU gives each MIG instance its own GPU "
          "instance's events and the whole GPU's",
          "[devices]") {
  auto m = std::make_shared<cohort::testing::fake_monitor>();
  // The instances of GPU instances 1 and 2 and a device of the whole GPU.
  std::vector<uint32_t> heard1, heard2, heard_all;
  int a = 0, b = 0, c = 0;
  {
    auto w = std::make_shared<gpu_watch>(m, gpu0);
    w->join(&a, 1, [&](const gpu_event& ev) { heard1.push_back(ev.xid); });
    w->join(&b, 2, [&](const gpu_event& ev) { heard2.push_back(ev.xid); });
    w->join(&c, gpu_event::whole_gpu,
            [&](const gpu_event& ev) { heard_all.push_back(ev.xid); });
    // Nothing is watched before start.
    CHECK_FALSE(m->watching(gpu0));
    REQUIRE(w->start());
    CHECK(w->start());
    CHECK(m->watching(gpu0));
    auto xid = [](uint32_t code, uint32_t gi) {
      gpu_event ev;
      ev.xid = code;
      ev.gpu_instance = gi;
      return ev;
    };
    m->raise(gpu0, xid(13, 1));
    m->raise(gpu0, xid(31, 2));
    m->raise(gpu0, xid(79, gpu_event::whole_gpu));
    CHECK(heard1 == std::vector<uint32_t>{13, 79});
    CHECK(heard2 == std::vector<uint32_t>{31, 79});
    CHECK(heard_all == std::vector<uint32_t>{13, 31, 79});
    // One that left hears nothing more; the others still do.
    w->leave(&a);
    m->raise(gpu0, xid(43, 1));
    CHECK(heard1.size() == 2);
    CHECK(heard_all.back() == 43);
  }
  // The watch ended with its last holder.
  CHECK_FALSE(m->watching(gpu0));
  // A MIG instance's GPU instance, found by its UUID.
  mig_gpu g;
  g.pci_bus_id = gpu0;
  mig_instance x;
  x.uuid = "MIG-abc";
  x.gpu_instance_id = 7;
  g.instances.push_back(x);
  m->add_mig_gpu(g);
  CHECK(mig_gpu_instance(*m, "MIG-abc") == 7);
  CHECK(mig_gpu_instance(*m, "MIG-other") == gpu_event::whole_gpu);
  CHECK(mig_gpu_instance(*m, "") == gpu_event::whole_gpu);
}
