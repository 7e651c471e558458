// The simulated GPU and its fault-injection API; the CPU device; hwloc.
#include <catch2/catch.hpp>

#include <thread>

#include "devices/cpu/cpu_device.hpp"
#include "devices/sim/sim_device.hpp"
#include "devices/topology.hpp"
#include "messages/errc.hpp"
#include "messages/work.hpp"

using namespace cohort;
using namespace cohort::devices;

namespace {

sim::sim_params small_sim() {
  sim::sim_params p;
  p.name = "simT";
  p.memory_bytes = 64 * 1024;
  p.streams = 2;
  p.speed = 2.0;
  return p;
}

std::shared_ptr<sim::sim_device> make_small(sim::sim_params p = small_sim()) {
  auto d = sim::make_sim_device(std::move(p));
  REQUIRE(d);
  return *d;
}

// A sum of 1,024 ones; holds 4 KiB + 256 B of device memory until finished.
caf::expected<launch_result> launch_sum(device& d, uint32_t stream = 0,
                                        uint64_t ticket = 0) {
  static std::vector<float> x(1024, 1.0f);
  std::vector<std::span<const float>> in{x};
  return d.launch(stream, ticket, kernels::kernel_id::reduce_sum, {}, in,
                  {"t", ticket, "reduce_sum"});
}

// Checks what the pool hands out and takes back: fresh blocks read zero,
// returned blocks hold what the launch copied in.
struct content_check final : memory::memory_observer {
  int allocations = 0;
  int nonzero_returned = 0;
  bool fresh_not_zero = false;
  void on_allocate(const std::string&, void* p, uint64_t bytes,
                   const memory::owner_tag&) override {
    ++allocations;
    auto* b = static_cast<const unsigned char*>(p);
    for (uint64_t i = 0; i < bytes; ++i)
      fresh_not_zero |= b[i] != 0;
  }
  void on_deallocate(const std::string&, void* p, uint64_t) override {
    nonzero_returned += *static_cast<const float*>(p) == 1.0f;
  }
};

} // namespace

TEST_CASE("a simulated GPU says it is simulated", "[devices][sim]") {
  auto dp = make_small();
  auto& d = *dp;
  CHECK(d.info().simulated);
  CHECK(d.info().kind == device_kind::sim_gpu);
  CHECK(d.info().memory_bytes == 64 * 1024);
  CHECK(d.info().streams == 2);
  auto res = launch_sum(d);
  REQUIRE(res);
  CHECK(res->output.values == std::vector<float>{1024.0f});
  CHECK(res->device_time.count() > 0);
  CHECK_FALSE(res->hung);
}

TEST_CASE("simulated memory is real, bounded and injectable",
          "[devices][sim]") {
  auto check = std::make_shared<content_check>();
  auto p = small_sim();
  p.memory.observer = check;
  auto dp = make_small(p);
  auto& d = *dp;
  // Launches hold their blocks until finished: the device fills up.
  uint64_t ticket = 0;
  caf::expected<launch_result> res{caf::error{}};
  while ((res = launch_sum(d, 0, ++ticket)) && ticket < 100) {
    CHECK(res->output.values == std::vector<float>{1024.0f});
  }
  REQUIRE_FALSE(res);
  CHECK(code_of(res.error()) == errc::out_of_memory);
  CHECK_THAT(describe(res.error()), Catch::Contains("simT"));
  CHECK(ticket > 8);
  auto s = d.memory()->snapshot();
  CHECK(s.held <= s.capacity);
  CHECK(s.live_allocations == ticket - 1);
  // Finishing one launch makes room for the next.
  d.finish(1);
  CHECK(launch_sum(d, 1, ticket));
  for (uint64_t t = 2; t <= ticket; ++t)
    d.finish(t);
  CHECK(d.memory()->snapshot().live_allocations == 0);
  CHECK(d.memory()->snapshot().leak_report.empty());
  // The inputs really were in device memory, and every block came back
  // zeroed before it was handed out again.
  CHECK(check->nonzero_returned == check->allocations);
  CHECK_FALSE(check->fresh_not_zero);
  d.fail_next_allocations(2);
  CHECK(code_of(launch_sum(d, 0, 1).error()) == errc::out_of_memory);
  CHECK_THAT(describe(launch_sum(d, 0, 1).error()),
             Catch::Contains("injected"));
  CHECK(launch_sum(d, 0, 1));
  d.finish(1);
}

TEST_CASE("a lost simulated GPU fails until reset", "[devices][sim]") {
  auto dp = make_small();
  auto& d = *dp;
  REQUIRE(launch_sum(d, 0, 7));
  d.lose();
  CHECK(code_of(d.health()) == errc::device_lost);
  CHECK(code_of(launch_sum(d).error()) == errc::device_lost);
  CHECK_FALSE(d.reset());
  // The reset took the launch's memory along.
  CHECK(d.memory()->snapshot().live_allocations == 0);
  CHECK(d.memory()->snapshot().dropped_at_reset == 1);
  CHECK_FALSE(d.health());
  d.lose(true);
  CHECK(code_of(d.reset()) == errc::device_lost);
}

TEST_CASE("a simulated GPU can be lost at a given time", "[devices][sim]") {
  auto dp = make_small();
  auto& d = *dp;
  d.lose_at(std::chrono::steady_clock::now() + std::chrono::milliseconds(30));
  CHECK_FALSE(d.health());
  std::this_thread::sleep_for(std::chrono::milliseconds(40));
  CHECK(code_of(d.health()) == errc::device_lost);
}

TEST_CASE("Xid codes: application-level fail one kernel, device-level lose "
          "the device",
          "[devices][sim]") {
  auto dp = make_small();
  auto& d = *dp;
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

TEST_CASE("N application-level Xids fail the next N launches",
          "[devices][sim]") {
  auto dp = make_small();
  auto& d = *dp;
  // A storm raised faster than the device launches: none is lost.
  for (uint32_t xid : {13u, 31u, 43u})
    d.raise_xid(xid);
  for (uint32_t xid : {13u, 31u, 43u}) {
    auto res = launch_sum(d);
    REQUIRE_FALSE(res);
    CHECK_THAT(describe(res.error()),
               Catch::Contains("Xid " + std::to_string(xid)));
  }
  CHECK(launch_sum(d));
  // A reset clears the ones still waiting.
  d.raise_xid(13);
  d.raise_xid(13);
  REQUIRE_FALSE(d.reset());
  CHECK(launch_sum(d));
}

TEST_CASE("hung streams and slow-downs", "[devices][sim]") {
  auto dp = make_small();
  auto& d = *dp;
  // The first launch moves the input in; later ones find it held (the input
  // cache) and take less modeled time.
  auto first = launch_sum(d)->device_time;
  auto base = launch_sum(d)->device_time;
  CHECK(base < first);
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

TEST_CASE("a simulated launch holds exactly what the balancer charges for it",
          "[devices][sim]") {
  auto dp = make_small([] {
    auto p = small_sim();
    p.memory_bytes = 64ull << 20;
    return p;
  }());
  // A chain: axpy of 1,000 floats, then a scan and a sum of its output.
  work_item item;
  item.kernel = kernels::kernel_id::axpy;
  item.args.alpha = 2;
  item.inputs = {host_buffer{std::vector<float>(1000, 1.0f)},
                 host_buffer{std::vector<float>(1000, 2.0f)}};
  item.then.push_back({kernels::kernel_id::inclusive_scan, {}, {}, 0});
  item.then.push_back({kernels::kernel_id::reduce_sum, {}, {}, 0});
  REQUIRE(validate_item(item) == "");
  auto views = item.views();
  std::vector<stage_view> chain{
      {item.kernel, item.args, {views.begin(), views.end()}, -1},
      {kernels::kernel_id::inclusive_scan, {}, {{}}, 0},
      {kernels::kernel_id::reduce_sum, {}, {{}}, 0}};
  REQUIRE(dp->launch_chain(0, 1, chain, {"t", 1, "chain"}));
  CHECK(dp->memory()->snapshot().used == item_bytes(item));
  dp->finish(1);
  CHECK(dp->memory()->snapshot().used == 0);
}

TEST_CASE("a given-up simulated GPU drops what its launches held",
          "[devices][sim]") {
  auto dp = make_small([] {
    auto p = small_sim();
    p.memory_bytes = 64ull << 20;
    return p;
  }());
  work_item item;
  item.kernel = kernels::kernel_id::axpy;
  item.args.alpha = 2;
  item.inputs = {host_buffer{std::vector<float>(1000, 1.0f)},
                 host_buffer{std::vector<float>(1000, 2.0f)}};
  REQUIRE(validate_item(item) == "");
  auto views = item.views();
  std::vector<stage_view> chain{
      {item.kernel, item.args, {views.begin(), views.end()}, -1}};
  REQUIRE(dp->launch_chain(0, 7, chain, {"t", 7, "held"}));
  REQUIRE(dp->memory()->snapshot().used > 0);
  // The supervisor gives the device up while the launch still holds its
  // block; a later finish (or the destructor) must not free it again.
  dp->release_memory();
  CHECK(dp->memory()->snapshot().used == 0);
  dp->finish(7);
  CHECK(dp->memory()->snapshot().invalid_frees == 0);
}

TEST_CASE("a simulated GPU reads resident objects without a transfer",
          "[devices][sim][objects]") {
  auto p = small_sim();
  p.memory_bytes = 4 << 20;
  p.gflops = 1e6; // the launch is all transfer
  p.gbytes_per_s = 1.0;
  p.launch_latency = std::chrono::nanoseconds{0};
  auto d = make_small(p);
  std::vector<float> x(100000, 1.0f);
  std::vector<float> y(100000, 2.0f);
  REQUIRE(!d->store_object(7, kernels::typed_view{x}, {"t", 0, "object 7"}));
  auto* obj = d->find_object(7);
  REQUIRE(obj != nullptr);
  kernels::kernel_args args;
  args.alpha = 3.0f;
  auto x_host = x; // another identity: not in the device's input cache
  stage_view from_host{kernels::kernel_id::axpy,
                       args,
                       {kernels::typed_view{x_host}, kernels::typed_view{y}},
                       -1};
  auto copied = d->launch_chain(0, 1, {&from_host, 1}, {"t", 1, "axpy"});
  REQUIRE(copied);
  d->finish(1);
  std::vector<float> y2(100000, 2.0f);
  stage_view in_place{kernels::kernel_id::axpy,
                      args,
                      {obj->data, kernels::typed_view{y2}},
                      -1,
                      1};
  auto read = d->launch_chain(0, 2, {&in_place, 1}, {"t", 2, "axpy"});
  REQUIRE(read);
  d->finish(2);
  CHECK(read->output.values == copied->output.values);
  CHECK(read->output.values.front() == 5.0f);
  // The modeled time is the bytes moved: x's 400 KB at 1 GB/s less in
  // place, on a device of speed 2.
  CHECK(read->device_time < copied->device_time);
  CHECK(copied->device_time - read->device_time >=
        std::chrono::microseconds{195});
}

TEST_CASE("objects are charged to their tenant and go with a reset",
          "[devices][sim][objects]") {
  auto p = small_sim();
  p.memory_bytes = 1 << 20;
  p.memory.tenant_limits["t"] = 16 * 1024;
  auto d = make_small(p);
  std::vector<float> small(1024, 1.0f); // 4 KiB
  std::vector<float> large(8192, 1.0f); // 32 KiB: over t's quota
  REQUIRE(!d->store_object(1, kernels::typed_view{small}, {"t", 0, "o1"}));
  auto err = d->store_object(2, kernels::typed_view{large}, {"t", 0, "o2"});
  CHECK(code_of(err) == errc::over_memory_quota);
  CHECK(d->find_object(2) == nullptr);
  CHECK(d->object_count() == 1);
  CHECK(d->memory()->snapshot().used_by_tenant["t"] == 4096);
  // Another tenant is not limited by t's quota.
  REQUIRE(!d->store_object(2, kernels::typed_view{large}, {"u", 0, "o2"}));
  CHECK(d->object_count() == 2);
  // A lost device's objects are gone after its reset, and their memory with
  // them; the ids may be used again.
  d->lose(false);
  CHECK(code_of(d->read_object(1).error()) == errc::device_lost);
  CHECK(code_of(d->store_object(3, kernels::typed_view{small}, {"t", 0, ""})) ==
        errc::device_lost);
  REQUIRE(!d->reset());
  CHECK(d->object_count() == 0);
  CHECK(d->object_bytes() == 0);
  CHECK(d->memory()->snapshot().used == 0);
  REQUIRE(!d->store_object(1, kernels::typed_view{small}, {"t", 0, "o1"}));
  CHECK(d->read_object(1)->values == small);
}

TEST_CASE("a simulated GPU's health counters come from its model, labelled "
          "simulated",
          "[devices][sim][health]") {
  auto dp = make_small();
  auto& d = *dp;
  auto idle = d.telemetry();
  REQUIRE(idle.available);
  CHECK(idle.source == "simulated");
  CHECK(idle.gpu_util_percent == 0);
  CHECK(idle.temperature_c == 35);
  CHECK(idle.power_w == Approx(60));
  CHECK(idle.power_limit_w == Approx(300));
  // One launch held on one of its two streams: half busy.
  REQUIRE(launch_sum(d, 0, 1));
  auto half = d.telemetry();
  CHECK(half.gpu_util_percent == 50);
  CHECK(half.temperature_c == 58);
  CHECK(half.power_w == Approx(180));
  d.finish(1);
  CHECK(d.telemetry().gpu_util_percent == 0);
  // Heat on top of the model, and cooling back.
  d.heat(50);
  CHECK(d.telemetry().temperature_c == 85);
  d.heat(0);
  CHECK(d.telemetry().temperature_c == 35);
  // A simulated CPU worker has none.
  auto p = small_sim();
  p.cpu = true;
  auto cpu = make_small(p);
  auto none = cpu->telemetry();
  CHECK_FALSE(none.available);
  CHECK_THAT(none.unavailable_reason, Catch::Contains("simulated CPU worker"));
}

TEST_CASE("a device keeps its last samples and Xids, with their times",
          "[devices][health]") {
  auto dp = make_small();
  auto& d = *dp;
  for (int64_t i = 0; i < int64_t(device::telemetry_kept) + 50; ++i) {
    health::gpu_sample s;
    s.available = true;
    s.temperature_c = int32_t(i % 100);
    d.keep_telemetry(i, s);
  }
  auto kept = d.telemetry_history();
  REQUIRE(kept.size() == device::telemetry_kept);
  CHECK(kept.front().wall_ns == 50);
  CHECK(kept.back().wall_ns == int64_t(device::telemetry_kept) + 49);
  for (uint32_t i = 0; i < device::xids_kept + 3; ++i)
    d.raise_xid(13);
  d.raise_xid(31);
  auto xids = d.recent_xids();
  REQUIRE(xids.size() == device::xids_kept);
  CHECK(xids.back().xid == 31);
  CHECK(xids.back().wall_ns >= xids.front().wall_ns);
  CHECK(xids.back().wall_ns > 1'700'000'000'000'000'000);
  CHECK(d.xid_errors() == device::xids_kept + 4);
}
