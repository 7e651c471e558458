// The quota actor and the config it compiles: grants and limits that cannot
// hold fail fast at start with a clear message; headroom and dry runs are
// answered from the live usage.
#include <catch2/catch.hpp>

#include "tests/runtime_fixture.hpp"
#include "tests/sizes.hpp"

using namespace cohort;
using namespace cohort::actors;
using namespace std::chrono_literals;

namespace {

using test::MiB;

using fixture = test::actor_fixture;

// Starts a runtime on `cfg` and returns why it refused to (empty if it
// started).
std::string start_error(caf::actor_system& sys, const pb::RuntimeConfig& cfg) {
  auto rt = runtime::start(sys, cfg);
  if (rt)
    return {};
  CHECK(code_of(rt.error()) == errc::malformed_config);
  return describe(rt.error());
}

pb::DeviceQuota* quota_on(pb::RuntimeConfig& cfg, const std::string& device,
                          uint64_t quota, uint64_t reserve = 0) {
  auto* q = cfg.mutable_tenant(0)->add_device_quota();
  q->set_device(device);
  q->set_memory_quota_bytes(quota);
  q->set_reserve_bytes(reserve);
  return q;
}

} // namespace

TEST_CASE_METHOD(fixture, "a config whose quotas cannot hold fails at start",
                 "[actors][quota]") {
  // cpu0, sim0 and sim1 of 1 GiB each.
  auto base = test::make_config(dir, 1, {{"sim0", 1}, {"sim1", 1}});
  auto cfg = base;
  CHECK(start_error(sys, cfg).empty());
  SECTION("a global quota above the memory of its devices") {
    cfg.mutable_tenant(0)->set_memory_quota_bytes(3 * 1024 * MiB);
    CHECK_THAT(start_error(sys, cfg),
               Catch::Contains("above the memory of its granted devices"));
  }
  SECTION("a device quota above the device's memory") {
    quota_on(cfg, "sim0", 2048 * MiB);
    CHECK_THAT(start_error(sys, cfg),
               Catch::Contains("on sim0 is above its memory"));
  }
  SECTION("a device quota on an unknown device") {
    quota_on(cfg, "gpu9", MiB);
    CHECK_THAT(start_error(sys, cfg), Catch::Contains("unknown device 'gpu9'"));
  }
  SECTION("a device quota on a CPU worker") {
    quota_on(cfg, "cpu0", MiB);
    CHECK_THAT(start_error(sys, cfg),
               Catch::Contains("a CPU worker has no device memory"));
  }
  SECTION("a device quota on a device the grant leaves out") {
    cfg.mutable_tenant(0)->clear_devices();
    cfg.mutable_tenant(0)->add_devices("sim0");
    quota_on(cfg, "sim1", MiB);
    CHECK_THAT(start_error(sys, cfg),
               Catch::Contains("which the grant does not include"));
  }
  SECTION("a reservation above its quota") {
    quota_on(cfg, "sim0", 10 * MiB, 20 * MiB);
    CHECK_THAT(start_error(sys, cfg),
               Catch::Contains("is above its quota there"));
  }
  SECTION("reservations that add up past a device") {
    quota_on(cfg, "sim0", 0, 700 * MiB);
    auto* other = cfg.add_tenant();
    other->CopyFrom(cfg.tenant(0));
    other->set_tenant("u");
    CHECK_THAT(start_error(sys, cfg),
               Catch::Contains("reservations on sim0 add up to"));
  }
  SECTION("an unknown kernel in a grant") {
    cfg.mutable_tenant(0)->add_kernels("fft");
    CHECK_THAT(start_error(sys, cfg), Catch::Contains("unknown kernel 'fft'"));
  }
  SECTION("a bad rate, fraction or pool setting") {
    cfg.mutable_tenant(0)->mutable_rate_limit()->set_items_per_second(-1);
    CHECK_THAT(start_error(sys, cfg), Catch::Contains("items_per_second"));
    cfg = base;
    cfg.mutable_limits()->set_device_memory_fraction(1.5);
    CHECK_THAT(start_error(sys, cfg),
               Catch::Contains("device_memory_fraction must lie in"));
    cfg = base;
    cfg.mutable_pool()->set_defrag_threshold(2);
    CHECK_THAT(start_error(sys, cfg), Catch::Contains("defrag_threshold"));
  }
  SECTION("more streams than the pool can order") {
    cfg.mutable_devices()->mutable_sim_gpu(0)->set_streams(32);
    CHECK_THAT(start_error(sys, cfg), Catch::Contains("at most 16"));
  }
}

TEST_CASE_METHOD(fixture, "reservations are taken when the runtime starts",
                 "[actors][quota][memory]") {
  auto cfg = test::make_config(dir, 0, {{"sim0", 1}});
  quota_on(cfg, "sim0", 0, 256 * MiB);
  auto rt = runtime::start(sys, cfg);
  REQUIRE(rt);
  auto mem = (*rt)->memory_stats();
  REQUIRE(mem);
  CHECK(mem->at(0).reserved == 256 * MiB);
  CHECK(mem->at(0).held >= 256 * MiB);
}

TEST_CASE_METHOD(fixture, "headroom follows what a tenant holds",
                 "[actors][quota]") {
  auto cfg = test::make_config(dir, 0, {{"sim0", 1}});
  auto* t = cfg.mutable_tenant(0);
  t->set_memory_quota_bytes(64 * MiB);
  quota_on(cfg, "sim0", 32 * MiB);
  // Its items never finish: stopping ends them at once.
  cfg.set_shutdown_drain_ms(1);
  auto rt = runtime::start(sys, cfg);
  REQUIRE(rt);
  auto idle = (*rt)->headroom("t");
  REQUIRE(idle);
  REQUIRE(idle->tenants.size() == 1);
  auto& h = idle->tenants[0];
  CHECK(h.memory_quota == 64 * MiB);
  CHECK(h.cpu_workers == 0);
  REQUIRE(h.devices.size() == 1);
  CHECK(h.devices[0].headroom == 32 * MiB);
  // Items held on a slow sim0 take from it.
  (*rt)->sim_device("sim0")->slow_down(1e6);
  caf::scoped_actor self{sys};
  auto sink = caf::actor_cast<client_sink>(self);
  auto bytes = item_bytes(test::gemv_item(1));
  for (int i = 0; i < 20; ++i) {
    auto busy = (*rt)->headroom("t");
    REQUIRE(busy);
    if (busy->tenants[0].devices[0].used > 0)
      break;
    self->send((*rt)->entry(), submit_atom::value, test::gemv_item(100 + i),
               sink);
    std::this_thread::sleep_for(10ms);
  }
  auto busy = (*rt)->headroom("t");
  REQUIRE(busy);
  auto& d = busy->tenants[0].devices[0];
  CHECK(d.used % bytes == 0);
  CHECK(d.used > 0);
  CHECK(d.headroom == 32 * MiB - d.used);
  CHECK(busy->tenants[0].memory == d.used);
  // Everything, and a tenant without a grant.
  CHECK((*rt)->headroom()->tenants.size() == 1);
  auto nobody = (*rt)->headroom("mallory");
  REQUIRE_FALSE(nobody);
  CHECK(code_of(nobody.error()) == errc::unknown_tenant);
}

TEST_CASE_METHOD(fixture, "a dry run answers without running anything",
                 "[actors][quota]") {
  auto cfg = test::make_config(dir, 1, {{"sim0", 1}});
  auto* t = cfg.mutable_tenant(0);
  t->set_memory_quota_bytes(600 * MiB);
  auto rt = runtime::start(sys, cfg);
  REQUIRE(rt);
  allocation_plan plan;
  plan.steps = {{"t", "sim0", 400 * MiB, "gemm", "a", ""},
                {"t", "sim0", 300 * MiB, "", "b", ""},  // over 600 MiB
                {"t", "cpu0", 1ull << 40, "", "c", ""}, // host memory
                {"", "", 0, "", "", "a"},               // free
                {"t", "sim0", 300 * MiB, "", "b", ""},  // fits now
                {"t", "sim0", 800 * MiB, "", "d", ""},  // device is full
                {"mallory", "sim0", 1, "", "", ""},     // no grant
                {"t", "sim9", 1, "", "", ""},           // no device
                {"t", "sim0", 1, "fft", "", ""},        // no kernel
                {"", "", 0, "", "", "zz"}};             // nothing to free
  auto rep = (*rt)->simulate(plan);
  REQUIRE(rep);
  REQUIRE(rep->steps.size() == plan.steps.size());
  std::vector<std::string> codes;
  for (auto& s : rep->steps)
    codes.push_back(s.ok ? "ok" : s.code);
  CHECK(codes == std::vector<std::string>{
                     "ok", "over_memory_quota", "ok", "ok", "ok",
                     "over_memory_quota", "unknown_tenant", "invalid_arguments",
                     "unknown_kernel", "invalid_arguments"});
  CHECK(rep->steps[1].soft);
  CHECK_FALSE(rep->ok());
  REQUIRE(rep->devices.size() == 1);
  CHECK(rep->devices[0].peak_used == 400 * MiB);
  CHECK(rep->devices[0].used == 300 * MiB);
  // Nothing ran.
  CHECK((*rt)->memory_stats()->at(1).allocations == 0);
}
