// One watch of a GPU's events shared by the devices on that GPU. A health
// library watches a bus once per process, and the MIG instances of one
// card share its bus: each instance hears the events of its own GPU
// instance and those of the whole GPU, never its siblings'.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "devices/health/health.hpp"

namespace cohort::devices::health {

/// Thread-safe. Members join, then `start` watches; the watch ends with
/// the gpu_watch (the last holder of it).
class gpu_watch {
public:
  using handler = std::function<void(const gpu_event&)>;

  gpu_watch(std::shared_ptr<gpu_monitor> monitor, std::string pci_bus_id);
  ~gpu_watch();

  gpu_watch(const gpu_watch&) = delete;
  gpu_watch& operator=(const gpu_watch&) = delete;

  /// `key` hears, through `on_event` (called from the library's thread,
  /// one event at a time; it must not join or leave), the events that
  /// concern GPU instance `gpu_instance` (gpu_event::whole_gpu: all of
  /// them), until `leave(key)`.
  void join(const void* key, uint32_t gpu_instance, handler on_event);

  /// When it returns, `key`'s handler is not running and is not called
  /// again.
  void leave(const void* key);

  /// Starts watching (once; a library that cannot watch the GPU delivers
  /// nothing): whether events come.
  bool start();

  const std::string& pci_bus_id() const { return bus_; }

private:
  void deliver(const gpu_event& ev);

  struct member {
    const void* key;
    uint32_t gpu_instance;
    handler on_event;
  };
  std::shared_ptr<gpu_monitor> monitor_;
  std::string bus_;
  /// Guards the members; held while a handler runs.
  std::mutex mtx_;
  std::vector<member> members_;
  std::mutex start_mtx_;
  bool started_ = false;
  bool watching_ = false;
};

/// The GPU instance of the MIG instance whose UUID is `uuid` ("MIG-..."),
/// as `monitor` lists it; gpu_event::whole_gpu when it does not.
uint32_t mig_gpu_instance(gpu_monitor& monitor, const std::string& uuid);

} // namespace cohort::devices::health
