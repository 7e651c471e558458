// A stand-in for libnvidia-ml.so, built as a shared module and loaded with
// open_nvml(path). It exports the NVML entry points devices/health/nvml.cpp
// uses, with NVML's C ABI, plus `fake_nvml_*` functions a test reaches by
// dlopen-ing the same file to add GPUs and raise events.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <list>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

struct nvmlDevice_st;

namespace {

using nvmlReturn_t = int;

struct fake_gpu {
  unsigned gpu_util = 0;
  unsigned mem_util = 0;
  unsigned long long used = 0;
  unsigned long long total = 0;
  unsigned temperature = 0;
  unsigned long long ecc_corrected = 0;
  unsigned long long ecc_uncorrected = 0;
  /// Milliwatts drawn and the enforced limit.
  unsigned power_mw = 0;
  unsigned power_limit_mw = 0;
  /// What the queries of this GPU return besides its handle lookup: by
  /// function name, "" for all.
  std::map<std::string, nvmlReturn_t> results;
  /// Links to other GPUs by their canonical bus id: 2 NVLink, 1 PCIe peer
  /// reads only.
  std::map<std::string, int> links;
  /// MIG: whether the GPU is in MIG mode and its instance slots (nullptr:
  /// empty); an instance's own identity and share.
  bool mig_mode = false;
  std::vector<nvmlDevice_st*> mig_slots;
  std::string uuid;
  unsigned gpu_instance_id = 0;
  unsigned compute_instance_id = 0;
  unsigned multiprocessors = 0;
  unsigned gpu_slices = 0;
  unsigned compute_slices = 0;
};

} // namespace

// Opaque to NVML's users; the fake's handles point at these.
struct nvmlDevice_st {
  fake_gpu gpu;
};

struct nvmlEventData_t {
  nvmlDevice_st* device;
  unsigned long long eventType;
  unsigned long long eventData;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};

struct nvmlEventSet_st {
  std::map<nvmlDevice_st*, unsigned long long> masks;
  std::deque<nvmlEventData_t> pending;
};

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

namespace {

constexpr nvmlReturn_t NVML_SUCCESS = 0;
constexpr nvmlReturn_t NVML_ERROR_UNINITIALIZED = 1;
constexpr nvmlReturn_t NVML_ERROR_INVALID_ARGUMENT = 2;
constexpr nvmlReturn_t NVML_ERROR_NOT_SUPPORTED = 3;
constexpr nvmlReturn_t NVML_ERROR_NOT_FOUND = 6;
constexpr nvmlReturn_t NVML_ERROR_TIMEOUT = 10;

std::mutex mtx;
std::condition_variable arrived;
int init_count = 0;
nvmlReturn_t init_result = NVML_SUCCESS;
nvmlReturn_t wait_result = NVML_SUCCESS;
// std::list: handles stay valid while GPUs are added.
std::list<std::pair<std::string, nvmlDevice_st>> gpus;
std::list<nvmlEventSet_st> sets;
// MIG instances' handles, which also stay valid.
std::list<nvmlDevice_st> migs;

std::string canonical(const char* pci) {
  unsigned domain = 0, bus = 0, dev = 0, fn = 0;
  if (pci == nullptr ||
      std::sscanf(pci, "%x:%x:%x.%x", &domain, &bus, &dev, &fn) != 4)
    return {};
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%08x:%02x:%02x.%x", domain, bus, dev, fn);
  return buf;
}

nvmlDevice_st* find(const char* pci) {
  auto key = canonical(pci);
  if (key.empty())
    return nullptr;
  for (auto& [k, d] : gpus)
    if (k == key)
      return &d;
  return nullptr;
}

// A MIG instance's own UUID; a GPU's, made from its bus id.
std::string uuid_of(nvmlDevice_st* d) {
  if (!d->gpu.uuid.empty())
    return d->gpu.uuid;
  for (auto& [k, g] : gpus)
    if (&g == d)
      return "GPU-fake-" + k;
  return {};
}

nvmlReturn_t query(nvmlDevice_st* d, const char* call) {
  if (init_count == 0)
    return NVML_ERROR_UNINITIALIZED;
  if (d == nullptr)
    return NVML_ERROR_INVALID_ARGUMENT;
  auto& results = d->gpu.results;
  if (auto i = results.find(call); i != results.end())
    return i->second;
  if (auto i = results.find(""); i != results.end())
    return i->second;
  return NVML_SUCCESS;
}

} // namespace

extern "C" {

// -- Test controls -----------------------------------------------------------

/// Forgets all GPUs and pending events; the next nvmlInit_v2 succeeds.
void fake_nvml_reset() {
  std::lock_guard<std::mutex> guard{mtx};
  for (auto& s : sets) {
    s.masks.clear();
    s.pending.clear();
  }
  // Handles the monitor may still hold stay valid: GPUs are only marked gone.
  for (auto& [k, d] : gpus) {
    k.clear();
    d.gpu = fake_gpu{};
  }
  for (auto& m : migs)
    m.gpu = fake_gpu{};
  init_result = NVML_SUCCESS;
  wait_result = NVML_SUCCESS;
}

/// Adds the GPU at `pci` or changes its readings.
void fake_nvml_set(const char* pci, unsigned gpu_util, unsigned mem_util,
                   unsigned long long used, unsigned long long total,
                   unsigned temperature, unsigned long long ecc_corrected,
                   unsigned long long ecc_uncorrected) {
  std::lock_guard<std::mutex> guard{mtx};
  auto* d = find(pci);
  if (d == nullptr)
    d = &gpus.emplace_back(canonical(pci), nvmlDevice_st{}).second;
  d->gpu.gpu_util = gpu_util;
  d->gpu.mem_util = mem_util;
  d->gpu.used = used;
  d->gpu.total = total;
  d->gpu.temperature = temperature;
  d->gpu.ecc_corrected = ecc_corrected;
  d->gpu.ecc_uncorrected = ecc_uncorrected;
}

/// Sets the power readings of the GPU at `pci` (milliwatts).
void fake_nvml_set_power(const char* pci, unsigned mw, unsigned limit_mw) {
  std::lock_guard<std::mutex> guard{mtx};
  if (auto* d = find(pci)) {
    d->gpu.power_mw = mw;
    d->gpu.power_limit_mw = limit_mw;
  }
}

/// Links the GPUs at `a` and `b` both ways: `kind` 2 by NVLink, 1 by PCIe
/// peer-to-peer only, 0 not at all.
void fake_nvml_set_link(const char* a, const char* b, int kind) {
  std::lock_guard<std::mutex> guard{mtx};
  auto* x = find(a);
  auto* y = find(b);
  if (x == nullptr || y == nullptr)
    return;
  x->gpu.links[canonical(b)] = kind;
  y->gpu.links[canonical(a)] = kind;
}

/// Puts the GPU at `pci` in MIG mode (`enabled`) with `slots` instance
/// slots, all empty, or out of it.
void fake_nvml_set_mig_mode(const char* pci, int enabled, unsigned slots) {
  std::lock_guard<std::mutex> guard{mtx};
  if (auto* d = find(pci)) {
    d->gpu.mig_mode = enabled != 0;
    d->gpu.mig_slots.assign(slots, nullptr);
  }
}

/// Makes an instance in slot `slot` of the GPU at `pci` (in MIG mode).
void fake_nvml_add_mig(const char* pci, unsigned slot, const char* uuid,
                       unsigned gpu_instance, unsigned compute_instance,
                       unsigned long long total, unsigned multiprocessors,
                       unsigned gpu_slices, unsigned compute_slices) {
  std::lock_guard<std::mutex> guard{mtx};
  auto* d = find(pci);
  if (d == nullptr || slot >= d->gpu.mig_slots.size())
    return;
  auto& m = migs.emplace_back();
  m.gpu.uuid = uuid;
  m.gpu.gpu_instance_id = gpu_instance;
  m.gpu.compute_instance_id = compute_instance;
  m.gpu.total = total;
  m.gpu.multiprocessors = multiprocessors;
  m.gpu.gpu_slices = gpu_slices;
  m.gpu.compute_slices = compute_slices;
  d->gpu.mig_slots[slot] = &m;
}

/// Makes NVML function `call` of the MIG instance `uuid` return `rc`; 0
/// makes it answer again.
void fake_nvml_set_mig_result(const char* uuid, const char* call, int rc) {
  std::lock_guard<std::mutex> guard{mtx};
  for (auto& m : migs)
    if (m.gpu.uuid == uuid) {
      if (rc == 0)
        m.gpu.results.erase(call);
      else
        m.gpu.results[call] = rc;
    }
}

/// Sets the memory use of the MIG instance `uuid`.
void fake_nvml_set_mig_used(const char* uuid, unsigned long long used) {
  std::lock_guard<std::mutex> guard{mtx};
  for (auto& m : migs)
    if (m.gpu.uuid == uuid)
      m.gpu.used = used;
}

/// Makes NVML function `call` (nullptr: every query) of the GPU at `pci`
/// return `rc`; 0 makes it answer again.
void fake_nvml_set_result(const char* pci, const char* call, int rc) {
  std::lock_guard<std::mutex> guard{mtx};
  if (auto* d = find(pci))
    d->gpu.results[call ? call : ""] = rc;
}

/// Makes the next nvmlInit_v2 calls return `rc`.
void fake_nvml_set_init_result(int rc) {
  std::lock_guard<std::mutex> guard{mtx};
  init_result = rc;
}

/// Makes nvmlEventSetWait_v2 fail with `rc` (0: wait for events again), as
/// NVML does when a GPU is lost.
void fake_nvml_set_wait_result(int rc) {
  std::lock_guard<std::mutex> guard{mtx};
  wait_result = rc;
}

/// Queues an event of `event_type` of GPU instance `gpu_instance`
/// (0xFFFFFFFF: the whole GPU) for the GPU at `pci` on every event set it
/// is registered with for that type. Returns how many sets got it.
int fake_nvml_raise_instance(const char* pci, unsigned long long event_type,
                             unsigned long long data, unsigned gpu_instance) {
  int queued = 0;
  {
    std::lock_guard<std::mutex> guard{mtx};
    auto* d = find(pci);
    if (d == nullptr)
      return 0;
    for (auto& s : sets) {
      auto i = s.masks.find(d);
      if (i != s.masks.end() && (i->second & event_type) != 0) {
        s.pending.push_back({d, event_type, data, gpu_instance, 0xFFFFFFFF});
        ++queued;
      }
    }
  }
  arrived.notify_all();
  return queued;
}

/// An event of the whole GPU.
int fake_nvml_raise(const char* pci, unsigned long long event_type,
                    unsigned long long data) {
  return fake_nvml_raise_instance(pci, event_type, data, 0xFFFFFFFF);
}

/// An Xid critical error with code `xid`.
int fake_nvml_raise_xid(const char* pci, unsigned long long xid) {
  return fake_nvml_raise(pci, 0x8, xid);
}

/// How many nvmlInit_v2 calls are not yet matched by nvmlShutdown.
int fake_nvml_init_count() {
  std::lock_guard<std::mutex> guard{mtx};
  return init_count;
}

// -- NVML --------------------------------------------------------------------

nvmlReturn_t nvmlInit_v2() {
  std::lock_guard<std::mutex> guard{mtx};
  if (init_result != NVML_SUCCESS)
    return init_result;
  ++init_count;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlShutdown() {
  std::lock_guard<std::mutex> guard{mtx};
  if (init_count == 0)
    return NVML_ERROR_UNINITIALIZED;
  --init_count;
  return NVML_SUCCESS;
}

const char* nvmlErrorString(nvmlReturn_t rc) {
  // NVML's own wording.
  switch (rc) {
  case 0:
    return "Success";
  case 1:
    return "Uninitialized";
  case 2:
    return "Invalid Argument";
  case 3:
    return "Not Supported";
  case 6:
    return "Not Found";
  case 9:
    return "Driver Not Loaded";
  case 10:
    return "Timeout";
  case 15:
    return "GPU is lost";
  default:
    return "Unknown Error";
  }
}

nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char* pci,
                                              nvmlDevice_st** device) {
  std::lock_guard<std::mutex> guard{mtx};
  if (init_count == 0)
    return NVML_ERROR_UNINITIALIZED;
  if (device == nullptr || canonical(pci).empty())
    return NVML_ERROR_INVALID_ARGUMENT;
  auto* d = find(pci);
  if (d == nullptr)
    return NVML_ERROR_NOT_FOUND;
  *device = d;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_st* d,
                                           nvmlUtilization_t* out) {
  std::lock_guard<std::mutex> guard{mtx};
  if (auto rc = query(d, "nvmlDeviceGetUtilizationRates"); rc != NVML_SUCCESS)
    return rc;
  // As NVML does: no utilization in MIG mode.
  if (d->gpu.mig_mode)
    return NVML_ERROR_NOT_SUPPORTED;
  *out = {d->gpu.gpu_util, d->gpu.mem_util};
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_st* d, nvmlDevice_st* peer,
                                    int caps, int* status) {
  std::lock_guard<std::mutex> guard{mtx};
  if (auto rc = query(d, "nvmlDeviceGetP2PStatus"); rc != NVML_SUCCESS)
    return rc;
  if (peer == nullptr || status == nullptr || caps < 0 || caps > 4)
    return NVML_ERROR_INVALID_ARGUMENT;
  int kind = 0;
  for (auto& [k, g] : gpus)
    if (&g == peer)
      if (auto i = d->gpu.links.find(k); i != d->gpu.links.end())
        kind = i->second;
  // NVLink answers the NVLink index and peer reads; PCIe only the reads.
  // nvmlGpuP2PStatus_t: 0 OK, 5 NVML_P2P_STATUS_NOT_SUPPORTED.
  bool ok = caps == 2 ? kind == 2 : caps == 0 && kind >= 1;
  *status = ok ? 0 : 5;
  return NVML_SUCCESS;
}

// -- Enumeration and MIG ------------------------------------------------------

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) {
  std::lock_guard<std::mutex> guard{mtx};
  if (init_count == 0)
    return NVML_ERROR_UNINITIALIZED;
  *count = unsigned(std::count_if(gpus.begin(), gpus.end(),
                                  [](auto& g) { return !g.first.empty(); }));
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_st** d) {
  std::lock_guard<std::mutex> guard{mtx};
  if (init_count == 0)
    return NVML_ERROR_UNINITIALIZED;
  for (auto& [k, g] : gpus)
    if (!k.empty() && i-- == 0) {
      *d = &g;
      return NVML_SUCCESS;
    }
  return NVML_ERROR_INVALID_ARGUMENT;
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_st* d, nvmlPciInfo_t* out) {
  std::lock_guard<std::mutex> guard{mtx};
  if (auto rc = query(d, "nvmlDeviceGetPciInfo_v3"); rc != NVML_SUCCESS)
    return rc;
  *out = nvmlPciInfo_t{};
  for (auto& [k, g] : gpus)
    if (&g == d)
      std::snprintf(out->busId, sizeof(out->busId), "%s", k.c_str());
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_st* d, char* name, unsigned len) {
  std::lock_guard<std::mutex> guard{mtx};
  if (auto rc = query(d, "nvmlDeviceGetName"); rc != NVML_SUCCESS)
    return rc;
  auto& g = d->gpu;
  if (g.uuid.rfind("MIG-", 0) != 0) {
    std::snprintf(name, len, "%s", "Fake NVML GPU");
  } else if (g.compute_slices != g.gpu_slices) {
    std::snprintf(name, len, "Fake NVML GPU MIG %uc.%ug.%llugb",
                  g.compute_slices, g.gpu_slices, g.total >> 30);
  } else {
    std::snprintf(name, len, "Fake NVML GPU MIG %ug.%llugb", g.gpu_slices,
                  g.total >> 30);
  }
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_st* d, int* major,
                                                int* minor) {
  std::lock_guard<std::mutex> guard{mtx};
  if (auto rc = query(d, "nvmlDeviceGetCudaComputeCapability");
      rc != NVML_SUCCESS)
    return rc;
  *major = 9;
  *minor = 0;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_st* d, unsigned int* current,
                                  unsigned int* pending) {
  std::lock_guard<std::mutex> guard{mtx};
  if (auto rc = query(d, "nvmlDeviceGetMigMode"); rc != NVML_SUCCESS)
    return rc;
  *current = *pending = d->gpu.mig_mode ? 1 : 0;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_st* d,
                                            unsigned int* count) {
  std::lock_guard<std::mutex> guard{mtx};
  if (auto rc = query(d, "nvmlDeviceGetMaxMigDeviceCount"); rc != NVML_SUCCESS)
    return rc;
  *count = unsigned(d->gpu.mig_slots.size());
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_st* d,
                                                 unsigned int i,
                                                 nvmlDevice_st** mig) {
  std::lock_guard<std::mutex> guard{mtx};
  if (auto rc = query(d, "nvmlDeviceGetMigDeviceHandleByIndex");
      rc != NVML_SUCCESS)
    return rc;
  if (i >= d->gpu.mig_slots.size() || d->gpu.mig_slots[i] == nullptr)
    return NVML_ERROR_NOT_FOUND;
  *mig = d->gpu.mig_slots[i];
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_st* d, char* uuid, unsigned len) {
  std::lock_guard<std::mutex> guard{mtx};
  if (auto rc = query(d, "nvmlDeviceGetUUID"); rc != NVML_SUCCESS)
    return rc;
  std::snprintf(uuid, len, "%s", uuid_of(d).c_str());
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char* uuid, nvmlDevice_st** d) {
  std::lock_guard<std::mutex> guard{mtx};
  if (init_count == 0)
    return NVML_ERROR_UNINITIALIZED;
  if (uuid == nullptr || d == nullptr)
    return NVML_ERROR_INVALID_ARGUMENT;
  for (auto& m : migs)
    if (!m.gpu.uuid.empty() && m.gpu.uuid == uuid) {
      *d = &m;
      return NVML_SUCCESS;
    }
  for (auto& [k, g] : gpus)
    if (!k.empty() && uuid_of(&g) == uuid) {
      *d = &g;
      return NVML_SUCCESS;
    }
  return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_st* d,
                                        nvmlDeviceAttributes_t* out) {
  std::lock_guard<std::mutex> guard{mtx};
  if (auto rc = query(d, "nvmlDeviceGetAttributes_v2"); rc != NVML_SUCCESS)
    return rc;
  *out = nvmlDeviceAttributes_t{};
  out->multiprocessorCount = d->gpu.multiprocessors;
  out->gpuInstanceSliceCount = d->gpu.gpu_slices;
  out->computeInstanceSliceCount = d->gpu.compute_slices;
  out->memorySizeMB = d->gpu.total >> 20;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_st* d, unsigned int* id) {
  std::lock_guard<std::mutex> guard{mtx};
  if (auto rc = query(d, "nvmlDeviceGetGpuInstanceId"); rc != NVML_SUCCESS)
    return rc;
  *id = d->gpu.gpu_instance_id;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_st* d,
                                            unsigned int* id) {
  std::lock_guard<std::mutex> guard{mtx};
  if (auto rc = query(d, "nvmlDeviceGetComputeInstanceId"); rc != NVML_SUCCESS)
    return rc;
  *id = d->gpu.compute_instance_id;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_st* d, nvmlMemory_t* out) {
  std::lock_guard<std::mutex> guard{mtx};
  if (auto rc = query(d, "nvmlDeviceGetMemoryInfo"); rc != NVML_SUCCESS)
    return rc;
  *out = {d->gpu.total, d->gpu.total - d->gpu.used, d->gpu.used};
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_st* d, int sensor,
                                      unsigned int* out) {
  std::lock_guard<std::mutex> guard{mtx};
  if (auto rc = query(d, "nvmlDeviceGetTemperature"); rc != NVML_SUCCESS)
    return rc;
  if (sensor != 0)
    return NVML_ERROR_INVALID_ARGUMENT;
  *out = d->gpu.temperature;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_st* d, unsigned int* out) {
  std::lock_guard<std::mutex> guard{mtx};
  if (auto rc = query(d, "nvmlDeviceGetPowerUsage"); rc != NVML_SUCCESS)
    return rc;
  *out = d->gpu.power_mw;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_st* d,
                                             unsigned int* out) {
  std::lock_guard<std::mutex> guard{mtx};
  if (auto rc = query(d, "nvmlDeviceGetEnforcedPowerLimit"); rc != NVML_SUCCESS)
    return rc;
  *out = d->gpu.power_limit_mw;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_st* d, int error_type,
                                         int counter_type,
                                         unsigned long long* out) {
  std::lock_guard<std::mutex> guard{mtx};
  if (auto rc = query(d, "nvmlDeviceGetTotalEccErrors"); rc != NVML_SUCCESS)
    return rc;
  if (counter_type != 0 || (error_type != 0 && error_type != 1))
    return NVML_ERROR_INVALID_ARGUMENT;
  *out = error_type == 0 ? d->gpu.ecc_corrected : d->gpu.ecc_uncorrected;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_st* d,
                                              unsigned long long* out) {
  std::lock_guard<std::mutex> guard{mtx};
  if (auto rc = query(d, "nvmlDeviceGetSupportedEventTypes");
      rc != NVML_SUCCESS)
    return rc;
  *out = 0x1 | 0x2 | 0x8;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_st** set) {
  std::lock_guard<std::mutex> guard{mtx};
  if (init_count == 0)
    return NVML_ERROR_UNINITIALIZED;
  *set = &sets.emplace_back();
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_st* d,
                                      unsigned long long types,
                                      nvmlEventSet_st* set) {
  std::lock_guard<std::mutex> guard{mtx};
  if (auto rc = query(d, "nvmlDeviceRegisterEvents"); rc != NVML_SUCCESS)
    return rc;
  set->masks[d] |= types;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_st* set, nvmlEventData_t* data,
                                 unsigned int timeout_ms) {
  std::unique_lock<std::mutex> guard{mtx};
  if (init_count == 0)
    return NVML_ERROR_UNINITIALIZED;
  if (wait_result != NVML_SUCCESS) {
    // NVML fails such waits at once; a short pause keeps a caller that
    // retries without backing off from starving the test.
    guard.unlock();
    std::this_thread::sleep_for(std::chrono::milliseconds{1});
    guard.lock();
    return wait_result;
  }
  if (!arrived.wait_for(guard, std::chrono::milliseconds{timeout_ms},
                        [set] { return !set->pending.empty(); }))
    return NVML_ERROR_TIMEOUT;
  *data = set->pending.front();
  set->pending.pop_front();
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_st* set) {
  std::lock_guard<std::mutex> guard{mtx};
  sets.remove_if([set](const nvmlEventSet_st& s) { return &s == set; });
  return NVML_SUCCESS;
}

} // extern "C"
