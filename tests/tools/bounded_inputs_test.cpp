// Bounded inputs: every count and size of a runtime config, pipeline, chaos
// scenario and allocation plan is checked before anything is allocated, and
// every command refuses the same inputs with a clear message and exit 2.
#include <catch2/catch.hpp>

#include "actors/runtime.hpp"
#include "tests/runtime_fixture.hpp"
#include "tests/tools/cli_fixture.hpp"

using namespace cohort;
using test::cohort_cli;
using test::write;

namespace {

// A runtime config with one CPU worker, one simulated GPU whose settings are
// `sim`, and tenant "t" with `tenant` added.
std::string config_text(const std::string& sim, const std::string& tenant = "",
                        const std::string& rest = "") {
  return "devices { cpu_workers: 1 gpus: false sim_gpu { name: \"sim0\" " +
         sim + " } }\ntenant { tenant: \"t\" kernels: \"*\" devices: \"*\" " +
         tenant + " }\n" + rest;
}

} // namespace

TEST_CASE("every command refuses the same configs that are out of bounds",
          "[tools][cli]") {
  test::temp_dir dir;
  auto plan = std::string{COHORT_SOURCE_DIR} +
              "/examples/plans/training_peak.textproto";
  auto pipeline = write(dir, "p.textproto", R"(
tenant: "t"
batches: 2
stage { name: "s" kernel: REDUCE_SUM args { n: 64 } })");
  struct bad_config {
    std::string text;
    std::string says;
  };
  std::vector<bad_config> bad = {
      {config_text("memory_mib: 64 streams: 4294967295 speed: 1"),
       "streams is 4294967295, at most 64"},
      {"devices { cpu_workers: 1 gpus: false gpu_streams: 16 }\n"
       "tenant { tenant: \"t\" kernels: \"*\" devices: \"*\" }\n",
       "gpu_streams is 16, at most 15 are supported"},
      {config_text("memory_mib: 1073741824 streams: 2 speed: 1"),
       "memory_mib is 1073741824, at most 1048576"},
      {config_text("memory_mib: 64 streams: 2 speed: 1e-300"),
       "speed must be a finite number"},
      {config_text("memory_mib: 64 streams: 2 speed: inf"),
       "speed must be a finite number"},
      {config_text("memory_mib: 64 streams: 2 speed: 1 gflops: nan"),
       "gflops must be a finite number"},
      {config_text("memory_mib: 64 streams: 2 speed: 1",
                   "queue_timeout_ms: 4294967295"),
       "queue_timeout_ms is 4294967295 ms, at most 3600000"},
      {config_text("memory_mib: 64 streams: 2 speed: 1",
                   "max_inflight: 4000000000"),
       "max_inflight is 4000000000"},
      {config_text("memory_mib: 64 streams: 2 speed: 1", "weight: nan"),
       "weight must be a finite number"},
      {config_text("memory_mib: 64 streams: 2 speed: 1", "",
                   "supervision { degraded_penalty: nan }"),
       "degraded_penalty must be a finite number"},
      {config_text("memory_mib: 64 streams: 2 speed: 1", "",
                   "audit { keep_files: 3 }"),
       "keep_files is 3 but rotate_bytes is 0"},
  };
  for (size_t i = 0; i < bad.size(); ++i) {
    auto file = write(dir, "c" + std::to_string(i) + ".textproto", bad[i].text);
    for (auto cmd : {"devices --config " + file, "quota --config " + file,
                     "simulate " + plan + " --config " + file,
                     "run " + pipeline + " --no-progress --config " + file +
                         " --audit " + dir.file("a" + std::to_string(i)),
                     "serve --listen 127.0.0.1:0 --for 0.1 --config " + file +
                         " --audit " + dir.file("s" + std::to_string(i))}) {
      auto res = cohort_cli(cmd);
      INFO(cmd << "\n" << res.output);
      CHECK(res.status == 2);
      CHECK_THAT(res.output, Catch::Contains(bad[i].says));
    }
  }
}

TEST_CASE("pipelines out of bounds are refused before anything runs",
          "[tools][cli]") {
  test::temp_dir dir;
  struct bad_pipeline {
    std::string text;
    std::string says;
  };
  std::vector<bad_pipeline> bad = {
      {"batches: 1 stage { name: \"s\" kernel: 257 args { n: 4 } }",
       "names no kernel of the catalog (kernel 257)"},
      {"batches: 4000000000 stage { name: \"s\" kernel: REDUCE_SUM args { n: "
       "4 } }",
       "batches x stages is 4000000000 items, at most 10000000"},
      {"batches: 1 window: 4000000000 stage { name: \"s\" kernel: REDUCE_SUM "
       "args { n: 4 } }",
       "window is 4000000000, at most 65536"},
      {"batches: 1 stage { name: \"s\" kernel: AXPY args { alpha: nan n: 4 } }",
       "alpha must be a finite number"},
      {"batches: 1 stage { name: \"s\" kernel: GEMM args { m: 64 n: 64 k: 64 "
       "} gang: 1000 }",
       "a gang has at most 64 devices"},
      {"batches: 1 stage { name: \"s\" kernel: GEMM args { m: 67108864 n: "
       "67108864 k: 1 } }",
       "at most 1073741824 are allowed per item"},
      {"batches: 2 stage { name: \"s\" kernel: REDUCE_SUM args { n: 4 } } "
       "fault { device: \"sim0\" kind: LOSE after_batches: 5 }",
       "never happens"},
  };
  for (size_t i = 0; i < bad.size(); ++i) {
    auto file = write(dir, "p" + std::to_string(i) + ".textproto", bad[i].text);
    auto res = cohort_cli("run " + file + " --no-progress --audit " +
                          dir.file("a" + std::to_string(i)));
    INFO(bad[i].text << "\n" << res.output);
    CHECK(res.status == 2);
    CHECK_THAT(res.output, Catch::Contains(bad[i].says));
  }
}

TEST_CASE("chaos scenarios out of bounds are refused by the loader",
          "[tools][cli][chaos]") {
  test::temp_dir dir;
  auto runtime = R"(runtime {
  devices { cpu_workers: 1 gpus: false sim_gpu { name: "sim0" memory_mib: 64 streams: 2 speed: 1 } }
  tenant { tenant: "app" kernels: "*" devices: "*" }
})";
  struct bad_scenario {
    std::string text;
    std::string says;
  };
  std::vector<bad_scenario> bad = {
      {"load { tenant: \"app\" items: 4000000000 size: 64 }",
       "at most 1000000"},
      {"load { tenant: \"app\" items: 10 size: 64 submit_over_ms: 4294967295 }",
       "submit_over_ms is 4294967295 ms"},
      {"load { tenant: \"app\" items: 10 size: 64 } event { at_ms: 4294967295 "
       "device: \"sim0\" kind: LOSE }",
       "at most 3600000"},
      {"load { tenant: \"app\" items: 10 size: 64 } event { at_ms: 10 device: "
       "\"sim0\" kind: LOSE count: 3 every_ms: 2147483648 }",
       "its last repeat is 4294967306 ms"},
      {"load { tenant: \"app\" items: 10 size: 64 } event { at_ms: 10 device: "
       "\"sim0\" kind: SLOW_DOWN factor: -5 }",
       "SLOW_DOWN needs a finite factor"},
      {"load { tenant: \"app\" items: 10 size: 64 } event { at_ms: 10 device: "
       "\"sim0\" kind: SLOW_DOWN factor: nan }",
       "SLOW_DOWN needs a finite factor"},
      {"load { tenant: \"app\" items: 10 size: 64 } event { at_ms: 10 device: "
       "\"sim0\" kind: SLOW_DOWN factor: inf }",
       "SLOW_DOWN needs a finite factor"},
      {"load { tenant: \"mallory\" items: 10 size: 64 }",
       "tenant 'mallory', which the runtime grants nothing"},
      {"load { tenant: \"app\" items: 10 size: 64 } event { at_ms: 10 device: "
       "\"sim9\" kind: LOSE }",
       "no simulated GPU is named 'sim9'"},
  };
  for (size_t i = 0; i < bad.size(); ++i) {
    auto file =
        write(dir, "s" + std::to_string(i) + ".textproto",
              "name: \"x\"\n" + std::string{runtime} + "\n" + bad[i].text);
    auto res = cohort_cli("chaos " + file);
    INFO(bad[i].text << "\n" << res.output);
    CHECK(res.status == 2);
    CHECK_THAT(res.output, Catch::Contains(bad[i].says));
  }
}

TEST_CASE_METHOD(test::actor_fixture,
                 "a gemm whose output is too large is refused and the CPU "
                 "worker stays",
                 "[tools][actors]") {
  auto cfg = test::make_config(dir, 1, {});
  auto rt = actors::runtime::start(sys, cfg);
  REQUIRE(rt);
  work_item huge;
  huge.id = 1;
  huge.tenant = "t";
  huge.kernel = kernel_id::gemm;
  huge.args.m = huge.args.n = 67108864;
  huge.args.k = 1;
  huge.inputs.emplace_back(std::vector<float>(huge.args.m, 1.0f));
  huge.inputs.emplace_back(std::vector<float>(huge.args.n, 1.0f));
  auto res = (*rt)->run(std::move(huge));
  REQUIRE_FALSE(res);
  CHECK(code_of(res.error()) == errc::invalid_arguments);
  CHECK_THAT(describe(res.error()), Catch::Contains("allowed per item"));
  auto ok = (*rt)->run(test::gemv_item(2));
  CHECK(ok);
  auto stats = (*rt)->placement_stats();
  REQUIRE(stats);
  CHECK(stats->devices[0].losses == 0);
  CHECK(stats->devices[0].status == device_status::available);
}
