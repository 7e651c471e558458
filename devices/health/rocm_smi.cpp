// GPU health through ROCm SMI (librocm_smi64, linked directly; built only
// with the HIP backend).
//
// Events: `watch` uses ROCm SMI event notification (the KFD SMI events) and
// reports a GPU reset (RSMI_EVT_NOTIF_GPU_PRE_RESET) as `lost`: work in
// flight on the GPU is gone. The same thread polls the ECC counters of the
// watched GPUs and reports increases as ECC events. ROCm has no Xid codes,
// so `kind::xid` is never reported. `watch` returns false where event
// notification cannot be set up (no KFD access, older kernels).
#include <rocm_smi/rocm_smi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include <unistd.h>

#include "devices/health/health.hpp"
#include "devices/health/unavailable.hpp"

namespace cohort::devices::health {

namespace {

/// How long the event thread waits per call, which bounds how long
/// destruction waits for it.
constexpr int event_wait_ms = 250;

std::string status_text(rsmi_status_t rc) {
  const char* text = nullptr;
  if (rsmi_status_string(rc, &text) != RSMI_STATUS_SUCCESS || text == nullptr)
    return "rsmi_status_t " + std::to_string(static_cast<int>(rc));
  return text;
}

std::string failure(const char* call, const std::string& pci,
                    rsmi_status_t rc) {
  return std::string{"ROCm SMI "} + call + "(" + pci + "): " + status_text(rc);
}

/// The BDFID rsmi_dev_pci_id_get reports for "dddd:bb:dd.f":
/// domain << 32 | bus << 8 | device << 3 | function.
std::optional<uint64_t> bdfid_of(const std::string& pci_bus_id) {
  unsigned domain = 0, bus = 0, dev = 0, fn = 0;
  char tail = 0;
  if (std::sscanf(pci_bus_id.c_str(), "%x:%x:%x.%x%c", &domain, &bus, &dev, &fn,
                  &tail) != 4)
    return std::nullopt;
  return (uint64_t{domain} << 32) | ((bus & 0xffu) << 8) |
         ((dev & 0x1fu) << 3) | (fn & 0x7u);
}

/// Sums the ECC counts over the GPU blocks that have ECC enabled; false
/// when the GPU reports no ECC.
bool ecc_counts(uint32_t dv, uint64_t& corrected, uint64_t& uncorrected) {
  uint64_t enabled = 0;
  if (rsmi_dev_ecc_enabled_get(dv, &enabled) != RSMI_STATUS_SUCCESS)
    return false;
  corrected = uncorrected = 0;
  bool any = false;
  for (uint64_t block = RSMI_GPU_BLOCK_FIRST; block <= RSMI_GPU_BLOCK_LAST;
       block <<= 1) {
    if ((enabled & block) == 0)
      continue;
    rsmi_error_count_t ec{};
    if (rsmi_dev_ecc_count_get(dv, static_cast<rsmi_gpu_block_t>(block), &ec) !=
        RSMI_STATUS_SUCCESS)
      continue;
    corrected += ec.correctable_err;
    uncorrected += ec.uncorrectable_err;
    any = true;
  }
  return any;
}

/// Shared by the monitor and its event thread (see nvml.cpp: a monitor
/// released from inside a callback must not end the session under it).
struct rsmi_session {
  std::mutex mtx; // guards the members below up to `delivery`
  struct watch_entry {
    std::string pci;
    std::function<void(gpu_event)> on_event;
    uint64_t ecc_corrected = 0;
    uint64_t ecc_uncorrected = 0;
  };
  /// By device index.
  std::map<uint32_t, watch_entry> watches;
  /// Device indices with event notification initialized.
  std::vector<uint32_t> notifying;
  std::condition_variable wake;
  bool stop = false;

  std::mutex delivery; // held while a callback runs
  std::atomic<std::thread::id> thread_id{};

  ~rsmi_session() {
    for (auto dv : notifying)
      rsmi_event_notification_stop(dv);
    rsmi_shut_down();
  }

  void deliver(uint32_t dv, gpu_event ev) {
    std::lock_guard<std::mutex> delivering{delivery};
    std::function<void(gpu_event)> fn;
    {
      std::lock_guard<std::mutex> guard{mtx};
      auto i = watches.find(dv);
      if (i == watches.end())
        return;
      fn = i->second.on_event;
    }
    fn(std::move(ev));
  }

  void poll_ecc() {
    std::vector<uint32_t> devices;
    {
      std::lock_guard<std::mutex> guard{mtx};
      for (auto& [dv, w] : watches)
        devices.push_back(dv);
    }
    for (auto dv : devices) {
      uint64_t corrected = 0, uncorrected = 0;
      if (!ecc_counts(dv, corrected, uncorrected))
        continue;
      std::vector<gpu_event> events;
      {
        std::lock_guard<std::mutex> guard{mtx};
        auto i = watches.find(dv);
        if (i == watches.end())
          continue;
        auto& w = i->second;
        if (uncorrected > w.ecc_uncorrected) {
          gpu_event ev;
          ev.what = gpu_event::kind::ecc_uncorrectable;
          ev.detail = std::to_string(uncorrected - w.ecc_uncorrected) +
                      " new uncorrectable ECC error(s)";
          events.push_back(std::move(ev));
        }
        if (corrected > w.ecc_corrected) {
          gpu_event ev;
          ev.what = gpu_event::kind::ecc_corrected;
          ev.detail = std::to_string(corrected - w.ecc_corrected) +
                      " new correctable ECC error(s)";
          events.push_back(std::move(ev));
        }
        w.ecc_corrected = corrected;
        w.ecc_uncorrected = uncorrected;
      }
      for (auto& ev : events)
        deliver(dv, std::move(ev));
    }
  }

  void run() {
    thread_id = std::this_thread::get_id();
    for (;;) {
      {
        std::lock_guard<std::mutex> guard{mtx};
        if (stop)
          return;
      }
      rsmi_evt_notification_data_t data[8];
      uint32_t n = 8;
      auto rc = rsmi_event_notification_get(event_wait_ms, &n, data);
      if (rc == RSMI_STATUS_SUCCESS) {
        for (uint32_t i = 0; i < n; ++i) {
          if (data[i].event != RSMI_EVT_NOTIF_GPU_PRE_RESET)
            continue;
          gpu_event ev;
          ev.what = gpu_event::kind::lost;
          ev.detail = std::string{"GPU reset: "} + data[i].message;
          deliver(data[i].dv_ind, std::move(ev));
        }
      } else if (rc != RSMI_STATUS_NO_DATA) {
        // Back off so that a persistent error does not spin.
        std::unique_lock<std::mutex> guard{mtx};
        wake.wait_for(guard, std::chrono::milliseconds{event_wait_ms},
                      [this] { return stop; });
      }
      poll_ecc();
    }
  }
};

/// ROCm SMI initialized. Thread-safe: ROCm SMI serializes its own calls and
/// the watch table is guarded by the session's mutex.
class rocm_smi_monitor final : public gpu_monitor {
public:
  rocm_smi_monitor() : s_(std::make_shared<rsmi_session>()) {}

  ~rocm_smi_monitor() override {
    std::thread t;
    {
      std::lock_guard<std::mutex> guard{s_->mtx};
      s_->stop = true;
      t = std::move(thread_);
    }
    s_->wake.notify_all();
    if (!t.joinable())
      return;
    if (t.get_id() == std::this_thread::get_id())
      t.detach();
    else
      t.join();
  }

  const char* library() const override { return "ROCm SMI"; }

  bool available() const override { return true; }

  std::string unavailable_reason() const override { return {}; }

  gpu_sample sample(const std::string& pci_bus_id) override {
    gpu_sample out;
    auto dv = device_index(pci_bus_id);
    if (!dv) {
      out.unavailable_reason = "ROCm SMI: no AMD GPU at " + pci_bus_id;
      return out;
    }
    uint32_t busy = 0;
    if (auto rc = rsmi_dev_busy_percent_get(*dv, &busy);
        rc != RSMI_STATUS_SUCCESS) {
      out.unavailable_reason =
          failure("rsmi_dev_busy_percent_get", pci_bus_id, rc);
      return out;
    }
    out.gpu_util_percent = busy;
    uint32_t mem_busy = 0;
    if (rsmi_dev_memory_busy_percent_get(*dv, &mem_busy) == RSMI_STATUS_SUCCESS)
      out.memory_util_percent = mem_busy;
    uint64_t total = 0, used = 0;
    auto rc = rsmi_dev_memory_total_get(*dv, RSMI_MEM_TYPE_VRAM, &total);
    if (rc == RSMI_STATUS_SUCCESS)
      rc = rsmi_dev_memory_usage_get(*dv, RSMI_MEM_TYPE_VRAM, &used);
    if (rc != RSMI_STATUS_SUCCESS) {
      out.unavailable_reason =
          failure("rsmi_dev_memory_usage_get", pci_bus_id, rc);
      return out;
    }
    out.memory_total_bytes = total;
    out.memory_used_bytes = used;
    // MI200 and later have no edge sensor; the junction one stands in.
    for (auto sensor : {RSMI_TEMP_TYPE_EDGE, RSMI_TEMP_TYPE_JUNCTION}) {
      int64_t millidegrees = 0;
      if (rsmi_dev_temp_metric_get(*dv, sensor, RSMI_TEMP_CURRENT,
                                   &millidegrees) == RSMI_STATUS_SUCCESS) {
        out.temperature_c = static_cast<int32_t>(millidegrees / 1000);
        break;
      }
    }
    uint64_t corrected = 0, uncorrected = 0;
    if (ecc_counts(*dv, corrected, uncorrected)) {
      out.ecc_corrected = corrected;
      out.ecc_uncorrected = uncorrected;
    }
    // Power in microwatts (sensor 0: the board's); unknown when missing.
    uint64_t uw = 0;
    if (rsmi_dev_power_ave_get(*dv, 0, &uw) == RSMI_STATUS_SUCCESS)
      out.power_w = double(uw) / 1e6;
    if (rsmi_dev_power_cap_get(*dv, 0, &uw) == RSMI_STATUS_SUCCESS)
      out.power_limit_w = double(uw) / 1e6;
    out.source = "ROCm SMI";
    out.available = true;
    return out;
  }

  bool watch(const std::string& pci_bus_id,
             std::function<void(gpu_event)> on_event) override {
    if (!on_event)
      return false;
    auto dv = device_index(pci_bus_id);
    if (!dv)
      return false;
    std::lock_guard<std::mutex> guard{s_->mtx};
    if (s_->stop)
      return false;
    if (std::find(s_->notifying.begin(), s_->notifying.end(), *dv) ==
        s_->notifying.end()) {
      if (rsmi_event_notification_init(*dv) != RSMI_STATUS_SUCCESS)
        return false;
      if (rsmi_event_notification_mask_set(
              *dv, RSMI_EVENT_MASK_FROM_INDEX(RSMI_EVT_NOTIF_GPU_PRE_RESET)) !=
          RSMI_STATUS_SUCCESS) {
        rsmi_event_notification_stop(*dv);
        return false;
      }
      s_->notifying.push_back(*dv);
    }
    rsmi_session::watch_entry w;
    w.pci = pci_bus_id;
    w.on_event = std::move(on_event);
    // Counts before the watch are history, not events.
    ecc_counts(*dv, w.ecc_corrected, w.ecc_uncorrected);
    s_->watches[*dv] = std::move(w);
    if (!thread_.joinable())
      thread_ = std::thread{[s = s_] { s->run(); }};
    return true;
  }

  void unwatch(const std::string& pci_bus_id) override {
    auto dv = device_index(pci_bus_id);
    if (!dv)
      return;
    {
      std::lock_guard<std::mutex> guard{s_->mtx};
      s_->watches.erase(*dv);
    }
    if (s_->thread_id.load() != std::this_thread::get_id()) {
      std::lock_guard<std::mutex> wait_for_delivery{s_->delivery};
    }
  }

  link_kind link_between(const std::string& a, const std::string& b) override {
    auto x = device_index(a);
    auto y = device_index(b);
    if (!x || !y || *x == *y)
      return link_kind::none;
    uint64_t hops = 0;
    RSMI_IO_LINK_TYPE type = RSMI_IOLINK_TYPE_UNDEFINED;
    if (rsmi_topo_get_link_type(*x, *y, &hops, &type) == RSMI_STATUS_SUCCESS &&
        type == RSMI_IOLINK_TYPE_XGMI)
      return link_kind::fabric;
    bool peer = false;
    if (rsmi_is_P2P_accessible(*x, *y, &peer) == RSMI_STATUS_SUCCESS && peer)
      return link_kind::pcie;
    return link_kind::none;
  }

private:
  static std::optional<uint32_t> device_index(const std::string& pci_bus_id) {
    auto wanted = bdfid_of(pci_bus_id);
    if (!wanted)
      return std::nullopt;
    uint32_t count = 0;
    if (rsmi_num_monitor_devices(&count) != RSMI_STATUS_SUCCESS)
      return std::nullopt;
    for (uint32_t dv = 0; dv < count; ++dv) {
      uint64_t bdfid = 0;
      if (rsmi_dev_pci_id_get(dv, &bdfid) == RSMI_STATUS_SUCCESS &&
          bdfid == *wanted)
        return dv;
    }
    return std::nullopt;
  }

  std::shared_ptr<rsmi_session> s_;
  std::thread thread_; // guarded by s_->mtx
};

} // namespace

std::shared_ptr<gpu_monitor> open_rocm_smi() {
  // Without the amdgpu driver there is no AMD GPU to watch, and rsmi_init
  // says so on stderr ("Failed to open drm root directory", "Exception
  // caught: rsmi_init.") in every process that loads the HIP plugin.
  if (::access("/sys/module/amdgpu", F_OK) != 0 &&
      ::access("/dev/kfd", F_OK) != 0)
    return std::make_shared<unavailable_monitor>(
        "ROCm SMI", "ROCm SMI: no amdgpu driver is loaded (neither "
                    "/sys/module/amdgpu nor /dev/kfd exists)");
  if (auto rc = rsmi_init(0); rc != RSMI_STATUS_SUCCESS)
    return std::make_shared<unavailable_monitor>(
        "ROCm SMI", "ROCm SMI: rsmi_init failed: " + status_text(rc));
  return std::make_shared<rocm_smi_monitor>();
}

} // namespace cohort::devices::health
