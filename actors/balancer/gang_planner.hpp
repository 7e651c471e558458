// The gang planner: which devices an item that needs several GPUs at once
// (a gang) takes, and whether it could ever get them. Pure deciders over
// facts the balancer gathers (which devices are free, their NUMA nodes and
// links, when each would finish a slice); the balancer binds the devices.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "messages/work.hpp"

namespace cohort::actors::balancer {

/// A device free for a gang now: granted, a GPU, in service with a closed
/// circuit, not in another gang, with room for a slice.
struct gang_candidate {
  size_t device = 0;
  int32_t numa_node = 0;
  /// When it would finish a slice (its backlog per stream plus the slice's
  /// predicted run time), ns from now.
  double finish_ns = 0;
  /// The devices (bit i: device i) it reaches over a fabric (NVLink,
  /// xGMI), and those it reaches directly at all (a fabric or PCIe
  /// peer-to-peer). Links are both ways.
  uint64_t fabric = 0;
  uint64_t direct = 0;
};

/// The `k` devices (sorted by index) for a gang, in this order of
/// preference: a set in which every pair is linked by a fabric, then one in
/// which every pair is linked directly (PCIe peer-to-peer), then a set
/// within one NUMA node; across nodes only when `cross_numa` and none of
/// those is free. Within each, the set whose slowest pick finishes first
/// (linked sets by an exact search, bounded in steps). Empty when no such
/// set is free now (the gang waits).
std::vector<size_t> pick_gang(std::span<const gang_candidate> free, uint32_t k,
                              bool cross_numa);

/// The GPUs a gang of a tenant could ever get: granted and not out of
/// service for good, in all, the most on one NUMA node, and the most linked
/// directly to each other (by the search `pick_gang` makes; all of them
/// when the search runs out of steps).
struct gang_capacity {
  uint32_t total = 0;
  uint32_t one_node = 0;
  uint32_t linked = 0;
};

/// Capacity from those GPUs (`finish_ns` is not read).
gang_capacity capacity_of(std::span<const gang_candidate> gpus);

/// Why a gang of `k` of tenant `tenant` can never be placed with `cap`;
/// empty when it can.
std::string gang_impossible(const gang_capacity& cap, uint32_t k,
                            const std::string& tenant, bool cross_numa);

/// Device memory the largest slice of a gang gemm of `k` takes: its rows
/// of A, all of B, its rows of the product, each aligned as a device
/// allocates them.
uint64_t gang_slice_bytes(const work_item& item, uint32_t k);

} // namespace cohort::actors::balancer
