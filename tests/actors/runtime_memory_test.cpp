// A property test of device memory under the whole runtime: random tenants
// (quotas global and per device, reservations, in-flight caps, policies),
// random item sizes and concurrency on four small simulated GPUs. An
// observer inside every device's memory stack checks each allocation as it
// happens: no device past its limit, no tenant past a quota, no block
// overlapping another, and freed memory reads back as zero before anyone
// gets it again. Every item still ends exactly once with a correct result.
#include <catch2/catch.hpp>

#include <random>

#include "chaos/quota_observer.hpp"
#include "devices/sim/sim_device.hpp"
#include "tests/runtime_fixture.hpp"
#include "tests/sizes.hpp"

using namespace cohort;
using namespace cohort::actors;

namespace {

using test::MiB;

// The chaos harness's observer checks every allocation of every device
// against the limits it was told.
using invariant_observer = chaos::quota_observer;

work_item random_item(std::mt19937_64& rng, uint64_t id,
                      const std::string& tenant) {
  work_item item;
  item.id = id;
  item.tenant = tenant;
  auto pick = rng() % 3;
  if (pick == 0) {
    item.kernel = kernel_id::gemv;
    item.args.m = 8 + rng() % 600;
    item.args.n = 8 + rng() % 600;
    item.inputs.emplace_back(
        kernels::random_floats(id, item.args.m * item.args.n));
    item.inputs.emplace_back(kernels::random_floats(id + 7, item.args.n));
  } else if (pick == 1) {
    item.kernel = kernel_id::axpy;
    item.args.alpha = 0.5f;
    auto n = 1 + rng() % 200000;
    item.inputs.emplace_back(kernels::random_floats(id, n));
    item.inputs.emplace_back(kernels::random_floats(id + 7, n));
  } else {
    item.kernel = kernel_id::inclusive_scan;
    item.inputs.emplace_back(kernels::random_floats(id, 1 + rng() % 300000));
  }
  return item;
}

} // namespace

TEST_CASE("device memory holds its invariants under random tenants and load",
          "[actors][memory][property]") {
  auto seed = GENERATE(11u, 22u, 33u);
  INFO("seed " << seed);
  std::mt19937_64 rng{seed};
  test::temp_dir dir;
  system_config sys_cfg;
  caf::actor_system sys{sys_cfg};
  auto obs = std::make_shared<invariant_observer>();
  // Four small simulated GPUs, each 8 MiB, with the observer inside.
  std::vector<std::shared_ptr<devices::device>> sims;
  for (int i = 0; i < 4; ++i) {
    devices::sim::sim_params p;
    p.name = "sim" + std::to_string(i);
    p.memory_bytes = 8 * MiB;
    p.streams = 2;
    p.speed = 1 + double(rng() % 4);
    p.memory.observer = obs;
    auto d = devices::sim::make_sim_device(p);
    REQUIRE(d);
    obs->device_limit[p.name] = p.memory_bytes;
    sims.push_back(*d);
  }
  pb::RuntimeConfig cfg;
  cfg.mutable_devices()->set_cpu_workers(1);
  cfg.mutable_devices()->set_gpus(false);
  cfg.set_audit_path(dir.file("audit.log"));
  cfg.set_max_attempts(8);
  // Small slabs: many blocks per slab, so that reuse and coalescing happen.
  cfg.mutable_pool()->set_slab_mib(2);
  std::vector<std::string> tenants{"a", "b", "c", "d"};
  for (size_t t = 0; t < tenants.size(); ++t) {
    auto* g = cfg.add_tenant();
    g->set_tenant(tenants[t]);
    g->add_kernels("*");
    g->add_devices("sim");
    // Tenants "a" and "b" keep to the simulated GPUs, so that they see enough
    // allocations whatever the measured model makes of the CPU worker.
    if (rng() % 2 == 0 && t >= 2)
      g->add_devices("cpu");
    g->set_max_inflight(uint32_t(4 + rng() % 28));
    g->set_on_limit(static_cast<pb::LimitPolicy>(rng() % 3));
    g->set_queue_timeout_ms(5000);
    if (rng() % 3 != 0) {
      auto q = (4 + rng() % 12) * MiB;
      g->set_memory_quota_bytes(q);
      obs->tenant_quota[tenants[t]] = q;
    }
    for (int d = 0; d < 4; ++d) {
      if (rng() % 3 != 0)
        continue;
      auto* dq = g->add_device_quota();
      auto name = "sim" + std::to_string(d);
      dq->set_device(name);
      auto q = (2 + rng() % 5) * MiB;
      dq->set_memory_quota_bytes(q);
      obs->device_quota[{tenants[t], name}] = q;
      // Tenant "a" declares a peak of 1 MiB there.
      if (t == 0)
        dq->set_reserve_bytes(MiB);
    }
  }
  auto rt = actors::runtime::start(sys, cfg, sims);
  REQUIRE(rt);
  for (auto& s : sims)
    std::static_pointer_cast<devices::sim::sim_device>(s)->slow_down(
        double(20 + rng() % 200));
  std::vector<work_item> items;
  // The measured model sends much of the work to the CPU worker while the
  // sims are slowed down: enough items that the sims still see over 100.
  for (uint64_t id = 1; id <= 400; ++id)
    items.push_back(random_item(rng, id, tenants[rng() % tenants.size()]));
  auto e = test::submit_all(sys, **rt, items, [] {});
  test::check_exactly_once(items, e);
  for (auto& [id, err] : e.errors) {
    // Only limits may end an item here: no device was lost.
    INFO(describe(err));
    auto c = code_of(err);
    CHECK((c == errc::over_memory_quota || c == errc::memory_limit ||
           c == errc::out_of_memory || c == errc::over_inflight_quota ||
           c == errc::retries_exhausted));
  }
  CHECK(obs->violations() == std::vector<std::string>{});
  CHECK(obs->allocations() > 100);
  // Memory pressure really happened.
  CHECK(obs->peak() > 0.3);
  (*rt)->stop();
  CHECK(obs->live_bytes() == 0);
  for (auto& s : sims) {
    auto snap = s->memory()->snapshot();
    INFO(snap.device << ": " << snap.leak_report);
    CHECK(snap.live_allocations == 0);
    CHECK(s->memory()->pool().check_invariants() == "");
  }
}
