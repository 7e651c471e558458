// GPU NUMA locality through hwloc: PCI device to NUMA node, thread binding,
// node-local host memory. What this host allows is read from /sys and the
// scheduler, so the checks hold on any machine or container.
#include <catch2/catch.hpp>

#include <sched.h>
#include <unistd.h>

#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "devices/topology.hpp"

using namespace cohort::devices;

namespace {

/// The CPUs of a Linux cpulist ("0-3,8,10-11").
std::set<int> parse_cpulist(const std::string& list) {
  std::set<int> out;
  std::stringstream in{list};
  std::string part;
  while (std::getline(in, part, ',')) {
    if (part.empty() || part == "\n")
      continue;
    int lo = 0, hi = 0;
    if (std::sscanf(part.c_str(), "%d-%d", &lo, &hi) == 2)
      for (int c = lo; c <= hi; ++c)
        out.insert(c);
    else if (std::sscanf(part.c_str(), "%d", &lo) == 1)
      out.insert(lo);
  }
  return out;
}

/// NUMA node 0's CPUs as the kernel lists them; empty without NUMA in /sys.
std::set<int> node0_cpus() {
  std::ifstream in{"/sys/devices/system/node/node0/cpulist"};
  std::string line;
  std::getline(in, line);
  return parse_cpulist(line);
}

std::set<int> thread_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::set<int> out;
  if (sched_getaffinity(0, sizeof(set), &set) != 0)
    return out;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set))
      out.insert(c);
  return out;
}

/// Whether this thread may set its own affinity (some sandboxes refuse).
bool affinity_allowed() {
  cpu_set_t set;
  CPU_ZERO(&set);
  return sched_getaffinity(0, sizeof(set), &set) == 0 &&
         sched_setaffinity(0, sizeof(set), &set) == 0;
}

} // namespace

TEST_CASE("a made-up PCI bus id has no NUMA node", "[devices]") {
  CHECK(numa_node_of_pci("ffff:ff:1f.7") == -1);
  CHECK(numa_node_of_pci("not a bus id") == -1);
  CHECK(numa_node_of_pci("") == -1);
}

TEST_CASE("every PCI device maps to a valid NUMA node or none", "[devices]") {
  auto nodes = int32_t(discover_cpu_topology().numa_nodes);
  auto ids = list_pci_bus_ids();
  INFO(ids.size() << " PCI devices, " << nodes << " NUMA nodes");
  for (auto& id : ids) {
    INFO(id);
    REQUIRE(id.size() == 12); // "0000:3b:00.0"
    auto node = numa_node_of_pci(id);
    CHECK(node >= -1);
    CHECK(node < nodes);
    // CUDA's spelling of the same device: 8-digit domain, upper case.
    std::string cuda = "0000" + id;
    for (auto& c : cuda)
      c = char(std::toupper(static_cast<unsigned char>(c)));
    CHECK(numa_node_of_pci(cuda) == node);
    // With a single node and hwloc's locality, there is only one answer.
    if (nodes == 1)
      CHECK(node == 0);
  }
}

TEST_CASE("NUMA-local memory is page-aligned and writable", "[devices]") {
  constexpr size_t mib = 1 << 20;
  auto page = uintptr_t(sysconf(_SC_PAGESIZE));
  for (int32_t node : {0, -1}) {
    INFO("node " << node);
    void* p = alloc_on_numa(mib, node);
    REQUIRE(p != nullptr);
    CHECK(reinterpret_cast<uintptr_t>(p) % page == 0);
    std::memset(p, 0xab, mib);
    CHECK(static_cast<unsigned char*>(p)[mib - 1] == 0xab);
    free_on_numa(p, mib);
  }
  // An odd size still gets whole pages.
  void* q = alloc_on_numa(100, 0);
  REQUIRE(q != nullptr);
  CHECK(reinterpret_cast<uintptr_t>(q) % page == 0);
  std::memset(q, 1, 100);
  free_on_numa(q, 100);
  CHECK(alloc_on_numa(0, 0) == nullptr);
  free_on_numa(nullptr, 0); // ignored
}

TEST_CASE("binding a thread to a NUMA node", "[devices]") {
  CHECK_FALSE(bind_thread_to_numa(-1));
  CHECK_FALSE(bind_thread_to_numa(1 << 20)); // no such node

  auto node0 = node0_cpus();
  bool may_bind = affinity_allowed();
  bool bound = false;
  bool ran = false;
  std::set<int> cpus_after;
  std::thread t{[&] {
    bound = bind_thread_to_numa(0);
    cpus_after = thread_cpus();
    // Still runs (and allocates) after binding.
    std::vector<int> work(1 << 16, 1);
    ran = work.back() == 1;
  }};
  t.join();
  CHECK(ran);
  INFO("node0 CPUs from /sys: " << node0.size()
                                << ", affinity allowed: " << may_bind);
  if (!node0.empty() && may_bind)
    CHECK(bound);
  if (bound && !node0.empty()) {
    // The thread runs only on node 0's CPUs.
    CHECK_FALSE(cpus_after.empty());
    for (int c : cpus_after)
      CHECK(node0.contains(c));
  }
}
