// The gang planner alone: device sets from candidates, capacity and the
// reasons a gang can never run, no actors.
#include <catch2/catch.hpp>

#include "actors/balancer/gang_planner.hpp"

using namespace cohort;
using namespace cohort::actors::balancer;

TEST_CASE("pick_gang takes the earliest set within one NUMA node",
          "[actors][balancer][gang]") {
  // Node 0: devices 0-2, node 1: devices 3-5. Node 1's third-best finishes
  // at 30, node 0's at 50: node 1 wins though device 0 is the fastest.
  std::vector<gang_candidate> free{{0, 0, 1},  {1, 0, 50}, {2, 0, 40},
                                   {3, 1, 30}, {4, 1, 20}, {5, 1, 25}};
  CHECK(pick_gang(free, 3, false) == std::vector<size_t>{3, 4, 5});
  // Pairs: node 0's best two finish by 40, node 1's by 25.
  CHECK(pick_gang(free, 2, false) == std::vector<size_t>{4, 5});
  // Four fit on no node: only across nodes, the four earliest.
  CHECK(pick_gang(free, 4, false).empty());
  CHECK(pick_gang(free, 4, true) == std::vector<size_t>{0, 3, 4, 5});
  // Fewer free than needed, or none needed.
  CHECK(pick_gang(free, 7, true).empty());
  CHECK(pick_gang(free, 0, true).empty());
  CHECK(pick_gang({}, 2, true).empty());
}

TEST_CASE("pick_gang prefers a set linked by a fabric, then by PCIe, "
          "to one NUMA node",
          "[actors][balancer][gang]") {
  // Node 0: devices 0-3, node 1: devices 4-7. NVLink pairs 0-1, 2-3 and
  // the four of node 1 on a switch; PCIe peer-to-peer among 0-3.
  auto with = [](size_t dev, int32_t node, double t, uint64_t fabric,
                 uint64_t pcie) {
    gang_candidate c{dev, node, t};
    c.fabric = fabric;
    c.direct = fabric | pcie;
    return c;
  };
  std::vector<gang_candidate> free{
      with(0, 0, 1, 0b10, 0b1100),   with(1, 0, 2, 0b01, 0b1100),
      with(2, 0, 9, 0b1000, 0b0011), with(3, 0, 9, 0b0100, 0b0011),
      with(4, 1, 50, 0xE0, 0),       with(5, 1, 60, 0xD0, 0),
      with(6, 1, 70, 0xB0, 0),       with(7, 1, 80, 0x70, 0)};
  // A pair: the NVLinked pair that finishes first, 0-1.
  CHECK(pick_gang(free, 2, false) == std::vector<size_t>{0, 1});
  // Three: only node 1's switch links three by NVLink, though node 0's
  // PCIe-linked four finish far earlier.
  CHECK(pick_gang(free, 3, false) == std::vector<size_t>{4, 5, 6});
  CHECK(pick_gang(free, 4, false) == std::vector<size_t>{4, 5, 6, 7});
  // Without node 1, four are linked by PCIe at least: node 0's.
  std::vector<gang_candidate> node0(free.begin(), free.begin() + 4);
  CHECK(pick_gang(node0, 3, false) == std::vector<size_t>{0, 1, 2});
  // No links: one NUMA node, as before; a linked set across nodes counts
  // as one place even without gang_cross_numa.
  std::vector<gang_candidate> spread{
      with(0, 0, 1, 0b10, 0), with(1, 1, 1, 0b01, 0), with(2, 1, 5, 0, 0)};
  CHECK(pick_gang(spread, 2, false) == std::vector<size_t>{0, 1});
  spread[0].fabric = spread[1].fabric = 0;
  spread[0].direct = spread[1].direct = 0;
  CHECK(pick_gang(spread, 2, false) == std::vector<size_t>{1, 2});
  // Capacity: the most linked directly to each other.
  auto cap = capacity_of(free);
  CHECK(cap.linked == 4);
  CHECK(cap.one_node == 4);
  CHECK(capacity_of(spread).linked == 0);
}

TEST_CASE("pick_gang takes a PCIe-linked pair over a faster pair of one "
          "NUMA node",
          "[actors][balancer][gang]") {
  // Devices 0 and 1 (node 0) are the fastest, unlinked; 2 (node 0) and 3
  // (node 1) are linked by PCIe only.
  std::vector<gang_candidate> free{{0, 0, 1}, {1, 0, 2}, {2, 0, 9}, {3, 1, 9}};
  free[2].direct = 0b1000;
  free[3].direct = 0b0100;
  CHECK(pick_gang(free, 2, false) == std::vector<size_t>{2, 3});
  free[2].direct = free[3].direct = 0;
  CHECK(pick_gang(free, 2, false) == std::vector<size_t>{0, 1});
}

TEST_CASE("the check at submission and the pick find the same linked sets",
          "[actors][balancer][gang]") {
  // Devices 0-3 linked to each other; 4 (fastest) to 0 and 1, 5 to 2 and
  // 3. No NUMA node has four. A search that starts from the fast devices
  // must still find 0-3, and the capacity says four.
  std::vector<gang_candidate> a{{0, 0, 10}, {1, 0, 11}, {2, 1, 12},
                                {3, 1, 13}, {4, 0, 1},  {5, 1, 2}};
  uint64_t peers_a[] = {0x1E, 0x1D, 0x2B, 0x27, 0x03, 0x0C};
  for (size_t i = 0; i < a.size(); ++i)
    a[i].direct = a[i].fabric = peers_a[i];
  CHECK(pick_gang(a, 4, false) == std::vector<size_t>{0, 1, 2, 3});
  CHECK(capacity_of(a).linked == 4);
  CHECK(gang_impossible(capacity_of(a), 4, "t", false).empty());
  CHECK(pick_gang(a, 5, false).empty());
  // 0 is linked to 2 and 3, 1 to 4 and 5, and 2-5 to each other: four
  // are linked (2-5), though the search from device 0 finds three.
  std::vector<gang_candidate> b{{0, 0, 1}, {1, 0, 2}, {2, 1, 3},
                                {3, 1, 4}, {4, 2, 5}, {5, 2, 6}};
  uint64_t peers_b[] = {0x0C, 0x30, 0x39, 0x35, 0x2E, 0x1E};
  for (size_t i = 0; i < b.size(); ++i)
    b[i].direct = b[i].fabric = peers_b[i];
  CHECK(capacity_of(b).linked == 4);
  CHECK(gang_impossible(capacity_of(b), 4, "t", false).empty());
  CHECK(pick_gang(b, 4, false) == std::vector<size_t>{2, 3, 4, 5});
  // Every GPU linked to every other: all 64 in one set, found at once.
  std::vector<gang_candidate> all;
  for (size_t i = 0; i < 64; ++i) {
    all.push_back({i, int32_t(i % 4), double(i)});
    all.back().direct = all.back().fabric = ~(uint64_t{1} << i);
  }
  CHECK(capacity_of(all).linked == 64);
  CHECK(pick_gang(all, 64, false).size() == 64);
  CHECK(pick_gang(all, 8, false) ==
        std::vector<size_t>{0, 1, 2, 3, 4, 5, 6, 7});
}

TEST_CASE("gang capacity and the reasons a gang can never be placed",
          "[actors][balancer][gang]") {
  std::vector<gang_candidate> gpus{
      {0, 0, 0}, {1, 0, 0}, {2, 1, 0}, {3, 1, 0}, {4, 1, 0}};
  auto cap = capacity_of(gpus);
  CHECK(cap.total == 5);
  CHECK(cap.one_node == 3);
  CHECK(cap.linked == 0);
  CHECK(gang_impossible(cap, 3, "t", false).empty());
  auto why = gang_impossible(cap, 4, "t", false);
  CHECK(why.find("one NUMA node") != std::string::npos);
  CHECK(why.find("gang_cross_numa") != std::string::npos);
  CHECK(gang_impossible(cap, 4, "t", true).empty());
  // Four linked across the nodes can hold a gang of four.
  for (size_t i = 1; i < 5; ++i)
    gpus[i].direct = 0b11110 & ~(uint64_t{1} << i);
  cap = capacity_of(gpus);
  CHECK(cap.linked == 4);
  CHECK(gang_impossible(cap, 4, "t", false).empty());
  why = gang_impossible(cap, 5, "t", false);
  CHECK(why.find("the most linked 4") != std::string::npos);
  why = gang_impossible(cap, 6, "t", true);
  CHECK(why.find("tenant 't' has 5 granted") != std::string::npos);
  CHECK(capacity_of({}).total == 0);
  CHECK_FALSE(gang_impossible(capacity_of({}), 2, "t", true).empty());
}

TEST_CASE("a gang slice takes its rows of A and C and all of B, aligned",
          "[actors][balancer][gang]") {
  work_item item;
  item.kernel = kernel_id::gemm;
  item.args.m = 10;
  item.args.k = 8;
  item.args.n = 4;
  item.inputs.emplace_back(std::vector<float>(80, 1.0f));
  item.inputs.emplace_back(std::vector<float>(32, 1.0f));
  // 3 devices: 4 rows in the largest slice; each part rounds up to 256.
  CHECK(gang_slice_bytes(item, 3) == 256 + 256 + 256);
  item.args.m = 3000;
  item.inputs[0] = host_buffer{std::vector<float>(3000 * 8, 1.0f)};
  // 1000 rows: A 32,000 -> 32,000 (a multiple of 256), B 128 -> 256,
  // C 16,000 -> 16,128.
  CHECK(gang_slice_bytes(item, 3) == 32000 + 256 + 16128);
}
