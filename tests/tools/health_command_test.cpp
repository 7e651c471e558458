// cohort health's report (tools/health_command.hpp) from made-up answers:
// state, counters now, Xids, trends, and the newest samples.
#include <catch2/catch.hpp>

#include "tests/temp_dir.hpp"
#include "tools/health_command.hpp"

using namespace cohort;

namespace {

using test::has;

} // namespace

TEST_CASE("a sparkline shows values low to high, one block per bucket",
          "[tools][health]") {
  CHECK(tools::sparkline({}, 10).empty());
  CHECK(tools::sparkline({1, 2, 3}, 0).empty());
  CHECK(tools::sparkline({0, 7}, 10) == "\u2581\u2588");
  // All alike: the lowest block.
  CHECK(tools::sparkline({5, 5, 5}, 10) == "\u2581\u2581\u2581");
  // 100 values into 10 buckets; each shows its most.
  std::vector<double> ramp;
  for (int i = 0; i < 100; ++i)
    ramp.push_back(i);
  auto line = tools::sparkline(ramp, 10);
  CHECK(line.size() == 10 * std::string{"\u2581"}.size());
  CHECK(line.substr(line.size() - 3) == "\u2588");
}

TEST_CASE("a health report gives state, counters, Xids and trends",
          "[tools][health]") {
  pb::DeviceHealth h;
  h.set_device("cuda0");
  h.set_kind("cuda");
  h.set_status("degraded");
  h.set_circuit("closed");
  h.set_circuit_opens(1);
  h.set_losses(2);
  h.set_restarts(2);
  h.set_source("NVML");
  h.set_interval_ms(1000);
  auto* now = h.mutable_now();
  now->set_time("2026-11-29T00:00:19.000Z");
  now->set_temperature_c(81);
  now->set_power_w(612.5);
  now->set_power_limit_w(700);
  now->set_gpu_util_percent(97);
  now->set_memory_used_bytes(uint64_t{40} << 30);
  now->set_memory_total_bytes(uint64_t{80} << 30);
  now->set_ecc_corrected(3);
  for (int i = 0; i < 20; ++i) {
    auto* s = h.add_samples();
    s->set_time_ns(int64_t(i) * 1'000'000'000);
    s->set_time("2026-11-29T00:00:" + std::string(i < 10 ? "0" : "") +
                std::to_string(i) + ".000Z");
    s->set_temperature_c(60 + i);
    s->set_power_w(300 + 10 * i);
    s->set_gpu_util_percent(uint32_t(5 * i));
  }
  h.set_xid_errors(2);
  h.set_last_xid(48);
  auto* x = h.add_xids();
  x->set_time("2026-11-29T00:00:12.500Z");
  x->set_xid(48);
  auto r = tools::health_report(h, 3);
  INFO(r);
  CHECK(has(r, "device      cuda0 (cuda)"));
  CHECK(has(r, "status      degraded, circuit closed (opened 1 times), 2 "
               "losses, 2 restarts"));
  CHECK(has(r, "counters    NVML, every 1.0 s, 20 samples kept"));
  CHECK(has(r, "latest      81 C, 612.5 W of 700.0 W, 97% busy, memory "
               "40.0 GiB of 80.0 GiB (2026-11-29T00:00:19.000Z)"));
  CHECK(has(r, "ECC         3 corrected, 0 uncorrected"));
  CHECK(has(r, "Xids        2, the last 48"));
  CHECK(has(r, "2026-11-29T00:00:12.500Z  Xid 48"));
  CHECK(has(r, "over the last 19 s (20 samples)"));
  CHECK(has(r, "60 to 79 C"));
  CHECK(has(r, "300.0 to 490.0 W"));
  // The newest three, one per line.
  CHECK(has(r, "2026-11-29T00:00:19.000Z"));
  CHECK(has(r, "2026-11-29T00:00:17.000Z"));
  CHECK_FALSE(has(r, "2026-11-29T00:00:16.000Z"));
}

TEST_CASE("a health report of a device without counters says why",
          "[tools][health]") {
  pb::DeviceHealth h;
  h.set_device("cpu0");
  h.set_kind("cpu");
  h.set_status("available");
  h.set_circuit("closed");
  h.set_unavailable_reason("cpu0 has no health counters (cpu)");
  auto r = tools::health_report(h, 10);
  CHECK(has(r, "counters    none: cpu0 has no health counters (cpu)"));
  CHECK(has(r, "Xids        none"));
  CHECK_FALSE(has(r, "TIME"));
}
