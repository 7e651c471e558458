#include "devices/health/gpu_watch.hpp"

#include <algorithm>

namespace cohort::devices::health {

gpu_watch::gpu_watch(std::shared_ptr<gpu_monitor> monitor,
                     std::string pci_bus_id)
    : monitor_(std::move(monitor)), bus_(std::move(pci_bus_id)) {
  // nop
}

gpu_watch::~gpu_watch() {
  // Waits for a delivery under way: nothing runs on this object after.
  std::lock_guard<std::mutex> guard{start_mtx_};
  if (watching_)
    monitor_->unwatch(bus_);
}

void gpu_watch::join(const void* key, uint32_t gpu_instance, handler on_event) {
  std::lock_guard<std::mutex> guard{mtx_};
  members_.push_back({key, gpu_instance, std::move(on_event)});
}

void gpu_watch::leave(const void* key) {
  std::lock_guard<std::mutex> guard{mtx_};
  std::erase_if(members_, [key](const member& m) { return m.key == key; });
}

bool gpu_watch::start() {
  std::lock_guard<std::mutex> guard{start_mtx_};
  if (started_)
    return watching_;
  started_ = true;
  // A library may deliver from within watch (the members' lock is free).
  if (monitor_ && !bus_.empty())
    watching_ = monitor_->watch(bus_, [this](gpu_event ev) { deliver(ev); });
  return watching_;
}

void gpu_watch::deliver(const gpu_event& ev) {
  std::lock_guard<std::mutex> guard{mtx_};
  for (auto& m : members_)
    if (concerns(ev, m.gpu_instance))
      m.on_event(ev);
}

uint32_t mig_gpu_instance(gpu_monitor& monitor, const std::string& uuid) {
  if (uuid.empty())
    return gpu_event::whole_gpu;
  for (auto& g : monitor.mig_gpus())
    for (auto& x : g.instances)
      if (x.uuid == uuid)
        return x.gpu_instance_id;
  return gpu_event::whole_gpu;
}

} // namespace cohort::devices::health
