// The host's CPU topology as hwloc reports it, where its PCI devices (GPUs)
// sit in it, and NUMA-local thread binding and host memory.
#pragma once

#include <cstddef>
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

// The functions below share one topology, loaded with its PCI devices on
// first use and kept for the life of the process. Thread-safe.

/// The NUMA node (hwloc logical index, as in `cpu_topology`) nearest the PCI
/// device at `pci_bus_id`, in the form "0000:3b:00.0" or CUDA's
/// "00000000:3B:00.0" (any case, any domain width; "3b:00.0" is domain 0).
/// -1 when unknown: no such device, no hwloc information, or a device hwloc
/// can only attach to the whole machine while the machine has several nodes.
int32_t numa_node_of_pci(const std::string& pci_bus_id);

/// `pci_bus_id` ("0000:3B:00.0", CUDA's "00000000:3B:00.0", "3b:00.0" for
/// domain 0) spelled one way: "0000:3b:00.0". Empty when it is not a bus
/// id.
std::string canonical_pci_bus_id(const std::string& pci_bus_id);

/// The bus ids ("0000:3b:00.0") of the PCI devices hwloc lists.
std::vector<std::string> list_pci_bus_ids();

/// Binds the calling thread to the CPUs of NUMA node `node` and prefers that
/// node for the thread's memory. The memory preference is best effort: the
/// result says whether the CPU binding took (false, and nothing changed, for
/// -1, an unknown node, a node without CPUs, or a refused binding); with the
/// CPUs bound, first-touch allocation lands on the node even where the
/// memory policy call is refused (containers without CAP_SYS_NICE).
bool bind_thread_to_numa(int32_t node);

/// `bytes` of page-aligned host memory placed on NUMA node `node`: a plain
/// page-aligned allocation when `node` is -1 or the binding is not supported.
/// nullptr when `bytes` is 0 or memory is exhausted. For staging buffers; the
/// caller registers (pins) them with the GPU runtime. Release with
/// `free_on_numa` and the same `bytes`.
void* alloc_on_numa(std::size_t bytes, int32_t node);

/// Releases memory from `alloc_on_numa`; nullptr is ignored.
void free_on_numa(void* p, std::size_t bytes);

} // namespace cohort::devices
