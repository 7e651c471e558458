// GPU health through NVML, loaded with dlopen: there is no NVML header on
// the build machines, so the few types, constants and functions used are
// declared here with NVML's C ABI (nvml.h).
#include <dlfcn.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "devices/health/health.hpp"
#include "devices/health/unavailable.hpp"
#include "devices/topology.hpp"
#include "devices/xid_policy.hpp"

// -- The NVML ABI, as far as it is used -------------------------------------

// The types live in the global namespace, as nvml.h declares them: the
// entry points are called through pointers of exactly NVML's function types
// (UBSan's -fsanitize=function checks that against an instrumented library,
// the test suite's fake NVML, and types of an anonymous namespace differ).
struct nvmlDevice_st;
struct nvmlEventSet_st;

struct nvmlUtilization_t {
  unsigned int gpu;
  unsigned int memory;
};

struct nvmlMemory_t {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

struct nvmlPciInfo_t {
  char busIdLegacy[16];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;
  unsigned int pciSubSystemId;
  char busId[32];
};

struct nvmlDeviceAttributes_t {
  unsigned int multiprocessorCount;
  unsigned int sharedCopyEngineCount;
  unsigned int sharedDecoderCount;
  unsigned int sharedEncoderCount;
  unsigned int sharedJpegCount;
  unsigned int sharedOfaCount;
  unsigned int gpuInstanceSliceCount;
  unsigned int computeInstanceSliceCount;
  unsigned long long memorySizeMB;
};

struct nvmlEventData_t {
  nvmlDevice_st* device;
  unsigned long long eventType;
  unsigned long long eventData;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};

namespace cohort::devices::health {

namespace {

using nvmlReturn_t = int;
using nvmlDevice_t = nvmlDevice_st*;
using nvmlEventSet_t = nvmlEventSet_st*;

constexpr nvmlReturn_t NVML_SUCCESS = 0;
constexpr nvmlReturn_t NVML_ERROR_NOT_SUPPORTED = 3;
constexpr nvmlReturn_t NVML_ERROR_NOT_FOUND = 6;
constexpr nvmlReturn_t NVML_ERROR_TIMEOUT = 10;
constexpr nvmlReturn_t NVML_ERROR_GPU_IS_LOST = 15;

// Enumerations are passed as int (nvmlTemperatureSensors_t,
// nvmlMemoryErrorType_t, nvmlEccCounterType_t).
constexpr int NVML_TEMPERATURE_GPU = 0;
constexpr int NVML_MEMORY_ERROR_TYPE_CORRECTED = 0;
constexpr int NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1;
constexpr int NVML_VOLATILE_ECC = 0;
// nvmlGpuP2PCapsIndex_t and nvmlGpuP2PStatus_t.
constexpr int NVML_P2P_CAPS_INDEX_READ = 0;
constexpr int NVML_P2P_CAPS_INDEX_NVLINK = 2;
constexpr int NVML_P2P_STATUS_OK = 0;
constexpr unsigned int NVML_DEVICE_MIG_ENABLE = 1;
/// NVML_DEVICE_UUID_V2_BUFFER_SIZE and NVML_DEVICE_NAME_V2_BUFFER_SIZE.
constexpr unsigned int uuid_buffer = 96;
constexpr unsigned int name_buffer = 96;

constexpr unsigned long long nvmlEventTypeSingleBitEccError = 0x1;
constexpr unsigned long long nvmlEventTypeDoubleBitEccError = 0x2;
constexpr unsigned long long nvmlEventTypeXidCriticalError = 0x8;
constexpr unsigned long long wanted_events = nvmlEventTypeSingleBitEccError |
                                             nvmlEventTypeDoubleBitEccError |
                                             nvmlEventTypeXidCriticalError;

/// Xid 79: "GPU has fallen off the bus".
constexpr unsigned long long xid_fallen_off_bus = 79;

/// How long the event thread waits per call, which bounds how long
/// destruction waits for it.
constexpr unsigned int event_wait_ms = 250;

/// The NVML entry points; all required except where noted.
struct nvml_api {
  nvmlReturn_t (*init)();
  nvmlReturn_t (*shutdown)();
  const char* (*error_string)(nvmlReturn_t);
  nvmlReturn_t (*handle_by_pci)(const char*, nvmlDevice_t*);
  nvmlReturn_t (*utilization)(nvmlDevice_t, nvmlUtilization_t*);
  nvmlReturn_t (*memory)(nvmlDevice_t, nvmlMemory_t*);
  nvmlReturn_t (*temperature)(nvmlDevice_t, int, unsigned int*);
  nvmlReturn_t (*ecc_total)(nvmlDevice_t, int, int, unsigned long long*);
  nvmlReturn_t (*event_set_create)(nvmlEventSet_t*);
  nvmlReturn_t (*register_events)(nvmlDevice_t, unsigned long long,
                                  nvmlEventSet_t);
  nvmlReturn_t (*event_set_wait)(nvmlEventSet_t, nvmlEventData_t*,
                                 unsigned int);
  nvmlReturn_t (*event_set_free)(nvmlEventSet_t);
  /// Optional: without it every wanted event type is registered.
  nvmlReturn_t (*supported_events)(nvmlDevice_t, unsigned long long*);
  /// Optional: without them power is unknown.
  nvmlReturn_t (*power_usage)(nvmlDevice_t, unsigned int*);
  nvmlReturn_t (*power_limit)(nvmlDevice_t, unsigned int*);
  /// Optional: without it no GPU is linked to another.
  nvmlReturn_t (*p2p_status)(nvmlDevice_t, nvmlDevice_t, int, int*);
  /// Optional, all or none: without them no GPU is in MIG mode.
  struct mig_calls {
    nvmlReturn_t (*count)(unsigned int*);
    nvmlReturn_t (*handle_by_index)(unsigned int, nvmlDevice_t*);
    nvmlReturn_t (*pci_info)(nvmlDevice_t, nvmlPciInfo_t*);
    nvmlReturn_t (*name)(nvmlDevice_t, char*, unsigned int);
    nvmlReturn_t (*mig_mode)(nvmlDevice_t, unsigned int*, unsigned int*);
    nvmlReturn_t (*max_mig_devices)(nvmlDevice_t, unsigned int*);
    nvmlReturn_t (*mig_handle)(nvmlDevice_t, unsigned int, nvmlDevice_t*);
    nvmlReturn_t (*uuid)(nvmlDevice_t, char*, unsigned int);
    nvmlReturn_t (*attributes)(nvmlDevice_t, nvmlDeviceAttributes_t*);
    nvmlReturn_t (*gpu_instance_id)(nvmlDevice_t, unsigned int*);
    nvmlReturn_t (*compute_instance_id)(nvmlDevice_t, unsigned int*);
    nvmlReturn_t (*handle_by_uuid)(const char*, nvmlDevice_t*);
  } mig;
  bool has_mig = false;
  /// Optional: without it a MIG GPU's architecture comes from CUDA's view.
  nvmlReturn_t (*compute_capability)(nvmlDevice_t, int*, int*);
};

template <class F>
bool resolve(void* lib, const char* name, F& fn, std::string& missing) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  if (fn == nullptr) {
    if (!missing.empty())
      missing += ", ";
    missing += name;
  }
  return fn != nullptr;
}

/// "0000:3B:00.0" and "00000000:3b:00.0" name the same GPU; watches are
/// keyed by one spelling.
std::string canonical_bus_id(const std::string& pci_bus_id) {
  unsigned domain = 0, bus = 0, dev = 0, fn = 0;
  char tail = 0;
  if (std::sscanf(pci_bus_id.c_str(), "%x:%x:%x.%x%c", &domain, &bus, &dev, &fn,
                  &tail) != 4)
    return pci_bus_id;
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%08x:%02x:%02x.%x", domain, bus, dev, fn);
  return buf;
}

/// Everything the event thread touches. Shared between the monitor and its
/// thread, so that a monitor released from inside an event callback does not
/// pull the library out from under the thread.
struct nvml_session {
  void* lib = nullptr;
  nvml_api api{};

  std::mutex mtx; // guards the members below up to `delivery`
  struct watch_entry {
    nvmlDevice_t device;
    std::function<void(gpu_event)> on_event;
    bool lost_reported = false;
  };
  std::map<std::string, watch_entry> watches;
  std::set<nvmlDevice_t> registered;
  nvmlEventSet_t events = nullptr;
  std::condition_variable wake;
  bool stop = false;

  /// Held while a callback runs, so that `unwatch` can wait for it.
  std::mutex delivery;
  std::atomic<std::thread::id> thread_id{};

  ~nvml_session() {
    if (events != nullptr)
      api.event_set_free(events);
    api.shutdown();
    dlclose(lib);
  }

  std::string error(const char* call, const std::string& pci,
                    nvmlReturn_t rc) const {
    const char* text = api.error_string(rc);
    return std::string{"NVML "} + call + "(" + pci +
           "): " + (text ? text : "unknown error") + " (nvmlReturn_t " +
           std::to_string(rc) + ")";
  }

  void deliver(const std::string& key, gpu_event ev) {
    std::lock_guard<std::mutex> delivering{delivery};
    // Declared after the lock, so the copy dies before `unwatch` can return.
    std::function<void(gpu_event)> fn;
    {
      std::lock_guard<std::mutex> guard{mtx};
      auto i = watches.find(key);
      if (i == watches.end())
        return; // unwatched meanwhile
      fn = i->second.on_event;
    }
    fn(std::move(ev));
  }

  /// After a failed wait: reports `lost` once for every watched GPU that no
  /// longer answers, since NVML does not say which device failed the wait.
  void probe_lost() {
    std::vector<std::pair<std::string, nvmlDevice_t>> targets;
    {
      std::lock_guard<std::mutex> guard{mtx};
      for (auto& [key, w] : watches)
        if (!w.lost_reported)
          targets.emplace_back(key, w.device);
    }
    for (auto& [key, device] : targets) {
      unsigned int temp = 0;
      auto rc = api.temperature(device, NVML_TEMPERATURE_GPU, &temp);
      if (rc != NVML_ERROR_GPU_IS_LOST)
        continue;
      {
        std::lock_guard<std::mutex> guard{mtx};
        auto i = watches.find(key);
        if (i == watches.end() || i->second.lost_reported)
          continue;
        i->second.lost_reported = true;
      }
      gpu_event ev;
      ev.what = gpu_event::kind::lost;
      ev.detail = error("nvmlDeviceGetTemperature", key, rc);
      deliver(key, std::move(ev));
    }
  }

  void run() {
    thread_id = std::this_thread::get_id();
    for (;;) {
      nvmlEventSet_t set;
      {
        std::lock_guard<std::mutex> guard{mtx};
        if (stop)
          return;
        set = events;
      }
      nvmlEventData_t data{};
      auto rc = api.event_set_wait(set, &data, event_wait_ms);
      if (rc == NVML_ERROR_TIMEOUT)
        continue;
      if (rc != NVML_SUCCESS) {
        probe_lost();
        // Back off so that a persistent error does not spin.
        std::unique_lock<std::mutex> guard{mtx};
        wake.wait_for(guard, std::chrono::milliseconds{event_wait_ms},
                      [this] { return stop; });
        continue;
      }
      bool fell_off = (data.eventType & nvmlEventTypeXidCriticalError) &&
                      data.eventData == xid_fallen_off_bus;
      std::string key;
      {
        std::lock_guard<std::mutex> guard{mtx};
        for (auto& [k, w] : watches)
          if (w.device == data.device) {
            key = k;
            // Reported here; a later failed wait need not report it again.
            w.lost_reported = w.lost_reported || fell_off;
          }
      }
      if (key.empty())
        continue; // registered once, no longer watched
      gpu_event ev;
      if (data.eventType & nvmlEventTypeXidCriticalError) {
        ev.xid = static_cast<uint32_t>(data.eventData);
        ev.what = fell_off ? gpu_event::kind::lost : gpu_event::kind::xid;
        ev.detail = "Xid " + std::to_string(data.eventData);
        if (fell_off)
          ev.detail += ": the GPU has fallen off the bus";
      } else if (data.eventType & nvmlEventTypeDoubleBitEccError) {
        ev.what = gpu_event::kind::ecc_uncorrectable;
        ev.detail = "double-bit ECC error";
      } else if (data.eventType & nvmlEventTypeSingleBitEccError) {
        ev.what = gpu_event::kind::ecc_corrected;
        ev.detail = "single-bit ECC error";
      } else {
        continue;
      }
      // NVML says which GPU instance of a GPU in MIG mode the event is of
      // (0xFFFFFFFF: the whole GPU, or none can be said). A device-level
      // error (an uncorrectable ECC error, an Xid the default policy
      // resets on: 48, 79, 95, ...) is the whole card's whichever instance
      // it names: a card that needs a reset takes every instance with it.
      bool card = ev.what == gpu_event::kind::lost ||
                  ev.what == gpu_event::kind::ecc_uncorrectable ||
                  (ev.xid != 0 && is_device_level_xid(ev.xid));
      ev.gpu_instance = card ? gpu_event::whole_gpu : data.gpuInstanceId;
      deliver(key, std::move(ev));
    }
  }
};

/// NVML loaded and initialized. Thread-safe: NVML itself is, and the watch
/// table is guarded by the session's mutex. Events are delivered from one
/// thread per monitor, started by the first `watch`.
class nvml_monitor final : public gpu_monitor {
public:
  explicit nvml_monitor(std::shared_ptr<nvml_session> s) : s_(std::move(s)) {}

  ~nvml_monitor() override {
    std::thread t;
    {
      std::lock_guard<std::mutex> guard{s_->mtx};
      s_->stop = true;
      t = std::move(thread_);
    }
    s_->wake.notify_all();
    if (!t.joinable())
      return;
    // Released from inside a callback: the thread finishes on its own and
    // keeps the session (and the library) alive until it does.
    if (t.get_id() == std::this_thread::get_id())
      t.detach();
    else
      t.join();
  }

  const char* library() const override { return "NVML"; }

  bool available() const override { return true; }

  std::string unavailable_reason() const override { return {}; }

  gpu_sample sample(const std::string& pci_bus_id) override {
    gpu_sample out;
    auto& api = s_->api;
    auto fail = [&](const char* call, nvmlReturn_t rc) {
      out.available = false;
      out.unavailable_reason = s_->error(call, pci_bus_id, rc);
      return out;
    };
    nvmlDevice_t dev = nullptr;
    if (auto rc = api.handle_by_pci(pci_bus_id.c_str(), &dev);
        rc != NVML_SUCCESS)
      return fail("nvmlDeviceGetHandleByPciBusId_v2", rc);
    // A GPU in MIG mode reports no utilization.
    nvmlUtilization_t util{};
    if (auto rc = api.utilization(dev, &util); rc == NVML_SUCCESS) {
      out.gpu_util_percent = util.gpu;
      out.memory_util_percent = util.memory;
    } else if (rc == NVML_ERROR_NOT_SUPPORTED) {
      out.utilization_known = false;
    } else {
      return fail("nvmlDeviceGetUtilizationRates", rc);
    }
    nvmlMemory_t mem{};
    if (auto rc = api.memory(dev, &mem); rc != NVML_SUCCESS)
      return fail("nvmlDeviceGetMemoryInfo", rc);
    out.memory_used_bytes = mem.used;
    out.memory_total_bytes = mem.total;
    // Temperature and ECC are missing on some boards (no sensor, ECC off):
    // that leaves them unknown rather than the whole sample unavailable.
    unsigned int temp = 0;
    if (auto rc = api.temperature(dev, NVML_TEMPERATURE_GPU, &temp);
        rc == NVML_SUCCESS)
      out.temperature_c = static_cast<int32_t>(temp);
    else if (rc != NVML_ERROR_NOT_SUPPORTED)
      return fail("nvmlDeviceGetTemperature", rc);
    unsigned long long corrected = 0, uncorrected = 0;
    auto rc = api.ecc_total(dev, NVML_MEMORY_ERROR_TYPE_CORRECTED,
                            NVML_VOLATILE_ECC, &corrected);
    if (rc == NVML_SUCCESS)
      rc = api.ecc_total(dev, NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                         NVML_VOLATILE_ECC, &uncorrected);
    if (rc == NVML_SUCCESS) {
      out.ecc_corrected = corrected;
      out.ecc_uncorrected = uncorrected;
    } else if (rc != NVML_ERROR_NOT_SUPPORTED) {
      return fail("nvmlDeviceGetTotalEccErrors", rc);
    }
    // Power in milliwatts; boards without the sensor leave it unknown.
    unsigned int mw = 0;
    if (api.power_usage != nullptr && api.power_usage(dev, &mw) == NVML_SUCCESS)
      out.power_w = mw / 1000.0;
    if (api.power_limit != nullptr && api.power_limit(dev, &mw) == NVML_SUCCESS)
      out.power_limit_w = mw / 1000.0;
    out.source = "NVML";
    out.available = true;
    return out;
  }

  bool watch(const std::string& pci_bus_id,
             std::function<void(gpu_event)> on_event) override {
    if (!on_event)
      return false;
    auto& api = s_->api;
    nvmlDevice_t dev = nullptr;
    if (api.handle_by_pci(pci_bus_id.c_str(), &dev) != NVML_SUCCESS)
      return false;
    std::lock_guard<std::mutex> guard{s_->mtx};
    if (s_->stop)
      return false;
    if (s_->events == nullptr &&
        api.event_set_create(&s_->events) != NVML_SUCCESS) {
      s_->events = nullptr;
      return false;
    }
    // NVML cannot take a device out of an event set: a device stays
    // registered after `unwatch` and its events are dropped.
    if (!s_->registered.contains(dev)) {
      unsigned long long mask = wanted_events;
      unsigned long long supported = 0;
      if (api.supported_events != nullptr &&
          api.supported_events(dev, &supported) == NVML_SUCCESS)
        mask &= supported;
      if (mask == 0 ||
          api.register_events(dev, mask, s_->events) != NVML_SUCCESS)
        return false;
      s_->registered.insert(dev);
    }
    s_->watches[canonical_bus_id(pci_bus_id)] = {dev, std::move(on_event)};
    if (!thread_.joinable())
      thread_ = std::thread{[s = s_] { s->run(); }};
    return true;
  }

  void unwatch(const std::string& pci_bus_id) override {
    {
      std::lock_guard<std::mutex> guard{s_->mtx};
      s_->watches.erase(canonical_bus_id(pci_bus_id));
    }
    // Wait for a callback in progress, unless this is that callback.
    if (s_->thread_id.load() != std::this_thread::get_id()) {
      std::lock_guard<std::mutex> wait_for_delivery{s_->delivery};
    }
  }

  link_kind link_between(const std::string& a, const std::string& b) override {
    auto& api = s_->api;
    nvmlDevice_t x = nullptr, y = nullptr;
    if (api.p2p_status == nullptr ||
        api.handle_by_pci(a.c_str(), &x) != NVML_SUCCESS ||
        api.handle_by_pci(b.c_str(), &y) != NVML_SUCCESS || x == y)
      return link_kind::none;
    // NVLink whether direct or through NVSwitch; else PCIe peer reads.
    auto ok = [&](int caps) {
      int status = -1;
      return api.p2p_status(x, y, caps, &status) == NVML_SUCCESS &&
             status == NVML_P2P_STATUS_OK;
    };
    if (ok(NVML_P2P_CAPS_INDEX_NVLINK))
      return link_kind::fabric;
    if (ok(NVML_P2P_CAPS_INDEX_READ))
      return link_kind::pcie;
    return link_kind::none;
  }

  std::vector<mig_gpu> mig_gpus() override {
    std::vector<mig_gpu> out;
    auto& api = s_->api;
    if (!api.has_mig)
      return out;
    auto& m = api.mig;
    unsigned int count = 0;
    if (m.count(&count) != NVML_SUCCESS)
      return out;
    for (unsigned int i = 0; i < count && i < 64; ++i) {
      nvmlDevice_t dev = nullptr;
      unsigned int current = 0, pending = 0;
      // A GPU whose MIG mode cannot be read is taken as not in it: CUDA
      // shows it as a whole.
      if (m.handle_by_index(i, &dev) != NVML_SUCCESS ||
          m.mig_mode(dev, &current, &pending) != NVML_SUCCESS ||
          current != NVML_DEVICE_MIG_ENABLE)
        continue;
      out.push_back(read_mig_gpu(i, dev));
    }
    return out;
  }

  gpu_sample sample_device(const std::string& pci_bus_id,
                           const std::string& uuid) override {
    if (!uuid.starts_with("MIG-"))
      return sample(pci_bus_id);
    // Temperature, power and ECC are the GPU's; memory is the instance's.
    auto out = sample(pci_bus_id);
    if (!out.available)
      return out;
    auto& api = s_->api;
    if (!api.has_mig) {
      out.available = false;
      out.unavailable_reason =
          "NVML lacks the MIG calls: " + uuid + " cannot be read";
      return out;
    }
    nvmlDevice_t mig = nullptr;
    nvmlMemory_t mem{};
    auto rc = api.mig.handle_by_uuid(uuid.c_str(), &mig);
    if (rc == NVML_SUCCESS)
      rc = api.memory(mig, &mem);
    if (rc != NVML_SUCCESS) {
      out.available = false;
      out.unavailable_reason = s_->error("nvmlDeviceGetMemoryInfo", uuid, rc);
      return out;
    }
    out.memory_used_bytes = mem.used;
    out.memory_total_bytes = mem.total;
    return out;
  }

private:
  /// GPU `index` (handle `dev`), in MIG mode, with its instances.
  mig_gpu read_mig_gpu(unsigned int index, nvmlDevice_t dev) {
    auto& api = s_->api;
    auto& m = api.mig;
    mig_gpu g;
    g.index = index;
    auto gpu = "GPU " + std::to_string(index);
    nvmlPciInfo_t pci{};
    unsigned int slots = 0;
    if (auto rc = m.pci_info(dev, &pci); rc != NVML_SUCCESS) {
      g.problems.push_back(s_->error("nvmlDeviceGetPciInfo_v3", gpu, rc));
      return g;
    }
    pci.busId[sizeof(pci.busId) - 1] = '\0';
    g.pci_bus_id = canonical_pci_bus_id(pci.busId);
    char text[name_buffer] = {};
    if (m.name(dev, text, name_buffer) == NVML_SUCCESS)
      g.model = std::string{text, strnlen(text, name_buffer)};
    char uuid[uuid_buffer] = {};
    if (m.uuid(dev, uuid, uuid_buffer) == NVML_SUCCESS)
      g.uuid = std::string{uuid, strnlen(uuid, uuid_buffer)};
    int major = 0, minor = 0;
    if (api.compute_capability != nullptr &&
        api.compute_capability(dev, &major, &minor) == NVML_SUCCESS &&
        major > 0)
      g.arch = "sm_" + std::to_string(major) + std::to_string(minor);
    if (auto rc = m.max_mig_devices(dev, &slots); rc != NVML_SUCCESS) {
      g.problems.push_back(
          s_->error("nvmlDeviceGetMaxMigDeviceCount", g.pci_bus_id, rc));
      return g;
    }
    for (unsigned int j = 0; j < slots && j < 64; ++j) {
      nvmlDevice_t mig = nullptr;
      auto slot = "MIG device " + std::to_string(j) + " of " + g.pci_bus_id;
      // Slots without an instance answer NVML_ERROR_NOT_FOUND.
      auto rc = m.mig_handle(dev, j, &mig);
      if (rc == NVML_ERROR_NOT_FOUND)
        continue;
      mig_instance x;
      x.index = j;
      nvmlDeviceAttributes_t attrs{};
      // Each call in turn; the first that fails is named.
      const char* call = "nvmlDeviceGetMigDeviceHandleByIndex";
      if (rc == NVML_SUCCESS) {
        call = "nvmlDeviceGetUUID";
        rc = m.uuid(mig, uuid, uuid_buffer);
      }
      if (rc == NVML_SUCCESS) {
        call = "nvmlDeviceGetGpuInstanceId";
        rc = m.gpu_instance_id(mig, &x.gpu_instance_id);
      }
      if (rc == NVML_SUCCESS) {
        call = "nvmlDeviceGetComputeInstanceId";
        rc = m.compute_instance_id(mig, &x.compute_instance_id);
      }
      if (rc == NVML_SUCCESS) {
        call = "nvmlDeviceGetAttributes_v2";
        rc = m.attributes(mig, &attrs);
      }
      if (rc != NVML_SUCCESS) {
        g.problems.push_back(s_->error(call, slot, rc));
        continue;
      }
      x.uuid = std::string{uuid, strnlen(uuid, uuid_buffer)};
      x.multiprocessors = attrs.multiprocessorCount;
      x.gpu_slices = attrs.gpuInstanceSliceCount;
      x.compute_slices = attrs.computeInstanceSliceCount;
      x.memory_bytes = attrs.memorySizeMB << 20;
      nvmlMemory_t mem{};
      if (api.memory(mig, &mem) == NVML_SUCCESS && mem.total > 0)
        x.memory_bytes = mem.total;
      if (m.name(mig, text, name_buffer) == NVML_SUCCESS)
        x.name = std::string{text, strnlen(text, name_buffer)};
      if (x.uuid.empty() || x.memory_bytes == 0 || x.multiprocessors == 0) {
        g.problems.push_back(slot + ": NVML gave it no UUID, memory or SMs");
        continue;
      }
      g.instances.push_back(std::move(x));
    }
    return g;
  }

  std::shared_ptr<nvml_session> s_;
  std::thread thread_; // guarded by s_->mtx
};

} // namespace

std::shared_ptr<gpu_monitor> open_nvml(const std::string& library) {
  void* lib = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = dlerror();
    return std::make_shared<unavailable_monitor>(
        "NVML",
        "NVML: cannot load " + library + ": " + (why ? why : "dlopen failed"));
  }
  nvml_api api{};
  std::string missing;
  resolve(lib, "nvmlInit_v2", api.init, missing);
  resolve(lib, "nvmlShutdown", api.shutdown, missing);
  resolve(lib, "nvmlErrorString", api.error_string, missing);
  resolve(lib, "nvmlDeviceGetHandleByPciBusId_v2", api.handle_by_pci, missing);
  resolve(lib, "nvmlDeviceGetUtilizationRates", api.utilization, missing);
  resolve(lib, "nvmlDeviceGetMemoryInfo", api.memory, missing);
  resolve(lib, "nvmlDeviceGetTemperature", api.temperature, missing);
  resolve(lib, "nvmlDeviceGetTotalEccErrors", api.ecc_total, missing);
  resolve(lib, "nvmlEventSetCreate", api.event_set_create, missing);
  resolve(lib, "nvmlDeviceRegisterEvents", api.register_events, missing);
  resolve(lib, "nvmlEventSetWait_v2", api.event_set_wait, missing);
  resolve(lib, "nvmlEventSetFree", api.event_set_free, missing);
  if (!missing.empty()) {
    dlclose(lib);
    return std::make_shared<unavailable_monitor>(
        "NVML", "NVML: " + library + " lacks " + missing);
  }
  std::string optional;
  resolve(lib, "nvmlDeviceGetSupportedEventTypes", api.supported_events,
          optional);
  resolve(lib, "nvmlDeviceGetPowerUsage", api.power_usage, optional);
  resolve(lib, "nvmlDeviceGetEnforcedPowerLimit", api.power_limit, optional);
  resolve(lib, "nvmlDeviceGetP2PStatus", api.p2p_status, optional);
  std::string no_mig;
  auto& m = api.mig;
  resolve(lib, "nvmlDeviceGetCount_v2", m.count, no_mig);
  resolve(lib, "nvmlDeviceGetHandleByIndex_v2", m.handle_by_index, no_mig);
  resolve(lib, "nvmlDeviceGetPciInfo_v3", m.pci_info, no_mig);
  resolve(lib, "nvmlDeviceGetName", m.name, no_mig);
  resolve(lib, "nvmlDeviceGetMigMode", m.mig_mode, no_mig);
  resolve(lib, "nvmlDeviceGetMaxMigDeviceCount", m.max_mig_devices, no_mig);
  resolve(lib, "nvmlDeviceGetMigDeviceHandleByIndex", m.mig_handle, no_mig);
  resolve(lib, "nvmlDeviceGetUUID", m.uuid, no_mig);
  resolve(lib, "nvmlDeviceGetAttributes_v2", m.attributes, no_mig);
  resolve(lib, "nvmlDeviceGetGpuInstanceId", m.gpu_instance_id, no_mig);
  resolve(lib, "nvmlDeviceGetComputeInstanceId", m.compute_instance_id, no_mig);
  resolve(lib, "nvmlDeviceGetHandleByUUID", m.handle_by_uuid, no_mig);
  resolve(lib, "nvmlDeviceGetCudaComputeCapability", api.compute_capability,
          optional);
  api.has_mig = no_mig.empty();
  if (auto rc = api.init(); rc != NVML_SUCCESS) {
    const char* text = api.error_string(rc);
    std::string reason = std::string{"NVML: nvmlInit_v2 failed: "} +
                         (text ? text : "unknown error") + " (nvmlReturn_t " +
                         std::to_string(rc) + ")";
    dlclose(lib);
    return std::make_shared<unavailable_monitor>("NVML", std::move(reason));
  }
  auto s = std::make_shared<nvml_session>();
  s->lib = lib;
  s->api = api;
  return std::make_shared<nvml_monitor>(std::move(s));
}

} // namespace cohort::devices::health
