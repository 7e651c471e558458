// The fleet as placement sees it, kept up to date one device at a time, so
// that choosing a device for an item does not scan the fleet: which devices
// take work and have room (bitmasks), and per run-time model cell (kernel and
// size class) the device where a typical item of the cell would finish
// first, overall and among devices with room (tournament trees).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "kernels/kernel_args.hpp"

namespace cohort::actors::balancer {

/// The least of up to 64 keys, one per device, updated one device at a time
/// in O(log n): a tournament tree. Not thread-safe.
class device_min_tree {
public:
  static constexpr size_t capacity = 64;
  static constexpr double none = std::numeric_limits<double>::infinity();

  device_min_tree();

  /// Sets device `d`'s key; `none` takes it out.
  void set(size_t d, double key);

  double key(size_t d) const { return key_[capacity + d]; }

  /// The device with the least key (the lowest index among equals), or -1
  /// when every key is `none`.
  int32_t argmin() const { return key_[1] == none ? -1 : arg_[1]; }

  double min() const { return key_[1]; }

private:
  std::array<double, 2 * capacity> key_;
  std::array<int8_t, 2 * capacity> arg_;
};

/// What placement knows of the fleet, per device and per model cell. The
/// balancer tells it what changed (`update_device`, `set_rate`); a cell
/// catches up with the devices that changed when it is next asked (O(log
/// devices) per changed device), so cells that are not in use cost nothing.
/// Not thread-safe: lives in the balancer's state.
class fleet_index {
public:
  /// A device as placement sees it now.
  struct device_view {
    /// Takes work (available or degraded) and its circuit is closed.
    bool working = false;
    /// May take another item now (late binding).
    bool room = false;
    /// Predicted time until a new item would start there: its backlog per
    /// stream.
    double wait_ns = 0;
    /// Run times there are multiplied by this (a degraded device's penalty).
    double penalty = 1;
    /// Added to every completion there: the measured cost of reaching a
    /// device outside the node's process, fixed and per byte an item
    /// carries (0 in it).
    double crossing_ns = 0;
    double crossing_ns_per_byte = 0;
  };

  /// Where a typical item of a cell would finish first.
  struct choice {
    /// Over every working device, and over those with room; -1 for none.
    int32_t any = -1;
    int32_t with_room = -1;
  };

  explicit fleet_index(size_t devices = 0);

  size_t devices() const { return devices_.size(); }

  /// Appends a device (a GPU a rescan found, docs/gpu.md): it does not work
  /// yet (update_device says when it does), and in every cell its rate is
  /// unset and its units a typical item's, so that no cell chooses it
  /// until set_rate gives it a rate there. Its index is the old count;
  /// false (nothing added) at device_min_tree::capacity devices.
  bool add_device();

  /// The cells made so far, and the kernel and size class of cell `c`.
  size_t cells() const { return cells_.size(); }
  std::pair<kernels::kernel_id, uint8_t> cell_key(size_t c) const {
    return {cells_[c].kernel, cells_[c].cls};
  }

  /// Device `d` changed; its keys in every cell follow.
  void update_device(size_t d, const device_view& v);

  const device_view& device(size_t d) const { return devices_[d]; }

  /// Devices that work, and those of them with room, as bitmasks.
  uint64_t working() const { return working_; }
  uint64_t room() const { return room_; }

  /// The cell of `kernel` at size class `cls`, made on first use (every
  /// device's rate unset: call set_rate for each).
  size_t cell(kernels::kernel_id kernel, uint8_t cls);

  /// Whether the cell exists yet.
  bool has_cell(kernels::kernel_id kernel, uint8_t cls) const;

  /// Device `d`'s predicted ns per cost unit in `cell`; `measured` when it
  /// comes from runs there (otherwise an estimate: the device is unexplored
  /// in that cell).
  void set_rate(size_t cell, size_t d, double ns_per_unit, bool measured);

  /// Units a typical item of the cell takes on device `d` (after the inputs
  /// it holds): a moving average of what items placed there took; and the
  /// bytes of inputs a typical item of the cell carries (any device).
  void note_units(size_t cell, size_t d, double units, double bytes = 0);

  /// Device `d`'s rate in `cell` (0 when unset).
  double rate(size_t cell, size_t d) const { return cells_[cell].rate[d]; }

  /// Devices whose rate in `cell` is an estimate.
  uint64_t unexplored(size_t cell) const { return cells_[cell].unexplored; }

  choice best(size_t cell);

  /// The cell's key of device `d`: (wait + rate x typical units) x penalty
  /// + crossing of typical bytes (none when it does not work).
  double key(size_t cell, size_t d);

private:
  struct cell_state {
    kernels::kernel_id kernel = kernels::kernel_id::axpy;
    uint8_t cls = 0;
    std::vector<double> rate;
    std::vector<double> units;
    double bytes = 0;
    uint64_t unexplored = 0;
    /// Devices whose keys are out of date.
    uint64_t stale = 0;
    device_min_tree any;
    device_min_tree room;
  };

  void refresh(cell_state& c, size_t d);

  // Brings the keys of the cell's stale devices up to date.
  void catch_up(cell_state& c);

  std::vector<device_view> devices_;
  uint64_t working_ = 0;
  uint64_t room_ = 0;
  std::vector<cell_state> cells_;
  /// Cell index + 1 per (kernel, class); 0 for none yet.
  std::vector<uint16_t> by_key_;
};

} // namespace cohort::actors::balancer
