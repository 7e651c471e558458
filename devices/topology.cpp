#include "devices/topology.hpp"

#include <hwloc.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <optional>

namespace cohort::devices {

namespace {

/// The topology with PCI devices that the NUMA functions share. Loaded once;
/// never destroyed, so that memory from `alloc_on_numa` can be freed even
/// from other static destructors. nullptr when hwloc cannot load one.
hwloc_topology_t io_topology() {
  static hwloc_topology_t topo = [] {
    hwloc_topology_t t;
    if (hwloc_topology_init(&t) != 0)
      return hwloc_topology_t{nullptr};
    hwloc_topology_set_io_types_filter(t, HWLOC_TYPE_FILTER_KEEP_ALL);
    if (hwloc_topology_load(t) != 0) {
      hwloc_topology_destroy(t);
      return hwloc_topology_t{nullptr};
    }
    return t;
  }();
  return topo;
}

hwloc_obj_t numa_node(hwloc_topology_t topo, int32_t node) {
  if (topo == nullptr || node < 0)
    return nullptr;
  return hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, unsigned(node));
}

std::size_t page_size() {
  long size = sysconf(_SC_PAGESIZE);
  return size > 0 ? std::size_t(size) : 4096;
}

} // namespace

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

namespace {

struct bus_address {
  unsigned domain = 0, bus = 0, dev = 0, fn = 0;
};

std::optional<bus_address> parse_bus_id(const std::string& pci_bus_id) {
  bus_address a;
  char tail = 0;
  const char* id = pci_bus_id.c_str();
  if (std::sscanf(id, "%x:%x:%x.%x%c", &a.domain, &a.bus, &a.dev, &a.fn,
                  &tail) == 4)
    return a;
  a.domain = 0;
  if (std::sscanf(id, "%x:%x.%x%c", &a.bus, &a.dev, &a.fn, &tail) == 3)
    return a;
  return std::nullopt;
}

std::string format_bus_id(unsigned domain, unsigned bus, unsigned dev,
                          unsigned fn) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%04x:%02x:%02x.%x", domain, bus, dev, fn);
  return buf;
}

} // namespace

std::string canonical_pci_bus_id(const std::string& pci_bus_id) {
  auto a = parse_bus_id(pci_bus_id);
  return a ? format_bus_id(a->domain, a->bus, a->dev, a->fn) : std::string{};
}

int32_t numa_node_of_pci(const std::string& pci_bus_id) {
  auto parsed = parse_bus_id(pci_bus_id);
  if (!parsed)
    return -1;
  auto [domain, bus, dev, fn] = *parsed;
  auto* topo = io_topology();
  if (topo == nullptr)
    return -1;
  auto* pci = hwloc_get_pcidev_by_busid(topo, domain, bus, dev, fn);
  if (pci == nullptr)
    return -1;
  auto* parent = hwloc_get_non_io_ancestor_obj(topo, pci);
  if (parent == nullptr || parent->nodeset == nullptr)
    return -1;
  int nodes = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
  // Attached to the machine itself: hwloc does not know which node is near.
  if (parent == hwloc_get_root_obj(topo) && nodes > 1)
    return -1;
  for (int i = 0; i < nodes; ++i) {
    auto* numa = hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, unsigned(i));
    if (numa && hwloc_bitmap_intersects(numa->nodeset, parent->nodeset))
      return int32_t(numa->logical_index);
  }
  return -1;
}

std::vector<std::string> list_pci_bus_ids() {
  std::vector<std::string> out;
  auto* topo = io_topology();
  if (topo == nullptr)
    return out;
  for (auto* obj = hwloc_get_next_pcidev(topo, nullptr); obj != nullptr;
       obj = hwloc_get_next_pcidev(topo, obj)) {
    auto& pci = obj->attr->pcidev;
    out.push_back(format_bus_id(unsigned(pci.domain), unsigned(pci.bus),
                                unsigned(pci.dev), unsigned(pci.func)));
  }
  return out;
}

bool bind_thread_to_numa(int32_t node) {
  auto* topo = io_topology();
  auto* numa = numa_node(topo, node);
  if (numa == nullptr || numa->cpuset == nullptr ||
      hwloc_bitmap_iszero(numa->cpuset))
    return false;
  if (hwloc_set_cpubind(topo, numa->cpuset, HWLOC_CPUBIND_THREAD) != 0)
    return false;
  // Without HWLOC_MEMBIND_STRICT this is a preference (MPOL_PREFERRED on
  // Linux): a full node spills over instead of failing allocations.
  hwloc_set_membind(topo, numa->nodeset, HWLOC_MEMBIND_BIND,
                    HWLOC_MEMBIND_THREAD | HWLOC_MEMBIND_BYNODESET);
  return true;
}

void* alloc_on_numa(std::size_t bytes, int32_t node) {
  if (bytes == 0)
    return nullptr;
  auto* topo = io_topology();
  if (topo == nullptr) {
    auto page = page_size();
    return std::aligned_alloc(page, (bytes + page - 1) / page * page);
  }
  // hwloc_alloc and hwloc_alloc_membind both map whole pages (mmap on
  // Linux); without HWLOC_MEMBIND_STRICT a refused binding still allocates.
  if (auto* numa = numa_node(topo, node))
    if (void* p =
            hwloc_alloc_membind(topo, bytes, numa->nodeset, HWLOC_MEMBIND_BIND,
                                HWLOC_MEMBIND_BYNODESET))
      return p;
  return hwloc_alloc(topo, bytes);
}

void free_on_numa(void* p, std::size_t bytes) {
  if (p == nullptr)
    return;
  auto* topo = io_topology();
  if (topo == nullptr)
    std::free(p);
  else
    hwloc_free(topo, p, bytes);
}

} // namespace cohort::devices
