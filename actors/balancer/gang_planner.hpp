// The gang planner: which devices an item that needs several GPUs at once
// (a gang) takes, and whether it could ever get them. Pure deciders over
// facts the balancer gathers (which devices are free, their NUMA nodes,
// when each would finish a slice); the balancer binds the devices.
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
};

/// The `k` devices (sorted by index) with the earliest finish within one
/// NUMA node: the node whose slowest pick finishes first. Across nodes only
/// when `cross_numa` and no node has `k`. Empty when no such set is free
/// now (the gang waits).
std::vector<size_t> pick_gang(std::span<const gang_candidate> free, uint32_t k,
                              bool cross_numa);

/// The GPUs a gang of a tenant could ever get: granted and not out of
/// service for good, in all and the most on one NUMA node.
struct gang_capacity {
  uint32_t total = 0;
  uint32_t one_node = 0;
};

/// Capacity from the NUMA nodes of those GPUs (one entry per GPU).
gang_capacity capacity_of(std::span<const int32_t> numa_nodes);

/// Why a gang of `k` of tenant `tenant` can never be placed with `cap`;
/// empty when it can.
std::string gang_impossible(const gang_capacity& cap, uint32_t k,
                            const std::string& tenant, bool cross_numa);

/// Device memory the largest slice of a gang gemm of `k` takes: its rows
/// of A, all of B, its rows of the product, each aligned as a device
/// allocates them.
uint64_t gang_slice_bytes(const work_item& item, uint32_t k);

} // namespace cohort::actors::balancer
