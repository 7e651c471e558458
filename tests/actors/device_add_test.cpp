// Growing a running fleet (runtime::add_device, how a rescan adds a GPU
// that appeared, docs/gpu.md): the device joins every part of the node at
// the next index, its grants and memory follow the config, and it takes
// work. Simulated devices in the node's process; the rescan of fake GPUs
// in host processes is in device_rescan_test.cpp.
#include <algorithm>

#include <catch2/catch.hpp>

#include "devices/sim/sim_device.hpp"
#include "tests/runtime_fixture.hpp"

using namespace cohort;
using namespace cohort::actors;
using namespace std::chrono_literals;

namespace {

using fixture = test::actor_fixture;

std::shared_ptr<devices::device> sim(const std::string& name,
                                     uint64_t mib = 512) {
  devices::sim::sim_params p;
  p.name = name;
  p.memory_bytes = mib << 20;
  p.streams = 2;
  auto dev = devices::sim::make_sim_device(p);
  REQUIRE(dev);
  return *dev;
}

bool names(const headroom_report& h, const std::string& device) {
  REQUIRE(h.tenants.size() == 1);
  auto& ds = h.tenants[0].devices;
  return std::any_of(ds.begin(), ds.end(),
                     [&](auto& d) { return d.device == device; });
}

} // namespace

TEST_CASE_METHOD(fixture,
                 "a device added to a running fleet takes work under the "
                 "grants its name matches",
                 "[actors][rescan]") {
  auto cfg = test::make_config(dir, 0, {{"sim0", 1.0}});
  // u is granted sim0 by name: a device added later is not its.
  auto* u = cfg.add_tenant();
  u->set_tenant("u");
  u->add_kernels("*");
  u->add_devices("sim0");
  auto rt = runtime::start(sys, cfg);
  REQUIRE(rt);
  auto& r = **rt;
  auto index = r.add_device(sim("sim9"));
  REQUIRE(index);
  CHECK(*index == 1);
  auto devs = r.devices();
  REQUIRE(devs.size() == 2);
  CHECK(devs[1].name == "sim9");
  CHECK(test::wait_status(r, 1, device_status::available) ==
        device_status::available);
  // Its memory is set up as the config says, like sim0's.
  auto mem = r.memory_stats();
  REQUIRE(mem);
  REQUIRE(mem->size() == 2);
  CHECK((*mem)[1].device == "sim9");
  CHECK((*mem)[1].capacity == uint64_t{512} << 20);
  CHECK((*mem)[1].limit > 0);
  // t's grant ("*") covers it, u's ("sim0") does not.
  auto ht = r.headroom("t");
  REQUIRE(ht);
  CHECK(names(*ht, "sim9"));
  auto hu = r.headroom("u");
  REQUIRE(hu);
  CHECK_FALSE(names(*hu, "sim9"));
  // With sim0 offline, t's work runs there.
  REQUIRE_FALSE(r.set_offline("sim0"));
  for (uint64_t id = 1; id <= 4; ++id) {
    auto res = r.run(test::gemv_item(id), 10s);
    REQUIRE(res);
    CHECK(res->device == "sim9");
  }
  auto stats = r.placement_stats();
  REQUIRE(stats);
  REQUIRE(stats->devices.size() == 2);
  CHECK(stats->devices[1].name == "sim9");
  CHECK(stats->devices[1].completed == 4);
  // The audit log says it joined, and names it (not "#1") in the entries
  // of the items that ran there.
  auto text = test::audit_text(r);
  CHECK(text.find("balancer: joined the fleet as device 1") !=
        std::string::npos);
  size_t completed_there = 0;
  for (auto& rec : test::read_audit(r.audit_path())) {
    CHECK(rec.device() != "#1");
    if (rec.kind() == pb::COMPLETED && rec.device() == "sim9")
      ++completed_there;
  }
  CHECK(completed_there == 4);
  r.stop();
  auto late = r.add_device(sim("sim8"));
  REQUIRE_FALSE(late);
  CHECK(code_of(late.error()) == errc::shutting_down);
}

TEST_CASE_METHOD(fixture,
                 "a device without a name of its own or past 64 is refused, "
                 "and the fleet stays as it was",
                 "[actors][rescan]") {
  // 62 CPU workers and sim0: room for one device more.
  auto cfg = test::make_config(dir, 62, {{"sim0", 1.0}});
  auto rt = runtime::start(sys, cfg);
  REQUIRE(rt);
  auto& r = **rt;
  auto none = r.add_device(nullptr);
  REQUIRE_FALSE(none);
  CHECK(code_of(none.error()) == errc::invalid_arguments);
  auto twice = r.add_device(sim("sim0"));
  REQUIRE_FALSE(twice);
  CHECK(code_of(twice.error()) == errc::invalid_arguments);
  CHECK_THAT(describe(twice.error()), Catch::Contains("named 'sim0' already"));
  CHECK(r.devices().size() == 63);
  auto last = r.add_device(sim("sim1"));
  REQUIRE(last);
  CHECK(*last == 63);
  auto full = r.add_device(sim("sim2"));
  REQUIRE_FALSE(full);
  CHECK(code_of(full.error()) == errc::invalid_arguments);
  CHECK_THAT(describe(full.error()), Catch::Contains("64 devices"));
  CHECK(r.devices().size() == 64);
  CHECK(test::wait_status(r, 63, device_status::available) ==
        device_status::available);
  auto stats = r.placement_stats();
  REQUIRE(stats);
  CHECK(stats->devices.size() == 64);
}

TEST_CASE("a GPU a rescan adds keeps its listed name when it is free, else "
          "takes the next number of its prefix",
          "[actors][rescan]") {
  std::vector<std::string> fleet{"cpu0", "cuda0", "cuda1", "mig0.0"};
  CHECK(fresh_gpu_name("cuda3", fleet) == "cuda3");
  CHECK(fresh_gpu_name("cuda1", fleet) == "cuda2");
  CHECK(fresh_gpu_name("cuda0", {"cuda0", "cuda7", "cudax"}) == "cuda8");
  CHECK(fresh_gpu_name("mig0.0", fleet) == "mig1");
  CHECK(fresh_gpu_name("rocm0", {"rocm0"}) == "rocm1");
  CHECK(fresh_gpu_name("", fleet) == "gpu0");
}
