// The node's devices by index, shared by the runtime (read by HTTP and
// embedding threads), the supervisor and the telemetry sampler. The fleet
// only grows (a GPU a rescan found is appended, docs/gpu.md); an index,
// once given, names the same device for the node's life.
#pragma once

#include <memory>
#include <shared_mutex>
#include <vector>

#include "devices/device.hpp"

namespace cohort::actors {

/// Thread-safe: readers get copies, so that an append does not move what
/// they hold.
class device_roster {
public:
  device_roster() = default;
  explicit device_roster(std::vector<std::shared_ptr<devices::device>> devs);

  device_roster(const device_roster&) = delete;
  device_roster& operator=(const device_roster&) = delete;

  /// Every device, by index.
  std::vector<std::shared_ptr<devices::device>> devices() const;
  /// Their static facts (as each device's info() was when it joined).
  std::vector<device_info> infos() const;
  /// Device `index`, or null past the end.
  std::shared_ptr<devices::device> at(size_t index) const;
  size_t size() const;

  /// Appends `dev` and returns its index.
  size_t add(std::shared_ptr<devices::device> dev);

private:
  mutable std::shared_mutex mtx_;
  std::vector<std::shared_ptr<devices::device>> devs_;
  std::vector<device_info> infos_;
};

} // namespace cohort::actors
