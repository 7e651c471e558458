// The fleet index: where a typical item of a cell would finish first, overall
// and among devices with room, kept up to date one device at a time and
// checked against a scan of every device.
#include <catch2/catch.hpp>

#include <random>

#include "actors/balancer/fleet_index.hpp"

using namespace cohort;
using namespace cohort::actors::balancer;

TEST_CASE("a tournament tree finds the least key and the lowest index among "
          "equals",
          "[actors][balancer]") {
  device_min_tree t;
  CHECK(t.argmin() == -1);
  t.set(5, 3.0);
  t.set(9, 2.0);
  t.set(63, 2.0);
  CHECK(t.argmin() == 9);
  CHECK(t.min() == 2.0);
  t.set(9, device_min_tree::none);
  CHECK(t.argmin() == 63);
  t.set(0, 2.0);
  CHECK(t.argmin() == 0);
  t.set(0, device_min_tree::none);
  t.set(5, device_min_tree::none);
  t.set(63, device_min_tree::none);
  CHECK(t.argmin() == -1);
}

TEST_CASE("the fleet index agrees with a scan of every device",
          "[actors][balancer]") {
  constexpr size_t n = 64;
  fleet_index fleet{n};
  std::mt19937 rng{42};
  std::uniform_real_distribution<double> u{0, 1};
  std::vector<fleet_index::device_view> views(n);
  std::vector<double> rates(n);
  auto cell = fleet.cell(kernels::kernel_id::gemm, 20);
  auto units = std::ldexp(1.5, 20);
  for (size_t d = 0; d < n; ++d) {
    rates[d] = 0.5 + u(rng);
    fleet.set_rate(cell, d, rates[d], d % 7 != 0);
  }
  CHECK(fleet.unexplored(cell) != 0);
  for (int step = 0; step < 5000; ++step) {
    auto d = size_t(rng() % n);
    auto& v = views[d];
    v.working = u(rng) < 0.9;
    v.room = u(rng) < 0.3;
    v.wait_ns = u(rng) * 1e6;
    v.penalty = u(rng) < 0.1 ? 4.0 : 1.0;
    fleet.update_device(d, v);
    if (step % 50 == 0) {
      auto e = size_t(rng() % n);
      rates[e] = 0.5 + u(rng);
      fleet.set_rate(cell, e, rates[e], true);
    }
    // What a scan would pick.
    int32_t any = -1, room = -1;
    double best_any = 0, best_room = 0;
    uint64_t working = 0, with_room = 0;
    for (size_t i = 0; i < n; ++i) {
      if (!views[i].working)
        continue;
      working |= uint64_t{1} << i;
      double t = (views[i].wait_ns + rates[i] * units) * views[i].penalty;
      if (any < 0 || t < best_any) {
        any = int32_t(i);
        best_any = t;
      }
      if (views[i].room) {
        with_room |= uint64_t{1} << i;
        if (room < 0 || t < best_room) {
          room = int32_t(i);
          best_room = t;
        }
      }
    }
    auto b = fleet.best(cell);
    REQUIRE(b.any == any);
    REQUIRE(b.with_room == room);
    REQUIRE(fleet.working() == working);
    REQUIRE(fleet.room() == with_room);
  }
}

TEST_CASE("cells are made on first use and learn typical units",
          "[actors][balancer]") {
  fleet_index fleet{2};
  CHECK_FALSE(fleet.has_cell(kernels::kernel_id::axpy, 3));
  auto c = fleet.cell(kernels::kernel_id::axpy, 3);
  CHECK(fleet.has_cell(kernels::kernel_id::axpy, 3));
  CHECK(fleet.cell(kernels::kernel_id::axpy, 3) == c);
  CHECK(fleet.unexplored(c) == 0b11);
  fleet.update_device(0, {true, true, 0, 1});
  fleet.update_device(1, {true, true, 0, 1});
  // No rate yet: no device can be chosen.
  CHECK(fleet.best(c).any == -1);
  fleet.set_rate(c, 0, 1.0, true);
  fleet.set_rate(c, 1, 1.0, false);
  CHECK(fleet.unexplored(c) == 0b10);
  // Equal rates and waits: the lower index; then device 1 holds the
  // inputs (fewer units there) and wins.
  CHECK(fleet.best(c).any == 0);
  for (int i = 0; i < 20; ++i)
    fleet.note_units(c, 1, 1.0);
  CHECK(fleet.best(c).any == 1);
  CHECK(fleet.key(c, 1) < fleet.key(c, 0));
  // A device without work is out of both trees.
  fleet.update_device(1, {false, true, 0, 1});
  CHECK(fleet.best(c).any == 0);
  CHECK(fleet.room() == 0b01);
}

TEST_CASE("a device outside the node's process ranks by its crossing too",
          "[actors][balancer]") {
  fleet_index fleet{2};
  auto c = fleet.cell(kernels::kernel_id::gemv, 5);
  // Device 0 is in a host process: its crossing (400 us) is added after
  // the degraded penalty (2x), not multiplied by it.
  fleet.update_device(0, {true, true, 0, 2, 400e3});
  fleet.update_device(1, {true, true, 0, 1});
  fleet.set_rate(c, 0, 1.0, true);
  fleet.set_rate(c, 1, 1.0, true);
  for (int i = 0; i < 40; ++i) {
    fleet.note_units(c, 0, 1000);
    fleet.note_units(c, 1, 1000);
  }
  CHECK(fleet.key(c, 0) == Approx(2 * 1000 + 400e3).epsilon(0.01));
  CHECK(fleet.best(c).any == 1);
  // Device 1 busy for longer than the crossing: device 0 wins.
  fleet.update_device(1, {true, true, 500e3, 1});
  CHECK(fleet.best(c).any == 0);
  // Unless the cell's items carry 1 MiB, at 1 ns per byte over there.
  fleet.update_device(0, {true, true, 0, 2, 400e3, 1.0});
  for (int i = 0; i < 40; ++i)
    fleet.note_units(c, 1, 1000, double(1 << 20));
  CHECK(fleet.key(c, 0) ==
        Approx(2 * 1000 + 400e3 + double(1 << 20)).epsilon(0.01));
  CHECK(fleet.best(c).any == 1);
}

TEST_CASE("a device added later is chosen only once it works and has a rate",
          "[actors][balancer]") {
  fleet_index fleet{2};
  auto c = fleet.cell(kernels::kernel_id::gemv, 4);
  fleet.update_device(0, {true, true, 0, 1});
  fleet.update_device(1, {true, true, 0, 1});
  fleet.set_rate(c, 0, 2.0, true);
  fleet.set_rate(c, 1, 2.0, true);
  REQUIRE(fleet.add_device());
  CHECK(fleet.devices() == 3);
  CHECK(fleet.cells() == 1);
  CHECK(fleet.cell_key(c) == std::pair{kernels::kernel_id::gemv, uint8_t{4}});
  // Unexplored in the cell, not working, no rate: never chosen.
  CHECK(fleet.unexplored(c) == 0b100);
  CHECK(fleet.rate(c, 2) == 0);
  CHECK(fleet.best(c).any == 0);
  fleet.update_device(2, {true, true, 0, 1});
  CHECK(fleet.working() == 0b111);
  CHECK(fleet.best(c).any == 0);
  // An estimated rate, faster than the others': it wins, still unexplored.
  fleet.set_rate(c, 2, 1.0, false);
  CHECK(fleet.best(c).any == 2);
  CHECK(fleet.unexplored(c) == 0b100);
  // A cell made after the add knows all three.
  auto later = fleet.cell(kernels::kernel_id::axpy, 2);
  CHECK(fleet.unexplored(later) == 0b111);
  // 64 at most.
  fleet_index full{63};
  CHECK(full.add_device());
  CHECK_FALSE(full.add_device());
  CHECK(full.devices() == 64);
}
