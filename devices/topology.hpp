// The host's CPU topology as hwloc reports it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cohort::devices {

/// Cores, hardware threads and NUMA nodes of this machine.
struct cpu_topology {
  uint32_t cores = 1;
  uint32_t hardware_threads = 1;
  uint32_t numa_nodes = 1;
  /// NUMA node of each core, by core index (-1 where hwloc does not say).
  std::vector<int32_t> core_numa_node;
  /// The CPU model name, when hwloc knows it.
  std::string model;
};

/// Reads the topology through hwloc. Never fails: without hwloc information
/// it reports one core on one NUMA node.
cpu_topology discover_cpu_topology();

} // namespace cohort::devices
