// The balancer's latency histograms and fallback accounting alone.
#include <catch2/catch.hpp>

#include "actors/balancer/stats.hpp"

using namespace cohort;
using namespace cohort::actors::balancer;
using cohort::kernels::kernel_id;

TEST_CASE("latency histograms count per device and kernel, by bucket",
          "[actors][balancer][stats]") {
  latency_table t{2};
  t.record(0, kernel_id::gemv, 0.0);
  t.record(0, kernel_id::gemv, latency_bounds_s[3]); // on the bound: in it
  t.record(0, kernel_id::gemv, 1e9);                 // past every bound
  t.record(1, kernel_id::axpy, latency_bounds_s[0] * 1.5);
  t.record(5, kernel_id::axpy, 1.0); // no such device: ignored
  std::vector<std::string> names{"cpu0", "sim0"};
  auto hs = t.histograms(names);
  REQUIRE(hs.size() == 2);
  CHECK(hs[0].device == "cpu0");
  CHECK(hs[0].kernel == "gemv");
  CHECK(hs[0].count == 3);
  REQUIRE(hs[0].buckets.size() == latency_bounds_s.size() + 1);
  CHECK(hs[0].buckets[0] == 1);
  CHECK(hs[0].buckets[3] == 1);
  CHECK(hs[0].buckets.back() == 1);
  CHECK(hs[0].sum_s == Approx(latency_bounds_s[3] + 1e9));
  CHECK(hs[1].device == "sim0");
  CHECK(hs[1].kernel == "axpy");
  CHECK(hs[1].buckets[1] == 1);
  CHECK(latency_table{}.histograms(names).empty());
  // A device added later (a GPU a rescan found) is counted too.
  t.add_device();
  t.record(2, kernel_id::gemm, 1.0);
  names.push_back("cuda2");
  hs = t.histograms(names);
  REQUIRE(hs.size() == 3);
  CHECK(hs[2].device == "cuda2");
  CHECK(hs[2].kernel == "gemm");
}

TEST_CASE("fallback accounting sums, keeps the worst, and counts items over "
          "the budget",
          "[actors][balancer][stats]") {
  fallback_stats fb;
  CHECK_FALSE(note_fallback(fb, 5, 0)); // no budget: never over
  CHECK_FALSE(note_fallback(fb, 10, 10));
  CHECK(note_fallback(fb, 30, 10));
  CHECK(fb.items == 3);
  CHECK(fb.total_ns == 45);
  CHECK(fb.max_ns == 30);
  CHECK(fb.budget_ns == 10);
  CHECK(fb.over_budget == 1);
}
