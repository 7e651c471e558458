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

TEST_CASE("gang capacity and the reasons a gang can never be placed",
          "[actors][balancer][gang]") {
  std::vector<int32_t> nodes{0, 0, 1, 1, 1};
  auto cap = capacity_of(nodes);
  CHECK(cap.total == 5);
  CHECK(cap.one_node == 3);
  CHECK(gang_impossible(cap, 3, "t", false).empty());
  auto why = gang_impossible(cap, 4, "t", false);
  CHECK(why.find("one NUMA node") != std::string::npos);
  CHECK(why.find("gang_cross_numa") != std::string::npos);
  CHECK(gang_impossible(cap, 4, "t", true).empty());
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
