// `cohort run`'s engine and the command line: end-to-end pipelines and bad
// input.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <unistd.h>

#include "messages/convert.hpp"
#include "tests/json_fixture.hpp"
#include "tests/tools/cli_fixture.hpp"
#include "tools/pipeline.hpp"

using namespace cohort;
using test::cohort_cli;
using test::write;

namespace {

const char* pipeline_text = R"(
name: "test"
tenant: "t"
batches: 40
seed: 3
window: 16
stage { name: "a" kernel: AXPY args { alpha: 0.5 n: 3001 } }
stage { name: "g" kernel: GEMM args { m: 33 n: 17 k: 29 } }
stage { name: "s" kernel: INCLUSIVE_SCAN args { n: 999 } }
stage { name: "k" kernel: TOPK_COSINE args { m: 300 n: 16 k: 2 top_k: 7 } }
runtime {
  devices {
    cpu_workers: 2
    gpus: false
    sim_gpu { name: "sim0" memory_mib: 1024 streams: 2 speed: 1 }
    sim_gpu { name: "sim1" memory_mib: 1024 streams: 2 speed: 1 }
    sim_gpu { name: "sim2" memory_mib: 1024 streams: 2 speed: 2 }
    sim_gpu { name: "sim3" memory_mib: 1024 streams: 2 speed: 4 }
  }
  tenant { tenant: "t" kernels: "*" devices: "*" }
}
)";

} // namespace

TEST_CASE("a pipeline on CPU + 4 simulated GPUs runs, checks and audits",
          "[tools]") {
  test::temp_dir dir;
  system_config cfg;
  caf::actor_system sys{cfg};
  auto spec = load_pipeline(write(dir, "p.textproto", pipeline_text));
  REQUIRE(spec);
  spec->mutable_runtime()->set_audit_path(dir.file("audit.log"));
  auto r = tools::run_pipeline(sys, *spec, {});
  REQUIRE(r);
  CHECK(r->items == 160);
  CHECK(r->completed == 160);
  CHECK(r->mismatches == 0);
  CHECK(r->lost == 0);
  CHECK(r->duplicates == 0);
  CHECK(r->audit.ok);
  CHECK(r->audit.good_records >= 3 * 160);
  CHECK(r->ok());
  CHECK(r->placement.devices.size() == 6);
}

TEST_CASE("a pipeline with a device lost mid-run loses nothing", "[tools]") {
  test::temp_dir dir;
  system_config cfg;
  caf::actor_system sys{cfg};
  auto spec = load_pipeline(write(dir, "p.textproto", pipeline_text));
  REQUIRE(spec);
  spec->mutable_runtime()->set_audit_path(dir.file("audit.log"));
  for (auto dev : {"sim2", "sim3"}) {
    auto* f = spec->add_fault();
    f->set_device(dev);
    f->set_after_batches(10);
    f->set_kind(pb::LOSE_PERMANENTLY);
  }
  auto r = tools::run_pipeline(sys, *spec, {});
  REQUIRE(r);
  CHECK(r->completed == 160);
  CHECK(r->lost == 0);
  CHECK(r->duplicates == 0);
  CHECK(r->mismatches == 0);
  CHECK(r->faults.size() == 2);
  CHECK(r->ok());
}

TEST_CASE("chained stages run as one item and keep their data on the device",
          "[tools]") {
  test::temp_dir dir;
  system_config cfg;
  caf::actor_system sys{cfg};
  auto spec = load_pipeline(write(dir, "c.textproto", R"(
name: "chained"
tenant: "t"
batches: 30
window: 8
stage { name: "scale" kernel: AXPY args { alpha: 0.5 n: 4096 } priority: 3 }
stage { name: "prefix" kernel: INCLUSIVE_SCAN args { n: 4096 } chain: true }
stage { name: "total" kernel: REDUCE_SUM args { n: 4096 } chain: true }
stage { name: "product" kernel: GEMM args { m: 32 n: 24 k: 16 } }
stage { name: "project" kernel: GEMV args { m: 32 n: 24 } chain: true }
stage { name: "similar" kernel: DOT args { n: 32 } chain: true chain_input: 1 }
fault { device: "sim1" after_batches: 10 kind: LOSE_PERMANENTLY }
runtime {
  devices {
    cpu_workers: 1
    gpus: false
    sim_gpu { name: "sim0" memory_mib: 1024 streams: 2 speed: 1 }
    sim_gpu { name: "sim1" memory_mib: 1024 streams: 2 speed: 4 }
  }
  tenant { tenant: "t" kernels: "*" devices: "*" }
}
)"));
  REQUIRE(spec);
  spec->mutable_runtime()->set_audit_path(dir.file("audit.log"));
  auto r = tools::run_pipeline(sys, *spec, {});
  REQUIRE(r);
  // Two items per batch: scale -> prefix -> total, product -> project ->
  // similar.
  CHECK(r->items == 60);
  CHECK(r->completed == 60);
  CHECK(r->mismatches == 0);
  CHECK(r->lost == 0);
  CHECK(r->duplicates == 0);
  CHECK(r->ok());
}

TEST_CASE("cohort run: bad chains are refused with the stage named",
          "[tools][cli]") {
  test::temp_dir dir;
  auto first = cohort_cli("run " + write(dir, "f.textproto", R"(
batches: 1
stage { name: "x" kernel: NRM2 args { n: 8 } chain: true })"));
  CHECK(first.status == 2);
  CHECK_THAT(first.output, Catch::Contains("'x' is chained, but no stage"));
  auto size = cohort_cli("run " + write(dir, "s.textproto", R"(
batches: 1
stage { name: "a" kernel: AXPY args { n: 8 } }
stage { name: "b" kernel: GEMV args { m: 3 n: 5 } chain: true chain_input: 1 })"));
  CHECK(size.status == 2);
  CHECK_THAT(size.output, Catch::Contains("'a' -> 'b'"));
  CHECK_THAT(size.output, Catch::Contains("x must have n = 5 elements, got 8"));
  auto topk = cohort_cli("run " + write(dir, "t.textproto", R"(
batches: 1
stage { name: "k" kernel: TOPK_COSINE args { m: 4 n: 2 k: 1 top_k: 2 } }
stage { name: "r" kernel: REDUCE_SUM args { n: 2 } chain: true })"));
  CHECK(topk.status == 2);
  CHECK_THAT(topk.output, Catch::Contains("must be the last stage"));
  // A chained stage runs in the first stage's item, with its priority.
  auto priority = cohort_cli("run " + write(dir, "p.textproto", R"(
batches: 1
stage { name: "a" kernel: AXPY args { n: 8 } priority: 2 }
stage { name: "b" kernel: REDUCE_SUM args { n: 8 } chain: true priority: 5 })"));
  CHECK(priority.status == 2);
  CHECK_THAT(priority.output,
             Catch::Contains("stage 'b': a chained stage runs in the first "
                             "stage's item, with its priority"));
}

TEST_CASE("cohort run: the example pipeline passes", "[tools][cli]") {
  test::temp_dir dir;
  auto res = cohort_cli(std::string{"run "} + COHORT_SOURCE_DIR +
                        "/examples/pipelines/demo.textproto --no-progress" +
                        " --audit " + dir.file("demo.log"));
  INFO(res.output);
  CHECK(res.status == 0);
  CHECK_THAT(res.output, Catch::Contains("match the CPU reference"));
  CHECK_THAT(res.output, Catch::Contains("audit chain        verified"));
  CHECK_THAT(res.output, Catch::Contains("simulated"));
  // Each simulated GPU's memory: every launch gave its block back, zeroed.
  CHECK_THAT(res.output, Catch::Contains("peak used"));
  CHECK_THAT(res.output, Catch::Contains("yes  none"));
  CHECK_THAT(res.output, !Catch::Contains("LEAKED"));
  auto verify = cohort_cli("audit verify " + dir.file("demo.log"));
  CHECK(verify.status == 0);
  CHECK_THAT(verify.output, Catch::Contains("OK"));
}

TEST_CASE("cohort run: bad input gives a clear message and a nonzero exit",
          "[tools][cli]") {
  test::temp_dir dir;
  auto missing = cohort_cli("run " + dir.file("nope.textproto"));
  CHECK(missing.status == 2);
  CHECK_THAT(missing.output, Catch::Contains("cannot open"));

  auto garbled = cohort_cli(
      "run " + write(dir, "bad.textproto", "name: \"x\"\nbatches: [oops\n"));
  CHECK(garbled.status == 2);
  CHECK_THAT(garbled.output, Catch::Contains("malformed_pipeline"));
  CHECK_THAT(garbled.output, Catch::Contains("line 2"));

  auto unknown_kernel = cohort_cli(
      "run " + write(dir, "k.textproto",
                     "batches: 1 stage { kernel: FFT args { n: 4 } }"));
  CHECK(unknown_kernel.status == 2);
  CHECK_THAT(unknown_kernel.output, Catch::Contains("FFT"));

  auto sizes = cohort_cli(
      "run " + write(dir, "s.textproto",
                     "batches: 1 stage { name: \"t\" kernel: TOPK_COSINE "
                     "args { m: 10 n: 4 top_k: 11 } }"));
  CHECK(sizes.status == 2);
  CHECK_THAT(sizes.output, Catch::Contains("top_k must be in 1..m = 10"));

  auto no_stage = cohort_cli("run " + write(dir, "e.textproto", "batches: 3"));
  CHECK(no_stage.status == 2);
  CHECK_THAT(no_stage.output, Catch::Contains("at least one stage"));

  std::string stranger = std::string{pipeline_text};
  stranger.replace(stranger.find("tenant: \"t\""), 11, "tenant: \"mallory\"");
  auto tenant = cohort_cli("run " + write(dir, "u.textproto", stranger) +
                           " --no-progress --audit " + dir.file("u.log"));
  CHECK(tenant.status == 1);
  CHECK_THAT(tenant.output, Catch::Contains("160 rejected"));
  CHECK_THAT(tenant.output, Catch::Contains("'mallory' has no grant"));
  CHECK_THAT(tenant.output, Catch::Contains("0 lost"));

  std::string tight = std::string{pipeline_text};
  tight.replace(tight.find("devices: \"*\" }"), 15,
                "devices: \"*\" memory_quota_bytes: 1000 }");
  auto quota = cohort_cli("run " + write(dir, "q.textproto", tight) +
                          " --no-progress --audit " + dir.file("q.log"));
  CHECK(quota.status == 1);
  CHECK_THAT(quota.output, Catch::Contains("over_memory_quota=160"));

  auto bad_config = cohort_cli(
      "run " + write(dir, "p.textproto", pipeline_text) + " --config " +
      write(dir, "c.textproto", "tenant { tenant: \"t\" kernels: \"fft\" }"));
  CHECK(bad_config.status == 2);
  CHECK_THAT(bad_config.output, Catch::Contains("unknown kernel 'fft'"));

  CHECK(cohort_cli("frobnicate").status == 2);
  CHECK(cohort_cli("run").status == 2);
}

TEST_CASE("cohort audit verify names the first bad record", "[tools][cli]") {
  test::temp_dir dir;
  auto log = dir.file("a.log");
  cohort_cli("run " + write(dir, "p.textproto", pipeline_text) +
             " --no-progress --audit " + log);
  std::string bytes;
  {
    std::ifstream in{log, std::ios::binary};
    bytes.assign(std::istreambuf_iterator<char>{in}, {});
  }
  REQUIRE(bytes.size() > 2000);
  bytes[1000] ^= 0x20;
  std::ofstream{log, std::ios::binary | std::ios::trunc} << bytes;
  auto res = cohort_cli("audit verify " + log);
  CHECK(res.status == 1);
  CHECK_THAT(res.output, Catch::Contains("BROKEN at record"));
  CHECK(cohort_cli("audit verify " + dir.file("absent.log")).status == 2);
}

TEST_CASE("cohort devices lists CPU workers and simulated GPUs",
          "[tools][cli]") {
  auto res = cohort_cli("devices");
  CHECK(res.status == 0);
  CHECK_THAT(res.output, Catch::Contains("cpu0"));
  CHECK_THAT(res.output, Catch::Contains("NUMA"));
  CHECK_THAT(res.output, Catch::Contains("sim3"));
  CHECK_THAT(res.output, Catch::Contains("SIMULATED"));
  CHECK_THAT(res.output, Catch::Contains("16.0 GiB"));
}

TEST_CASE("cohort run: an audit log in use by another writer is refused, and "
          "a shared log counts only this run",
          "[tools][cli]") {
  test::temp_dir dir;
  auto log = dir.file("shared.log");
  auto spec = write(dir, "p.textproto", R"(
batches: 3
stage { name: "s" kernel: REDUCE_SUM args { n: 1024 } })");
  {
    // Another writer holds the log.
    auto holder = audit::audit_log::open(log, 8);
    REQUIRE(holder);
    auto res = cohort_cli("run " + spec + " --no-progress --audit " + log);
    INFO(res.output);
    CHECK(res.status == 2);
    CHECK_THAT(res.output, Catch::Contains("in use by another writer"));
  }
  auto first = cohort_cli("run " + spec + " --no-progress --audit " + log);
  INFO(first.output);
  CHECK(first.status == 0);
  auto second = cohort_cli("run " + spec + " --no-progress --audit " + log);
  INFO(second.output);
  CHECK(second.status == 0);
  // The second run verifies the whole chain and counts its own records.
  auto total = audit::audit_log::verify(log).good_records;
  auto at = second.output.find("audit chain        verified: ");
  REQUIRE(at != std::string::npos);
  unsigned long long all = 0, mine = 0;
  REQUIRE(std::sscanf(second.output.c_str() + at,
                      "audit chain        verified: %llu records in %*s "
                      "(%llu from this run)",
                      &all, &mine) == 2);
  CHECK(all == total);
  CHECK(mine > 0);
  CHECK(mine < all);
}

TEST_CASE("cohort run --trace writes the run's timeline; a trace file that "
          "cannot be written is refused before anything runs",
          "[tools][cli][trace]") {
  test::temp_dir dir;
  auto spec = write(dir, "p.textproto", pipeline_text);
  auto trace = dir.file("run.json");
  auto res = cohort_cli("run " + spec + " --no-progress --audit " +
                        dir.file("a.log") + " --trace " + trace);
  INFO(res.output);
  REQUIRE(res.status == 0);
  CHECK_THAT(res.output, Catch::Contains("trace written      " + trace));
  std::ifstream in{trace};
  std::string text{std::istreambuf_iterator<char>{in}, {}};
  auto doc = test::parse_json(text);
  auto events = test::trace_events(doc);
  // 40 batches of 4 stages: a launch each, on the devices of the config.
  size_t launches = 0, waits = 0;
  for (auto& e : events) {
    launches += test::text_of(e, "ph") == "X";
    waits += test::text_of(e, "ph") == "b";
  }
  CHECK(launches >= 160);
  CHECK(waits >= 160);
  auto names = test::process_names(events);
  CHECK(std::count(names.begin(), names.end(), "sim3 (simulated GPU)") == 1);
  CHECK(std::count(names.begin(), names.end(), "cpu1 (CPU worker)") == 1);

  // A small bound: the rest is counted and said.
  auto small =
      cohort_cli("run " + spec + " --no-progress --audit " + dir.file("b.log") +
                 " --trace " + dir.file("small.json") + " --trace-events 10");
  CHECK(small.status == 0);
  CHECK_THAT(small.output, Catch::Contains("10 events, "));
  CHECK_THAT(small.output,
             Catch::Contains("more not kept past --trace-events"));

  // Nowhere to write: exit 2 and nothing ran (no audit log was made).
  auto nowhere =
      cohort_cli("run " + spec + " --no-progress --audit " + dir.file("c.log") +
                 " --trace " + dir.file("missing/dir/t.json"));
  CHECK(nowhere.status == 2);
  CHECK_THAT(nowhere.output, Catch::Contains("--trace: cannot write"));
  CHECK_FALSE(std::filesystem::exists(dir.file("c.log")));
  auto zero = cohort_cli("run " + spec + " --no-progress --trace " +
                         dir.file("z.json") + " --trace-events 0");
  CHECK(zero.status == 2);
  CHECK_FALSE(std::filesystem::exists(dir.file("z.json")));
}

TEST_CASE("cohort run --report-html writes the report as a page whose plots "
          "a browser draws",
          "[tools][cli][trace]") {
  test::temp_dir dir;
  auto spec = write(dir, "p.textproto", pipeline_text);
  auto page = dir.file("report.html");
  auto res = cohort_cli("run " + spec + " --no-progress --audit " +
                        dir.file("a.log") + " --report-html " + page);
  INFO(res.output);
  REQUIRE(res.status == 0);
  CHECK_THAT(res.output, Catch::Contains("report written     " + page));
  std::ifstream in{page};
  std::string text{std::istreambuf_iterator<char>{in}, {}};
  CHECK_THAT(text, Catch::Contains("<title>cohort run: test</title>"));
  CHECK_THAT(text, Catch::Contains("OK: every item ended exactly once"));
  CHECK_THAT(text, Catch::Contains("<td>sim3</td><td>sim (simulated)</td>"));
  CHECK_THAT(text, Catch::Contains("\"name\":\"sim3 (simulated)\""));
  // The page is drawn by its own script, which a browser runs.
  const char* browser = "/usr/bin/chromium-headless-shell";
  if (::access(browser, X_OK) != 0) {
    WARN("skipped: no headless browser at "
         << browser << " (./dev.sh setup installs chromium-headless-shell)");
    return;
  }
  auto dom = test::run_command(
      std::string{"timeout 120 "} + browser +
      " --no-sandbox --disable-gpu --dump-dom file://" + page + " 2>/dev/null");
  REQUIRE(dom.status == 0);
  CHECK_THAT(dom.output, Catch::Contains("data-drawn=\"3\""));
  CHECK_THAT(dom.output, !Catch::Contains("data-error=\""));
  auto count = [&](const std::string& what) {
    size_t n = 0;
    for (auto at = dom.output.find(what); at != std::string::npos;
         at = dom.output.find(what, at + 1))
      ++n;
    return n;
  };
  // Six devices, a line each in two plots; a bar per latency bucket.
  CHECK(count("class=\"series\"") == 12);
  CHECK(count("class=\"bar\"") == 17);
  CHECK(count("data-device=\"sim3 (simulated)\"") == 2);

  // Nowhere to write it: exit 2 before anything runs.
  auto nowhere =
      cohort_cli("run " + spec + " --no-progress --audit " + dir.file("b.log") +
                 " --report-html " + dir.file("missing/r.html"));
  CHECK(nowhere.status == 2);
  CHECK_THAT(nowhere.output, Catch::Contains("--report-html: cannot write"));
  CHECK_FALSE(std::filesystem::exists(dir.file("b.log")));
}

TEST_CASE("a device that joins during a run joins the report's plots, zero "
          "before it joined",
          "[tools][pipeline][rescan]") {
  auto dev = [](const std::string& name) {
    device_info d;
    d.name = name;
    d.streams = 1;
    return d;
  };
  auto stats = [](std::vector<int64_t> busy) {
    balancer_stats st;
    for (auto b : busy) {
      device_stats d;
      d.busy_ns = b;
      d.queued = 1;
      st.devices.push_back(d);
    }
    return st;
  };
  tools::run_timeline tl;
  tl.set_devices({dev("sim0")});
  tl.add(1.0, stats({500'000'000}));
  // sim1 joined: the balancer counts it before the timeline does.
  tl.add(2.0, stats({1'000'000'000, 0}));
  REQUIRE(tl.devices() == 1);
  tl.grow({dev("sim0"), dev("sim1")});
  REQUIRE(tl.devices() == 2);
  tl.add(3.0, stats({1'000'000'000, 1'000'000'000}));
  CHECK(tl.size() == 3);
  auto util = tl.utilization();
  REQUIRE(util.size() == 2);
  CHECK(util[0] == std::vector<double>{0.5, 0.5, 0.0});
  CHECK(util[1] == std::vector<double>{0.0, 0.0, 1.0});
  REQUIRE(tl.queued().size() == 2);
  CHECK(tl.queued()[1] == std::vector<uint64_t>{0, 0, 1});
  CHECK(tl.names().size() == 2);
  // A stale sample with fewer devices than it knows is left out.
  tl.add(4.0, stats({1'000'000'000}));
  CHECK(tl.size() == 3);
}
