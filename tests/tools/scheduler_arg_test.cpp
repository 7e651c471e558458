// --scheduler KEY=VALUE,...: CAF's scheduler from the command line, checked
// like the config's `scheduler` section; bad settings are exit 2.
#include <catch2/catch.hpp>

#include "config/compile.hpp"
#include "config/quotas.hpp"
#include "messages/errc.hpp"
#include "tests/tools/cli_fixture.hpp"
#include "tools/scheduler_arg.hpp"

using namespace cohort;
using namespace cohort::test;

TEST_CASE("--scheduler sets the fields it names over the config's",
          "[tools][cli]") {
  pb::RuntimeConfig cfg;
  cfg.mutable_scheduler()->set_threads(8);
  cfg.mutable_scheduler()->set_relaxed_sleep_us(500);
  REQUIRE_FALSE(tools::apply_scheduler_arg(
      cfg, "threads=3,moderate_sleep_us=0,policy=sharing"));
  auto& s = cfg.scheduler();
  CHECK(s.threads() == 3);
  CHECK(s.has_moderate_sleep_us());
  CHECK(s.moderate_sleep_us() == 0);
  CHECK(s.policy() == "sharing");
  CHECK(s.relaxed_sleep_us() == 500);
  CHECK_FALSE(config::check_config(cfg));
}

TEST_CASE("--scheduler refuses what is not a setting", "[tools][cli]") {
  auto refused = [](const std::string& arg) {
    pb::RuntimeConfig cfg;
    auto err = tools::apply_scheduler_arg(cfg, arg);
    if (!err)
      err = config::check_config(cfg);
    return err ? describe(err) : std::string{};
  };
  CHECK_THAT(refused(""), Catch::Contains("KEY=VALUE"));
  CHECK_THAT(refused("threads"), Catch::Contains("not KEY=VALUE"));
  CHECK_THAT(refused("=3"), Catch::Contains("not KEY=VALUE"));
  CHECK_THAT(refused("threads=3,"), Catch::Contains("not KEY=VALUE"));
  CHECK_THAT(refused("speed=3"), Catch::Contains("unknown setting 'speed'"));
  CHECK_THAT(refused("threads=-1"), Catch::Contains("non-negative integer"));
  CHECK_THAT(refused("threads=99999999999"), Catch::Contains("--scheduler"));
  CHECK_THAT(refused("threads=0"),
             Catch::Contains("threads is 0, not in 1..256"));
  CHECK_THAT(refused("threads=257"), Catch::Contains("not in 1..256"));
  CHECK_THAT(refused("moderate_steal_interval=0"),
             Catch::Contains("moderate_steal_interval is 0"));
  CHECK_THAT(refused("relaxed_sleep_us=0"),
             Catch::Contains("relaxed_sleep_us is 0"));
  CHECK_THAT(refused("moderate_sleep_us=1000001"),
             Catch::Contains("not in 0..1000000"));
  CHECK_THAT(refused("policy=fifo"), Catch::Contains("policy is 'fifo'"));
  CHECK_THAT(refused("policy=fifo"), Catch::Contains("\"caf_stealing\""));
  CHECK(refused("policy=caf_stealing").empty());
  CHECK(refused("policy=stealing").empty());
  CHECK_THAT(refused("policy=a\"b"), Catch::Contains("not a valid policy"));
}

TEST_CASE("cohort run, serve and chaos take --scheduler; bad ones are exit 2",
          "[tools][cli]") {
  temp_dir dir;
  std::string src = COHORT_SOURCE_DIR;
  auto demo = src + "/examples/pipelines/demo.textproto";
  auto ok = cohort_cli("run " + demo + " --no-progress --audit " +
                       dir.file("audit.log") +
                       " --scheduler threads=3,moderate_sleep_us=20");
  INFO(ok.output);
  CHECK(ok.status == 0);
  CHECK_THAT(ok.output, Catch::Contains("every item ended exactly once"));
  auto run_bad = cohort_cli("run " + demo + " --no-progress --audit " +
                            dir.file("b.log") + " --scheduler threads=0");
  CHECK(run_bad.status == 2);
  CHECK_THAT(run_bad.output, Catch::Contains("threads is 0"));
  auto serve_bad = cohort_cli("serve --for 1 --scheduler bogus=1");
  CHECK(serve_bad.status == 2);
  CHECK_THAT(serve_bad.output, Catch::Contains("unknown setting 'bogus'"));
  auto chaos_bad = cohort_cli("chaos " + src +
                              "/chaos/scenarios/oom_storm.textproto "
                              "--scheduler relaxed_sleep_us=0");
  CHECK(chaos_bad.status == 2);
  CHECK_THAT(chaos_bad.output, Catch::Contains("relaxed_sleep_us is 0"));
}
