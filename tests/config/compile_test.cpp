// The config compiled once: bounds first, then each section, the same
// verdict for every caller.
#include <catch2/catch.hpp>

#include <type_traits>

#include "actors/audit_log.hpp"
#include "actors/config_check.hpp"
#include "actors/runtime.hpp"
#include "config/compile.hpp"
#include "messages/errc.hpp"

using namespace cohort;

TEST_CASE("a default config compiles into every part's settings",
          "[config]") {
  auto cfg = actors::default_config();
  cfg.set_max_attempts(7);
  cfg.mutable_supervision()->set_restart_delay_ms(30);
  cfg.mutable_alerts()->set_vram_high_fraction(0.5);
  auto s = config::compile(cfg);
  REQUIRE(s);
  CHECK(s->balancer.max_attempts == 7);
  CHECK(s->supervisor.restart_delay == std::chrono::milliseconds{30});
  CHECK(s->alerts.vram_high_fraction == 0.5);
  CHECK(s->audit_path == "cohort-audit.log");
  cfg.set_audit_path("/tmp/elsewhere.log");
  CHECK(config::compile(cfg)->audit_path == "/tmp/elsewhere.log");
  CHECK_FALSE(config::check_config(cfg));
}

TEST_CASE("compile checks the bounds before the sections and names the first "
          "problem",
          "[config]") {
  auto cfg = actors::default_config();
  cfg.set_max_attempts(5000);
  // Also a bad section: the bound is reported.
  cfg.mutable_alerts()->set_vram_high_fraction(2);
  auto s = config::compile(cfg);
  REQUIRE_FALSE(s);
  CHECK(code_of(s.error()) == errc::malformed_config);
  CHECK_THAT(describe(s.error()), Catch::Contains("max_attempts"));
  cfg.set_max_attempts(0);
  s = config::compile(cfg);
  REQUIRE_FALSE(s);
  CHECK_THAT(describe(s.error()), Catch::Contains("alerts.vram_high_fraction"));
  CHECK(code_of(config::check_config(cfg)) == errc::malformed_config);
  cfg.mutable_alerts()->set_vram_high_fraction(0);
  cfg.mutable_supervision()->set_restart_delay_ms(100);
  cfg.mutable_supervision()->set_max_restart_delay_ms(10);
  s = config::compile(cfg);
  REQUIRE_FALSE(s);
  CHECK_THAT(describe(s.error()), Catch::Contains("supervision:"));
}

TEST_CASE("the grants and pools compile for the devices at hand",
          "[config]") {
  auto cfg = actors::default_config();
  std::vector<device_info> devices(2);
  devices[0].name = "cpu0";
  devices[0].kind = device_kind::cpu;
  devices[1].name = "sim0";
  devices[1].kind = device_kind::sim_gpu;
  devices[1].simulated = true;
  devices[1].memory_bytes = 1ull << 30;
  auto f = config::compile_fleet(cfg, devices);
  REQUIRE(f);
  CHECK(f->pools.size() == 2);
  CHECK(f->lease.devices.size() == 2);
  CHECK_FALSE(f->lease.devices[0].has_memory);
  CHECK(f->lease.devices[1].has_memory);
  CHECK(f->lease.devices[1].limit == 1ull << 30);
  CHECK(f->lease.policies.size() == size_t(cfg.tenant_size()));
  cfg.mutable_tenant(0)->add_kernels("no_such_kernel");
  auto bad = config::compile_fleet(cfg, devices);
  REQUIRE_FALSE(bad);
  CHECK_THAT(describe(bad.error()), Catch::Contains("no_such_kernel"));
}

TEST_CASE("the documented entry points keep their names: "
          "actors::check_config and actors::audit_log",
          "[config]") {
  static_assert(
      std::is_same_v<cohort::actors::audit_log, cohort::audit::audit_log>);
  auto cfg = actors::default_config();
  CHECK_FALSE(actors::check_config(cfg));
  cfg.set_max_attempts(actors::config_bounds::max_attempts + 1);
  CHECK(describe(actors::check_config(cfg)) ==
        describe(config::check_config(cfg)));
  CHECK(code_of(actors::check_config(cfg)) == errc::malformed_config);
}
