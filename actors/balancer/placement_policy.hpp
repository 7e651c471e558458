// The placement policy: which of the devices that may take an item now
// gets it. A pure decider over candidates the balancer gathers (each
// device's expected completion of the item, whether it has room, whether
// it still has to measure the item's kernel at this size); the balancer
// binds the item to the pick.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "actors/balancer/balancer.hpp"

namespace cohort::actors::balancer {

/// A device that may take the item (granted, in service, circuit letting
/// it through, memory fitting).
struct placement_candidate {
  size_t index = 0;
  /// When it would finish the item: its backlog per stream plus the
  /// item's predicted run time there (times the degraded penalty).
  double completion = 0;
  /// It has room in its window now.
  bool room = false;
  /// It never ran the item's kernel at this size: one run measures it.
  bool explore = false;
  /// A CPU worker (no device memory).
  bool cpu = false;
  /// Items placed on it per stream (least_loaded).
  double load = 0;
};

/// How to choose.
struct placement_rules {
  placement_policy policy = placement_policy::earliest_completion;
  /// Only a device that finishes it soonest may take it (the first pass
  /// over the ready queues); otherwise a device with room may take it when
  /// the fleet has more work than it can finish before the item would be
  /// done there anyway (the drain horizon).
  bool strict = false;
  /// Only a CPU worker may take it (device memory is full for it and its
  /// tenant falls back to the CPU).
  bool cpu_only = false;
  /// Devices in the fleet (round_robin's turns).
  size_t fleet_size = 0;
};

/// Means: no pick now; the item waits for room.
inline constexpr size_t no_pick = static_cast<size_t>(-1);

/// The position in `fit` of the device that takes the item now, or no_pick.
/// earliest_completion: a device with room that still has to measure the
/// kernel at this size takes it first; otherwise the device with room that
/// finishes it soonest, if none finishes it sooner (or, unless strict, if
/// it finishes before `horizon()`, the drain horizon in ns, asked for only
/// when needed). round_robin: the first device at or after `turn`, which
/// moves past it. least_loaded: the fewest items per stream. cpu_only:
/// the CPU worker with room that finishes it soonest.
template <class Horizon>
size_t pick_device(std::span<const placement_candidate> fit,
                   const placement_rules& rules, uint32_t& turn,
                   Horizon&& horizon) {
  size_t pick = no_pick;
  if (fit.empty())
    return pick;
  if (rules.cpu_only) {
    for (size_t i = 0; i < fit.size(); ++i)
      if (fit[i].cpu && fit[i].room &&
          (pick == no_pick || fit[i].completion < fit[pick].completion))
        pick = i;
    return pick;
  }
  switch (rules.policy) {
  // The baselines bind at once, as their classic forms do: the item waits
  // in its device's queue.
  case placement_policy::round_robin: {
    size_t n = std::max<size_t>(rules.fleet_size, 1);
    size_t best_turn = n;
    for (size_t i = 0; i < fit.size(); ++i) {
      auto t = (fit[i].index + n - turn % n) % n;
      if (t < best_turn) {
        best_turn = t;
        pick = i;
      }
    }
    if (pick != no_pick)
      turn = uint32_t((fit[pick].index + 1) % n);
    return pick;
  }
  case placement_policy::least_loaded:
    for (size_t i = 0; i < fit.size(); ++i)
      if (pick == no_pick || fit[i].load < fit[pick].load)
        pick = i;
    return pick;
  case placement_policy::earliest_completion:
    break;
  }
  double best = fit[0].completion;
  for (auto& c : fit)
    best = c.completion < best ? c.completion : best;
  double limit = -1;
  for (size_t i = 0; i < fit.size(); ++i) {
    auto& c = fit[i];
    if (!c.room)
      continue;
    if (c.explore)
      return i;
    if (c.completion > best) {
      if (rules.strict)
        continue;
      if (limit < 0)
        limit = horizon();
      if (c.completion > limit)
        continue;
    }
    if (pick == no_pick || c.completion < fit[pick].completion)
      pick = i;
  }
  return pick;
}

} // namespace cohort::actors::balancer
