#include "actors/balancer/fleet_index.hpp"

#include <cmath>

namespace cohort::actors::balancer {

namespace {

constexpr size_t classes = 64;

size_t key_of(kernels::kernel_id kernel, uint8_t cls) {
  return static_cast<size_t>(kernel) * classes + (cls % classes);
}

// A typical item of size class `cls` (cost units in [2^cls, 2^(cls+1))).
double typical_units(uint8_t cls) {
  return std::ldexp(1.5, cls);
}

} // namespace

device_min_tree::device_min_tree() {
  key_.fill(none);
  for (size_t i = 0; i < capacity; ++i)
    arg_[capacity + i] = int8_t(i);
  for (size_t i = capacity - 1; i >= 1; --i)
    arg_[i] = arg_[2 * i];
}

void device_min_tree::set(size_t d, double key) {
  auto i = capacity + d;
  key_[i] = key;
  for (i /= 2; i >= 1; i /= 2) {
    auto l = 2 * i;
    auto r = l + 1;
    // Ties go left: the lowest index wins, as a scan in order would.
    auto w = key_[r] < key_[l] ? r : l;
    key_[i] = key_[w];
    arg_[i] = arg_[w];
  }
}

fleet_index::fleet_index(size_t devices)
    : devices_(devices),
      by_key_(size_t(kernels::kernel_id_limit) * classes, 0) {
  // nop
}

bool fleet_index::add_device() {
  auto d = devices_.size();
  if (d >= device_min_tree::capacity)
    return false;
  devices_.emplace_back();
  // Its keys are `none` in every tree already (not working, no rate).
  for (auto& c : cells_) {
    c.rate.push_back(0);
    c.units.push_back(typical_units(c.cls));
    c.unexplored |= uint64_t{1} << d;
  }
  return true;
}

void fleet_index::update_device(size_t d, const device_view& v) {
  devices_[d] = v;
  auto bit = uint64_t{1} << d;
  working_ = v.working ? working_ | bit : working_ & ~bit;
  room_ = v.working && v.room ? room_ | bit : room_ & ~bit;
  for (auto& c : cells_)
    c.stale |= bit;
}

fleet_index::choice fleet_index::best(size_t cell) {
  auto& c = cells_[cell];
  catch_up(c);
  return {c.any.argmin(), c.room.argmin()};
}

double fleet_index::key(size_t cell, size_t d) {
  auto& c = cells_[cell];
  catch_up(c);
  return c.any.key(d);
}

void fleet_index::catch_up(cell_state& c) {
  while (c.stale != 0) {
    auto d = size_t(__builtin_ctzll(c.stale));
    c.stale &= c.stale - 1;
    refresh(c, d);
  }
}

bool fleet_index::has_cell(kernels::kernel_id kernel, uint8_t cls) const {
  return by_key_[key_of(kernel, cls)] != 0;
}

size_t fleet_index::cell(kernels::kernel_id kernel, uint8_t cls) {
  auto& slot = by_key_[key_of(kernel, cls)];
  if (slot != 0)
    return slot - 1u;
  cell_state c;
  c.kernel = kernel;
  c.cls = cls;
  c.rate.assign(devices_.size(), 0);
  c.units.assign(devices_.size(), typical_units(cls));
  c.unexplored = devices_.size() >= 64 ? ~uint64_t{0}
                                       : (uint64_t{1} << devices_.size()) - 1;
  cells_.push_back(std::move(c));
  slot = uint16_t(cells_.size());
  return cells_.size() - 1;
}

void fleet_index::set_rate(size_t cell, size_t d, double ns_per_unit,
                           bool measured) {
  auto& c = cells_[cell];
  c.rate[d] = ns_per_unit;
  auto bit = uint64_t{1} << d;
  c.unexplored = measured ? c.unexplored & ~bit : c.unexplored | bit;
  refresh(c, d);
}

void fleet_index::note_units(size_t cell, size_t d, double units,
                             double bytes) {
  auto& c = cells_[cell];
  // A short memory: the inputs a device holds change as work moves.
  c.units[d] = 0.75 * c.units[d] + 0.25 * units;
  c.bytes = 0.75 * c.bytes + 0.25 * bytes;
  refresh(c, d);
}

void fleet_index::refresh(cell_state& c, size_t d) {
  c.stale &= ~(uint64_t{1} << d);
  auto& v = devices_[d];
  auto key = device_min_tree::none;
  if (v.working && c.rate[d] > 0)
    key = (v.wait_ns + c.rate[d] * c.units[d]) * v.penalty + v.crossing_ns +
          v.crossing_ns_per_byte * c.bytes;
  c.any.set(d, key);
  c.room.set(d, v.room ? key : device_min_tree::none);
}

} // namespace cohort::actors::balancer
