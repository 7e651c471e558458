#include "devices/topology.hpp"

#include <hwloc.h>

namespace cohort::devices {

cpu_topology discover_cpu_topology() {
  cpu_topology out;
  hwloc_topology_t topo;
  if (hwloc_topology_init(&topo) != 0)
    return out;
  if (hwloc_topology_load(topo) != 0) {
    hwloc_topology_destroy(topo);
    return out;
  }
  int cores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
  int pus = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU);
  int nodes = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
  out.cores = cores > 0 ? uint32_t(cores) : 1;
  out.hardware_threads = pus > 0 ? uint32_t(pus) : out.cores;
  out.numa_nodes = nodes > 0 ? uint32_t(nodes) : 1;
  for (int i = 0; i < cores; ++i) {
    auto* core = hwloc_get_obj_by_type(topo, HWLOC_OBJ_CORE, unsigned(i));
    int32_t node = -1;
    for (int j = 0; j < nodes; ++j) {
      auto* numa = hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, unsigned(j));
      if (numa && hwloc_bitmap_intersects(core->cpuset, numa->cpuset))
        node = int32_t(numa->logical_index);
    }
    out.core_numa_node.push_back(node);
  }
  if (auto* root = hwloc_get_root_obj(topo))
    if (auto* model = hwloc_obj_get_info_by_name(root, "CPUModel"))
      out.model = model;
  if (out.model.empty())
    if (auto* pkg = hwloc_get_obj_by_type(topo, HWLOC_OBJ_PACKAGE, 0))
      if (auto* model = hwloc_obj_get_info_by_name(pkg, "CPUModel"))
        out.model = model;
  hwloc_topology_destroy(topo);
  return out;
}

} // namespace cohort::devices
