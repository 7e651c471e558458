// The simulated GPU and its fault-injection API; the CPU device; hwloc.
#include <catch2/catch.hpp>

#include <thread>

#include "devices/cpu/cpu_device.hpp"
#include "devices/sim/sim_device.hpp"
#include "devices/topology.hpp"
#include "messages/errc.hpp"

using namespace cohort;
using namespace cohort::devices;

namespace {

sim::sim_params small_sim() {
  sim::sim_params p;
  p.name = "simT";
  p.memory_bytes = 1000;
  p.streams = 2;
  p.speed = 2.0;
  return p;
}

caf::expected<launch_result> launch_sum(device& d, uint32_t stream = 0) {
  static std::vector<float> x(1024, 1.0f);
  std::vector<std::span<const float>> in{x};
  return d.launch(stream, 0, kernels::kernel_id::reduce_sum, {}, in);
}

} // namespace

TEST_CASE("a simulated GPU says it is simulated", "[devices][sim]") {
  sim::sim_device d{small_sim()};
  CHECK(d.info().simulated);
  CHECK(d.info().kind == device_kind::sim_gpu);
  CHECK(d.info().memory_bytes == 1000);
  CHECK(d.info().streams == 2);
  auto res = launch_sum(d);
  REQUIRE(res);
  CHECK(res->output.values == std::vector<float>{1024.0f});
  CHECK(res->device_time.count() > 0);
  CHECK_FALSE(res->hung);
}

TEST_CASE("simulated memory is bounded and injectable", "[devices][sim]") {
  sim::sim_device d{small_sim()};
  CHECK_FALSE(d.allocate(600));
  auto err = d.allocate(600);
  CHECK(code_of(err) == errc::out_of_memory);
  d.deallocate(600);
  CHECK(d.memory_used() == 0);
  d.fail_next_allocations(2);
  CHECK(code_of(d.allocate(1)) == errc::out_of_memory);
  CHECK(code_of(d.allocate(1)) == errc::out_of_memory);
  CHECK_FALSE(d.allocate(1));
  CHECK(d.memory_used() == 1);
}

TEST_CASE("a lost simulated GPU fails until reset", "[devices][sim]") {
  sim::sim_device d{small_sim()};
  d.lose();
  CHECK(code_of(d.health()) == errc::device_lost);
  CHECK(code_of(launch_sum(d).error()) == errc::device_lost);
  CHECK(code_of(d.allocate(1)) == errc::device_lost);
  CHECK_FALSE(d.reset());
  CHECK_FALSE(d.health());
  d.lose(true);
  CHECK(code_of(d.reset()) == errc::device_lost);
}

TEST_CASE("a simulated GPU can be lost at a given time", "[devices][sim]") {
  sim::sim_device d{small_sim()};
  d.lose_at(std::chrono::steady_clock::now() + std::chrono::milliseconds(30));
  CHECK_FALSE(d.health());
  std::this_thread::sleep_for(std::chrono::milliseconds(40));
  CHECK(code_of(d.health()) == errc::device_lost);
}

TEST_CASE("Xid codes: application-level fail one kernel, device-level lose "
          "the device",
          "[devices][sim]") {
  sim::sim_device d{small_sim()};
  d.raise_xid(13);
  auto res = launch_sum(d);
  REQUIRE_FALSE(res);
  CHECK(code_of(res.error()) == errc::kernel_fault);
  CHECK_THAT(describe(res.error()), Catch::Contains("Xid 13"));
  CHECK(launch_sum(d));
  CHECK_FALSE(d.health());
  d.raise_xid(79);
  CHECK(code_of(d.health()) == errc::device_lost);
  CHECK(devices::is_device_level_xid(48));
  CHECK_FALSE(devices::is_device_level_xid(31));
}

TEST_CASE("hung streams and slow-downs", "[devices][sim]") {
  sim::sim_device d{small_sim()};
  auto base = launch_sum(d)->device_time;
  d.hang_stream(1);
  CHECK_FALSE(launch_sum(d, 0)->hung);
  CHECK(launch_sum(d, 1)->hung);
  CHECK_FALSE(launch_sum(d, 1)->hung);
  d.slow_down(10);
  auto slow = launch_sum(d)->device_time;
  CHECK(slow.count() >= 9 * base.count());
  d.slow_down(1);
  CHECK(launch_sum(d)->device_time == base);
}

TEST_CASE("a CPU device runs the CPU kernels and measures time", "[devices]") {
  auto d = cpu::make_cpu_device(3, 0, "test cpu");
  CHECK(d->info().name == "cpu3");
  CHECK_FALSE(d->info().simulated);
  auto res = launch_sum(*d);
  REQUIRE(res);
  CHECK(res->output.values == std::vector<float>{1024.0f});
}

TEST_CASE("hwloc finds at least one core", "[devices]") {
  auto topo = discover_cpu_topology();
  CHECK(topo.cores >= 1);
  CHECK(topo.numa_nodes >= 1);
  CHECK(topo.core_numa_node.size() == topo.cores);
}
