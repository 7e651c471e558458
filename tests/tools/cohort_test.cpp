// `cohort quota` and `cohort simulate`: what a config grants, headroom, dry
// runs of allocation plans, and clear errors with exit 2 for bad input.
#include <catch2/catch.hpp>

#include "tests/tools/cli_fixture.hpp"

using namespace cohort;
using test::cohort_cli;
using test::write;

namespace {

std::string example_plan() {
  return std::string{COHORT_SOURCE_DIR} +
         "/examples/plans/training_peak.textproto";
}

const char* small_plan = R"(
name: "fits"
runtime {
  devices { cpu_workers: 1 gpus: false
            sim_gpu { name: "sim0" memory_mib: 64 streams: 1 speed: 1 } }
  tenant { tenant: "t" kernels: "*" devices: "*" memory_quota_bytes: 33554432 }
}
step { tenant: "t" device: "sim0" bytes: 16777216 label: "a" }
step { tenant: "t" device: "sim0" bytes: 16777216 label: "b" }
step { free: "a" }
step { tenant: "t" device: "sim0" bytes: 16777216 }
)";

} // namespace

TEST_CASE("cohort quota shows grants, reservations and headroom",
          "[tools][cli]") {
  auto res = cohort_cli("quota --config " + example_plan());
  INFO(res.output);
  CHECK(res.status == 0);
  CHECK_THAT(res.output, Catch::Contains("tenant train"));
  CHECK_THAT(res.output, Catch::Contains("tenant serve"));
  CHECK_THAT(res.output, Catch::Contains("SIMULATED"));
  // train: 768 MiB quota and 512 MiB reserved on sim0.
  CHECK_THAT(res.output,
             Catch::Contains("sim0      768.0 MiB  512.0 MiB      768.0 MiB"));
  // serve: 256 MiB across devices caps its headroom everywhere.
  CHECK_THAT(res.output,
             Catch::Contains("sim1              -          -      256.0 MiB"));
  CHECK_THAT(res.output, Catch::Contains("cpu_fallback"));
  auto one = cohort_cli("quota --tenant serve --config " + example_plan());
  CHECK(one.status == 0);
  CHECK_THAT(one.output, !Catch::Contains("tenant train"));
}

TEST_CASE("cohort quota refuses bad input with exit 2", "[tools][cli]") {
  test::temp_dir dir;
  auto nobody = cohort_cli("quota --tenant nobody");
  CHECK(nobody.status == 2);
  CHECK_THAT(nobody.output, Catch::Contains("unknown_tenant"));
  auto big = cohort_cli(
      "quota --config " +
      write(dir, "big.textproto",
            "devices { cpu_workers: 1 gpus: false sim_gpu { name: \"sim0\" "
            "memory_mib: 64 streams: 1 speed: 1 } }\n"
            "tenant { tenant: \"t\" kernels: \"*\" devices: \"*\" "
            "device_quota { device: \"sim0\" memory_quota_bytes: "
            "1073741824 } }\n"));
  CHECK(big.status == 2);
  CHECK_THAT(big.output, Catch::Contains("is above its memory"));
  auto garbled = cohort_cli("quota --config " +
                            write(dir, "g.textproto", "tenant { nope: 1 }\n"));
  CHECK(garbled.status == 2);
  CHECK_THAT(garbled.output, Catch::Contains("line 1"));
}

TEST_CASE("cohort simulate reports each step of a plan", "[tools][cli]") {
  auto res = cohort_cli("simulate " + example_plan());
  INFO(res.output);
  CHECK(res.status == 1);
  CHECK_THAT(res.output, Catch::Contains("dry run, nothing runs"));
  CHECK_THAT(
      res.output,
      Catch::Contains("REFUSED (soft) over_memory_quota: tenant 'serve'"));
  CHECK_THAT(res.output, Catch::Contains("REFUSED out_of_memory: sim1"));
  CHECK_THAT(res.output, Catch::Contains("3 step(s) would be refused"));
  test::temp_dir dir;
  auto ok = cohort_cli("simulate " + write(dir, "ok.textproto", small_plan));
  INFO(ok.output);
  CHECK(ok.status == 0);
  CHECK_THAT(ok.output, Catch::Contains("every step fits"));
  CHECK_THAT(ok.output, Catch::Contains("t=32.0 MiB"));
}

TEST_CASE("cohort simulate refuses bad plans with exit 2", "[tools][cli]") {
  test::temp_dir dir;
  auto missing = cohort_cli("simulate " + dir.file("absent.textproto"));
  CHECK(missing.status == 2);
  CHECK_THAT(missing.output, Catch::Contains("cannot open"));
  auto empty =
      cohort_cli("simulate " + write(dir, "e.textproto", "name: \"x\"\n"));
  CHECK(empty.status == 2);
  CHECK_THAT(empty.output, Catch::Contains("at least one step"));
  auto half = cohort_cli("simulate " +
                         write(dir, "h.textproto", "step { bytes: 5 }\n"));
  CHECK(half.status == 2);
  CHECK_THAT(half.output, Catch::Contains("needs a tenant and a device"));
  auto garbled = cohort_cli("simulate " +
                            write(dir, "g.textproto", "step { tenant: 3x }\n"));
  CHECK(garbled.status == 2);
  CHECK_THAT(garbled.output, Catch::Contains("column"));
  // A step that names a tenant without a grant is a refusal, not bad input.
  auto stranger = cohort_cli(
      "simulate " +
      write(dir, "s.textproto",
            "step { tenant: \"mallory\" device: \"sim0\" bytes: 1 }\n"));
  CHECK(stranger.status == 1);
  CHECK_THAT(stranger.output, Catch::Contains("unknown_tenant"));
}

TEST_CASE("cohort chaos runs scenarios and checks their invariants",
          "[tools][cli]") {
  test::temp_dir dir;
  auto scenario = std::string{COHORT_SOURCE_DIR} +
                  "/chaos/scenarios/sticky_error.textproto";
  auto res = cohort_cli("chaos " + scenario + " --verbose --audit-dir " +
                        dir.path.string());
  INFO(res.output);
  CHECK(res.status == 0);
  CHECK_THAT(res.output, Catch::Contains("sticky_error"));
  CHECK_THAT(res.output, Catch::Contains("at 120 ms sim3: STICKY_ERROR"));
  CHECK_THAT(res.output, Catch::Contains("0 lost, 0 duplicated, 0 wrong"));
  CHECK_THAT(res.output, Catch::Contains("every invariant held"));
  // The audit log it kept verifies, and shows the recovery.
  auto log = dir.file("sticky_error-0.log");
  auto show = cohort_cli("audit show " + log);
  INFO(show.output);
  CHECK(show.status == 0);
  CHECK_THAT(show.output, Catch::Contains("recreating the context"));
  CHECK_THAT(show.output, Catch::Contains(": OK, "));
}

TEST_CASE("cohort chaos refuses bad input with exit 2", "[tools][cli]") {
  test::temp_dir dir;
  auto missing = cohort_cli("chaos " + dir.file("absent.textproto"));
  CHECK(missing.status == 2);
  CHECK_THAT(missing.output, Catch::Contains("cannot open"));
  auto none = cohort_cli("chaos");
  CHECK(none.status == 2);
  auto empty_dir = cohort_cli("chaos " + dir.path.string());
  CHECK(empty_dir.status == 2);
  CHECK_THAT(empty_dir.output, Catch::Contains("no .textproto scenario"));
  auto bad_seed = cohort_cli("chaos " + std::string{COHORT_SOURCE_DIR} +
                             "/chaos/scenarios --seed -3");
  CHECK(bad_seed.status == 2);
  CHECK_THAT(bad_seed.output, Catch::Contains("--seed needs a positive"));
  auto no_load = cohort_cli(
      "chaos " + write(dir, "s.textproto", "name: \"x\"\n"));
  CHECK(no_load.status == 2);
  CHECK_THAT(no_load.output, Catch::Contains("it has no load"));
}
