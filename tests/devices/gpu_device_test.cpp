// The host side of the GPU backends without a GPU: error mapping, stream
// bookkeeping, staging reuse and the completion path, driven through a fake
// runtime; and the real CUDA and HIP runtimes on a machine without GPUs.
#include <catch2/catch.hpp>

#include <random>

#include <caf/all.hpp>

#include "actors/device_actor.hpp"
#include "actors/runtime.hpp"
#include "devices/gpu/discover.hpp"
#include "devices/gpu/staging.hpp"
#include "kernels/geo.hpp"
#include "kernels/random_data.hpp"
#include "messages/errc.hpp"
#include "messages/system_config.hpp"
#include "tests/devices/fake_gpu.hpp"
#include "tests/devices/launch_sync.hpp"
#include "tests/json_fixture.hpp"
#include "tests/kernels/bundle/bundle_fixture.hpp"
#include "tests/runtime_fixture.hpp"

using namespace cohort;
using namespace cohort::devices;
using gpu::status;
using kernels::kernel_id;

namespace {

struct rig {
  std::shared_ptr<testing::fake_gpu_api> fake =
      std::make_shared<testing::fake_gpu_api>();
  std::shared_ptr<testing::fake_monitor> monitor =
      std::make_shared<testing::fake_monitor>();
  std::shared_ptr<gpu::gpu_device> dev;

  explicit rig(uint32_t streams = 4,
               uint32_t gpu_instance = health::gpu_event::whole_gpu) {
    gpu::gpu_options opts;
    opts.streams = streams;
    opts.monitor = monitor;
    opts.gpu_instance = gpu_instance;
    auto d =
        gpu::gpu_device::open(fake, 0, device_kind::cuda_gpu, "fake0", opts);
    REQUIRE(d);
    dev = std::move(*d);
  }

  // A test that stopped half-way may leave a launch hung: let it finish, or
  // the device would wait for it forever as it goes.
  ~rig() { fake->release_hung(); }
};

std::vector<float> xs(uint64_t seed, size_t n = 4096) {
  return kernels::random_floats(seed, n);
}

} // namespace

TEST_CASE("GPU errors map onto Cohort errors with file and line",
          "[devices][gpu]") {
  testing::fake_gpu_api fake;
  auto err = gpu::to_error(fake, {status::out_of_memory, 1001}, "cuda0",
                           "allocating", "../devices/gpu/gpu_device.cpp", 42);
  CHECK(code_of(err) == errc::out_of_memory);
  auto text = describe(err);
  CHECK_THAT(text, Catch::Contains("cuda0: allocating failed"));
  CHECK_THAT(text, Catch::Contains("fakeError_out_of_memory"));
  CHECK_THAT(text, Catch::Contains("at devices/gpu/gpu_device.cpp:42"));
  for (auto st : {status::launch_failure, status::illegal_address,
                  status::ecc_uncorrectable, status::hardware_stop}) {
    CHECK(gpu::is_sticky(st));
    auto e = gpu::to_error(fake, {st, 1000 + int(st)}, "cuda0", "x", "f", 1);
    CHECK(code_of(e) == errc::device_lost);
    CHECK_THAT(describe(e), Catch::Contains("sticky"));
  }
  for (auto st : {status::no_device, status::driver_missing})
    CHECK(code_of(gpu::to_error(fake, {st, 1}, "d", "x", "f", 1)) ==
          errc::device_lost);
  for (auto st : {status::invalid_value, status::other}) {
    CHECK_FALSE(gpu::is_sticky(st));
    CHECK(code_of(gpu::to_error(fake, {st, 1}, "d", "x", "f", 1)) ==
          errc::kernel_fault);
  }
  CHECK_FALSE(gpu::to_error(fake, {}, "d", "x", "f", 1));
}

TEST_CASE("a GPU device reports what the runtime says about it",
          "[devices][gpu]") {
  rig r;
  auto& info = r.dev->info();
  CHECK(info.name == "fake0");
  CHECK(info.kind == device_kind::cuda_gpu);
  CHECK_FALSE(info.simulated);
  CHECK(info.streams == 4);
  CHECK(info.memory_bytes == uint64_t{256} << 20);
  CHECK(info.pci_bus_id == "0000:99:00.0");
  CHECK(info.arch == "sm_90");
  CHECK(info.multiprocessors == 8);
  // hwloc does not know the made-up bus id.
  CHECK(info.numa_node == -1);
  auto s = r.dev->telemetry();
  CHECK(s.available);
  CHECK(s.gpu_util_percent == 42);
}

TEST_CASE("a GPU opened by ordinal must be the one expected",
          "[devices][gpu]") {
  auto fake = std::make_shared<testing::fake_gpu_api>(
      std::vector<testing::fake_device_spec>(2));
  gpu::gpu_options opts;
  opts.streams = 2;
  opts.expect_uuid = "FAKE-1";
  auto wrong =
      gpu::gpu_device::open(fake, 0, device_kind::cuda_gpu, "cuda1", opts);
  REQUIRE_FALSE(wrong);
  CHECK(code_of(wrong.error()) == errc::unknown_device);
  CHECK_THAT(describe(wrong.error()),
             Catch::Contains("cuda1: ordinal 0 is GPU FAKE-0 in this "
                             "process, not FAKE-1") &&
                 Catch::Contains("CUDA_VISIBLE_DEVICES"));
  // Nothing was made on the GPU it refused.
  CHECK(fake->device_mallocs() == 0);
  auto right =
      gpu::gpu_device::open(fake, 1, device_kind::cuda_gpu, "cuda1", opts);
  REQUIRE(right);
  CHECK((*right)->info().uuid == "FAKE-1");
}

TEST_CASE("a refused device allocation is out_of_memory and leaks nothing",
          "[devices][gpu]") {
  rig r;
  test::completions done{*r.dev};
  auto x = xs(1);
  std::vector<std::span<const float>> in{x};
  // The pool asks for a slab, then for exactly what the launch needs.
  r.fake->fail_next_mallocs(2);
  auto res = done.run(1, kernel_id::reduce_sum, {}, in);
  REQUIRE_FALSE(res);
  CHECK(code_of(res.error()) == errc::out_of_memory);
  CHECK_THAT(describe(res.error()),
             Catch::Contains("gpu_memory_resource.cpp:"));
  CHECK_FALSE(r.dev->health());
  CHECK(r.fake->live_allocations() == 0);
  CHECK(r.dev->inflight() == 0);
  // The next launch is fine and gives its block back to the pool, which
  // keeps the slab for the launches after it.
  auto ok = done.run(2, kernel_id::reduce_sum, {}, in);
  REQUIRE(ok);
  CHECK(r.fake->live_allocations() == 1);
  CHECK(r.dev->live_blocks() == 0);
  CHECK(r.fake->bad_frees() == 0);
}

TEST_CASE("a GPU's pool makes one driver allocation for many launches",
          "[devices][gpu][memory]") {
  rig r;
  test::completions done{*r.dev};
  auto x = xs(11, 50000);
  std::vector<std::span<const float>> in{x};
  for (uint64_t t = 1; t <= 100; ++t)
    REQUIRE(done.run(t, kernel_id::inclusive_scan, {}, in));
  CHECK(r.fake->device_mallocs() == 1);
  auto s = r.dev->memory()->snapshot();
  CHECK(s.allocations == 100);
  CHECK(s.deallocations == 100);
  CHECK(s.slab_allocations == 1);
  CHECK(s.live_allocations == 0);
  // The driver's fresh slab (filled with 0xA5 by the fake) was zeroed once,
  // and every freed block again before reuse.
  CHECK(r.fake->bytes_zeroed() >= s.held + 100 * 2 * 50000 * sizeof(float));
}

TEST_CASE("asked to, a GPU times a launch's copies apart from its kernels",
          "[devices][gpu][trace]") {
  rig r;
  test::completions done{*r.dev};
  // 16 MiB in, one float out: the copy in is most of the launch.
  auto x = xs(12, 4u << 20);
  std::vector<std::span<const float>> in{x};
  kernels::kernel_args args;
  args.n = x.size();
  auto plain = done.run(1, kernel_id::reduce_sum, args, in);
  REQUIRE(plain);
  CHECK(plain->copy_in.count() == 0);
  CHECK(plain->copy_out.count() == 0);
  r.dev->time_copies(true);
  auto timed = done.run(2, kernel_id::reduce_sum, args, in);
  REQUIRE(timed);
  CHECK(timed->copy_in.count() > 0);
  CHECK(timed->copy_out.count() >= 0);
  CHECK(timed->copy_in + timed->copy_out <= timed->device_time);
  CHECK(timed->output.values.size() == 1);
  // Off again: nothing timed apart.
  r.dev->time_copies(false);
  auto again = done.run(3, kernel_id::reduce_sum, args, in);
  REQUIRE(again);
  CHECK(again->copy_in.count() == 0);
}

TEST_CASE("reused memory waits for its zero fill, not for other launches",
          "[devices][gpu][memory]") {
  rig r{2};
  test::completions done{*r.dev};
  auto x = xs(12);
  std::vector<std::span<const float>> in{x};
  // A runs and completes on stream 0.
  REQUIRE(r.dev->launch(0, 1, kernel_id::reduce_sum, {}, in));
  REQUIRE(done.wait(1));
  // H hangs stream 0. A's block is freed and zeroed on the fill stream.
  r.fake->hang_next_launch();
  REQUIRE(r.dev->launch(0, 2, kernel_id::reduce_sum, {}, in));
  auto a = r.dev->collect(1);
  REQUIRE(a);
  auto waits = r.fake->stream_waits();
  // B on stream 1 gets A's block: stream 1 waits, on the device, for the
  // zero fill (unless the fill stream already finished it: the fake's
  // streams are threads, so that is a race) and for nothing else: B
  // completes while stream 0 hangs.
  REQUIRE(r.dev->launch(1, 3, kernel_id::reduce_sum, {}, in));
  CHECK(r.fake->stream_waits() <= waits + 1);
  REQUIRE(done.wait(3));
  auto b = r.dev->collect(3);
  REQUIRE(b);
  CHECK(b->output.values == a->output.values);
  CHECK(done.count(2) == 0);
  r.fake->release_hung();
  REQUIRE(done.wait(2));
  REQUIRE(r.dev->collect(2));
  CHECK(r.dev->live_blocks() == 0);
}

TEST_CASE("launches spread over the least busy streams", "[devices][gpu]") {
  rig r{4};
  test::completions done{*r.dev};
  auto x = xs(2);
  std::vector<std::span<const float>> in{x};
  r.fake->hang_next_launch();
  // The first launch hangs its stream: launches never wait for the GPU.
  for (uint64_t t = 1; t <= 8; ++t) {
    auto res =
        r.dev->launch(r.dev->pick_stream(0), t, kernel_id::reduce_sum, {}, in);
    REQUIRE(res);
    CHECK(res->pending);
  }
  for (uint32_t s = 0; s < 4; ++s)
    CHECK(r.dev->inflight(s) == 2);
  // Everything not queued behind the hung launch on stream 0 completes.
  for (uint64_t t = 2; t <= 8; ++t) {
    if (t == 5)
      continue; // behind the hung launch on stream 0
    REQUIRE(done.wait(t));
    REQUIRE(r.dev->collect(t));
  }
  CHECK(done.count(1) == 0);
  CHECK(r.dev->inflight(0) == 2);
  r.fake->release_hung();
  for (uint64_t t : {1, 5}) {
    REQUIRE(done.wait(t));
    REQUIRE(r.dev->collect(t));
  }
  CHECK(r.dev->inflight() == 0);
  CHECK(r.dev->live_blocks() == 0);
  // Collecting twice, or something never launched, is a clear error.
  auto again = r.dev->collect(1);
  REQUIRE_FALSE(again);
  CHECK(code_of(again.error()) == errc::invalid_arguments);
}

TEST_CASE("pinned staging buffers are reused across launches",
          "[devices][gpu]") {
  rig r{2};
  test::completions done{*r.dev};
  auto x = xs(3, 10000);
  std::vector<std::span<const float>> in{x};
  for (uint64_t t = 1; t <= 100; ++t)
    REQUIRE(done.run(t, kernel_id::inclusive_scan, {}, in));
  CHECK(r.dev->staging().pinned_allocations() == 1);
  CHECK(r.fake->registered_host_ranges() == 1);
  CHECK(r.fake->kernels_run() == 100);
}

TEST_CASE("the staging cache keeps the sizes in use, not earlier ones",
          "[devices][gpu]") {
  testing::fake_gpu_api fake;
  constexpr size_t mib = size_t{1} << 20;
  gpu::staging_pool pool{fake, -1, 8 * mib};
  gpu::result rc;
  // Earlier work left the cache full of 4 MiB blocks.
  auto a = pool.acquire(4 * mib, rc);
  auto b = pool.acquire(4 * mib, rc);
  REQUIRE(a.data != nullptr);
  REQUIRE(b.data != nullptr);
  pool.release(a);
  pool.release(b);
  CHECK(pool.cached_bytes() == 8 * mib);
  // Now 100 KiB launches: the first pins a block, evicting the older 4 MiB
  // one, and every later launch reuses it. Before, a full cache freed each
  // such block on release and every launch pinned a new one.
  for (int i = 0; i < 50; ++i) {
    auto s = pool.acquire(100 << 10, rc);
    REQUIRE(s.data != nullptr);
    CHECK(s.capacity == 128 << 10);
    pool.release(s);
  }
  CHECK(pool.pinned_allocations() == 3);
  CHECK(pool.cached_bytes() == 4 * mib + (128 << 10));
  CHECK(fake.registered_host_ranges() == 2);
  // The 4 MiB block released last is still there to reuse.
  auto again = pool.acquire(3 * mib, rc);
  CHECK(again.capacity == 4 * mib);
  CHECK(pool.pinned_allocations() == 3);
  pool.release(again);
}

TEST_CASE("a staging request takes a cached block up to four times larger",
          "[devices][gpu]") {
  testing::fake_gpu_api fake;
  constexpr size_t kib = size_t{1} << 10;
  gpu::staging_pool pool{fake, -1, size_t{64} << 20};
  gpu::result rc;
  auto big = pool.acquire(1024 * kib, rc);
  REQUIRE(big.data != nullptr);
  pool.release(big);
  auto quarter = pool.acquire(200 * kib, rc); // 256 KiB class
  CHECK(quarter.data == big.data);
  CHECK(quarter.capacity == 1024 * kib);
  pool.release(quarter);
  auto small = pool.acquire(100 * kib, rc); // 128 KiB: 8x smaller, a new one
  CHECK(small.data != big.data);
  CHECK(small.capacity == 128 * kib);
  CHECK(pool.pinned_allocations() == 2);
  pool.release(small);
  // A block larger than the whole cache is not kept.
  gpu::staging_pool tiny{fake, -1, 256 * kib};
  auto huge = tiny.acquire(1024 * kib, rc);
  REQUIRE(huge.data != nullptr);
  auto ranges = fake.registered_host_ranges();
  tiny.release(huge);
  CHECK(tiny.cached_bytes() == 0);
  CHECK(fake.registered_host_ranges() == ranges - 1);
}

TEST_CASE("a sticky error loses the device until a reset clears it",
          "[devices][gpu]") {
  rig r;
  test::completions done{*r.dev};
  auto x = xs(4);
  std::vector<std::span<const float>> in{x};
  r.fake->fault_next_launch(status::illegal_address);
  auto res = done.run(1, kernel_id::reduce_sum, {}, in);
  REQUIRE_FALSE(res);
  CHECK(code_of(res.error()) == errc::device_lost);
  CHECK_THAT(describe(res.error()), Catch::Contains("illegal_address"));
  CHECK_THAT(describe(res.error()), Catch::Contains("sticky"));
  CHECK(code_of(r.dev->health()) == errc::device_lost);
  auto next = r.dev->launch(0, 2, kernel_id::reduce_sum, {}, in);
  REQUIRE_FALSE(next);
  CHECK(code_of(next.error()) == errc::device_lost);
  SECTION("a vendor whose reset clears the context") {
    CHECK_FALSE(r.dev->reset());
    CHECK_FALSE(r.dev->health());
    auto ok = done.run(3, kernel_id::reduce_sum, {}, in);
    REQUIRE(ok);
    CHECK(ok->output.values.size() == 1);
  }
  SECTION("a vendor whose sticky errors need a new process (CUDA)") {
    r.fake->set_sticky_survives_reset(true);
    auto err = r.dev->reset();
    CHECK(code_of(err) == errc::device_lost);
    CHECK(code_of(r.dev->health()) == errc::device_lost);
  }
}

TEST_CASE("the health monitor's device-level Xid loses the device",
          "[devices][gpu]") {
  rig r;
  health::gpu_event app;
  app.what = health::gpu_event::kind::xid;
  app.xid = 13;
  r.monitor->raise("0000:99:00.0", app);
  CHECK_FALSE(r.dev->health());
  // NVML tells of Xid 79 as a loss with its code.
  health::gpu_event lost;
  lost.what = health::gpu_event::kind::lost;
  lost.xid = 79;
  lost.detail = "fallen off the bus";
  r.monitor->raise("0000:99:00.0", lost);
  auto err = r.dev->health();
  CHECK(code_of(err) == errc::device_lost);
  CHECK_THAT(describe(err), Catch::Contains("Xid 79"));
  CHECK_THAT(describe(err), Catch::Contains("fake NVML"));
  // Both count.
  CHECK(r.dev->xid_errors() == 2);
  CHECK(r.dev->last_xid() == 79);
}

TEST_CASE("the device actor turns a sticky GPU error into device loss",
          "[devices][gpu]") {
  rig r;
  system_config cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  auto listener = caf::actor_cast<actors::device_listener>(self);
  actors::device_actor_config dcfg;
  auto act =
      self->spawn<caf::detached>(actors::device_impl, r.dev, listener, dcfg);
  self->monitor(act);
  r.fake->fault_next_launch(status::launch_failure);
  std::vector<run_request> batch(1);
  batch[0].ticket = 1;
  batch[0].item.kernel = kernel_id::reduce_sum;
  batch[0].item.inputs.emplace_back(xs(5));
  self->send(act, run_atom::value, std::move(batch));
  caf::error reason;
  self->receive([&](caf::down_msg& dm) { reason = dm.reason; },
                caf::after(std::chrono::seconds(10)) >>
                    [] { FAIL("no down message"); });
  CHECK(code_of(reason) == errc::device_lost);
  CHECK_THAT(describe(reason), Catch::Contains("launch_failure"));
}

TEST_CASE("the runtime places work on a GPU and gets every result once",
          "[devices][gpu]") {
  test::temp_dir dir;
  auto fake = std::make_shared<testing::fake_gpu_api>();
  auto dev = gpu::gpu_device::open(fake, 0, device_kind::cuda_gpu, "fake0", {});
  REQUIRE(dev);
  system_config cfg;
  caf::actor_system sys{cfg};
  auto rt = actors::runtime::start(sys, test::make_config(dir, 1, {}), {*dev});
  REQUIRE(rt);
  std::vector<work_item> items;
  for (uint64_t i = 1; i <= 200; ++i) {
    auto item = test::gemv_item(i, "t", 128, 256);
    // Every third item chains a norm of the product on the same device.
    if (i % 3 == 0)
      item.then.push_back({kernel_id::nrm2, {}, {}, 0});
    items.push_back(std::move(item));
  }
  auto e = test::submit_all(sys, **rt, items, [] {});
  CHECK_FALSE(e.timed_out);
  CHECK(e.errors.empty());
  CHECK(e.results.size() == items.size());
  for (auto& [id, n] : e.count)
    CHECK(n == 1);
  test::check_results(items, e);
  size_t on_gpu = 0;
  for (auto& [id, res] : e.results)
    on_gpu += res.device == "fake0";
  CHECK(on_gpu > 0);
  CHECK(fake->kernels_run() >= on_gpu);
  CHECK(fake->bad_frees() == 0);
  (*rt)->stop();
  // Every launch gave its block back; the pool asked the driver only for
  // slabs, not once per launch.
  CHECK((*dev)->live_blocks() == 0);
  CHECK(fake->device_mallocs() < on_gpu);
}

TEST_CASE("a trace draws a GPU launch's copies and kernels inside it",
          "[devices][gpu][trace]") {
  test::temp_dir dir;
  auto fake = std::make_shared<testing::fake_gpu_api>();
  auto dev = gpu::gpu_device::open(fake, 0, device_kind::cuda_gpu, "fake0", {});
  REQUIRE(dev);
  system_config cfg;
  caf::actor_system sys{cfg};
  // Tenant t may use the GPU only (the CPU worker has no copies to time).
  auto config = test::make_config(dir, 1, {});
  config.mutable_tenant(0)->clear_devices();
  config.mutable_tenant(0)->add_devices("fake0");
  auto rt = actors::runtime::start(sys, config, {*dev});
  REQUIRE(rt);
  REQUIRE_FALSE((*rt)->start_trace(10'000));
  std::vector<work_item> items;
  for (uint64_t i = 2; i <= 21; ++i)
    items.push_back(test::gemv_item(i, "t", 512, 512));
  auto e = test::submit_all(sys, **rt, items, [] {});
  test::check_exactly_once(items, e);
  auto x = (*rt)->trace(true);
  REQUIRE(x);
  size_t runs = 0, copied = 0;
  for (auto& ev : x->events)
    if (ev.kind == trace_kind::run) {
      ++runs;
      // 1 MiB in: its copy takes time on the fake GPU too.
      copied += ev.copy_in_ns > 0;
      CHECK(int64_t(ev.copy_in_ns) + ev.copy_out_ns <= ev.end_ns - ev.begin_ns);
    }
  CHECK(runs == items.size());
  CHECK(copied == runs);
  auto doc = test::parse_json(chrome_trace_json(*x));
  auto es = test::trace_events(doc);
  // Nested in their launches: the viewer's rules hold.
  auto names = test::check_trace_viewable(es);
  CHECK(names.count("gemv") == runs);
  // A launch drawn with no length (it began when the one before it ended,
  // and ended then too) has no parts to draw.
  CHECK(names.count("copy in") > 0);
  CHECK(names.count("copy in") <= runs);
  CHECK(names.count("kernels") > 0);
  CHECK(names.count("kernels") <= runs);
  (*rt)->stop();
}

TEST_CASE("the real GPU runtimes on this machine", "[devices][gpu]") {
  auto found = gpu::discover({});
  REQUIRE(found.backends.size() == 2);
  for (auto& b : found.backends) {
    INFO(b.vendor << ": " << b.note);
    CHECK((b.vendor == "CUDA" || b.vendor == "HIP"));
    if (!b.loaded)
      CHECK_THAT(b.note, Catch::Contains("libcohort-"));
    else if (b.count == 0)
      CHECK_THAT(b.note, Catch::Contains("no " + b.vendor + " device"));
  }
  size_t opened = 0;
  for (auto& b : found.backends)
    opened += size_t(b.count);
  CHECK(found.devices.size() == opened);
  for (auto& d : found.devices) {
    CHECK_FALSE(d->info().simulated);
    CHECK_FALSE(d->info().pci_bus_id.empty());
  }
}

TEST_CASE("a chain keeps intermediate outputs on the GPU and frees them once",
          "[devices][gpu]") {
  rig r;
  test::completions done{*r.dev};
  constexpr size_t n = 100000;
  auto x = xs(20, n);
  auto y = xs(21, n);
  std::vector<stage_view> chain;
  kernels::kernel_args axpy;
  axpy.alpha = 3;
  chain.push_back({kernel_id::axpy, axpy, {x, y}, -1});
  chain.push_back({kernel_id::inclusive_scan, {}, {{}}, 0});
  chain.push_back({kernel_id::reduce_sum, {}, {{}}, 0});
  auto res = r.dev->launch_chain(0, 1, chain);
  REQUIRE(res);
  REQUIRE(res->pending);
  REQUIRE(done.wait(1));
  res = r.dev->collect(1);
  REQUIRE(res);
  REQUIRE(res->output.values.size() == 1);
  // Only the final float came back: the two intermediate arrays of n floats
  // never crossed to the host.
  CHECK(r.fake->bytes_to_host() == sizeof(float));
  CHECK(r.fake->kernels_run() == 3);
  // Everything the chain held went back to the pool, exactly once; the
  // pool keeps its one slab.
  CHECK(r.fake->live_allocations() == 1);
  CHECK(r.fake->bad_frees() == 0);
  CHECK(r.dev->live_blocks() == 0);
  work_item item;
  item.kernel = kernel_id::axpy;
  item.args = axpy;
  item.inputs = {host_buffer{x}, host_buffer{y}};
  item.then.push_back({kernel_id::inclusive_scan, {}, {}, 0});
  item.then.push_back({kernel_id::reduce_sum, {}, {}, 0});
  CHECK(check_result(item, res->output) == "");
}

TEST_CASE("a chain that fails half-way frees what it held", "[devices][gpu]") {
  rig r;
  test::completions done{*r.dev};
  auto x = xs(22, 1000);
  std::vector<stage_view> chain;
  chain.push_back({kernel_id::reduce_sum, {}, {x}, -1});
  chain.push_back({kernel_id::inclusive_scan, {}, {{}}, 0});
  r.fake->fail_next_mallocs(2);
  auto res = r.dev->launch_chain(0, 1, chain);
  REQUIRE_FALSE(res);
  CHECK(code_of(res.error()) == errc::out_of_memory);
  CHECK(r.fake->live_allocations() == 0);
  CHECK(r.fake->bad_frees() == 0);
  CHECK(r.dev->inflight() == 0);
}

TEST_CASE("a given-up GPU's held launches go with its memory, freed once",
          "[devices][gpu]") {
  rig r;
  {
    test::completions done{*r.dev};
    auto x = xs(3);
    std::vector<std::span<const float>> in{x};
    // A launch whose output was never collected still holds its block when
    // the supervisor gives the device up and releases its memory.
    REQUIRE(r.dev->launch(0, 1, kernel_id::reduce_sum, {}, in));
    REQUIRE(done.wait(1));
    CHECK(r.dev->live_blocks() == 1);
    r.dev->release_memory();
    CHECK(r.dev->live_blocks() == 0);
    CHECK(r.dev->inflight() == 0);
  }
  // Nothing is handed back a second time when the device goes.
  r.dev.reset();
  CHECK(r.fake->bad_frees() == 0);
}

namespace {

// A registered kernel with fake CUDA code: out[i] = alpha * x[i] + y[i] in
// f64, by the fake's stand-in for entry point "scale_add", launched over
// ceil_div(x, 2) threads in blocks of 64.
kernels::kernel_id fake_module_kernel(const char* name, std::string image) {
  if (auto id = kernels::parse_kernel(name))
    return *id;
  kernels::kernel_def d;
  d.name = name;
  d.signature.inputs = {{"x", kernels::dtype::f64}, {"y", kernels::dtype::f64}};
  d.signature.output = {"z", kernels::dtype::f64};
  d.output_elements = [](const kernels::kernel_args&,
                         kernels::input_lengths in) { return in[0]; };
  d.cpu = [](const kernels::kernel_args& a, kernels::typed_inputs in) {
    kernels::kernel_output out;
    out.resize(kernels::dtype::f64, in[0].size);
    auto z = out.as<double>();
    for (size_t i = 0; i < z.size(); ++i)
      z[i] = a.alpha * in[0].as<double>()[i] + in[1].as<double>()[i];
    return out;
  };
  image.push_back('\0');
  d.cuda.kind = kernels::gpu_code::format::ptx;
  d.cuda.image =
      std::make_shared<const std::vector<uint8_t>>(image.begin(), image.end());
  d.cuda.function = "scale_add";
  d.cuda.block = 64;
  d.cuda.launch_elements = [](const kernels::kernel_args&,
                              kernels::input_lengths in) {
    return (in[0] + 1) / 2;
  };
  std::string why;
  auto id = kernels::register_kernel(std::move(d), why);
  INFO(why);
  REQUIRE(id);
  return *id;
}

void define_scale_add(testing::fake_gpu_api& fake) {
  fake.define_function("scale_add", [](const cohort_gpu_call& c) {
    auto* x = static_cast<const double*>(c.inputs[0]);
    auto* y = static_cast<const double*>(c.inputs[1]);
    auto* z = static_cast<double*>(c.output);
    for (uint64_t i = 0; i < c.output_length; ++i)
      z[i] = c.alpha * x[i] + y[i];
  });
}

caf::expected<launch_result> run_typed(rig& r, test::completions& done,
                                       uint64_t ticket, kernel_id id,
                                       const kernels::kernel_args& args,
                                       std::vector<kernels::typed_view> in) {
  auto res = r.dev->launch(0, ticket, id, args, kernels::typed_inputs{in},
                           {"test", ticket, "k"});
  if (!res || !res->pending)
    return res;
  if (!done.wait(ticket))
    return make_error(errc::kernel_timeout, "no completion");
  return r.dev->collect(ticket);
}

} // namespace

TEST_CASE("a registered kernel's CUDA module is loaded once and launched "
          "with its typed arguments",
          "[devices][gpu][kernels]") {
  rig r;
  define_scale_add(*r.fake);
  {
    test::completions done{*r.dev};
    auto id = fake_module_kernel(
        "test.gpu_scale_add", std::string{testing::fake_gpu_api::module_magic} +
                                  "other\nscale_add\n");
    std::vector<double> x(1001), y(1001);
    for (size_t i = 0; i < x.size(); ++i) {
      x[i] = double(i);
      y[i] = 0.5;
    }
    kernels::kernel_args a;
    a.alpha = 2;
    a.m = 7;
    for (uint64_t t = 1; t <= 3; ++t) {
      auto res = run_typed(r, done, t, id, a,
                           {{x.data(), x.size(), kernels::dtype::f64},
                            {y.data(), y.size(), kernels::dtype::f64}});
      REQUIRE(res);
      REQUIRE(res->output.type == kernels::dtype::f64);
      auto z = res->output.as<double>();
      REQUIRE(z.size() == 1001);
      CHECK(z[0] == 0.5);
      CHECK(z[1000] == 2000.5);
    }
    // Loaded once for three launches; each launch as the rule asked.
    CHECK(r.fake->module_loads() == 1);
    CHECK(r.fake->live_modules() == 1);
    auto launches = r.fake->function_launches();
    REQUIRE(launches.size() == 3);
    auto& l = launches[0];
    CHECK(l.function == "scale_add");
    CHECK(l.block == 64);
    CHECK(l.grid == 8); // ceil(ceil(1001 / 2) / 64)
    CHECK(l.arg_bytes == sizeof(cohort_gpu_call));
    CHECK(l.call.input_count == 2);
    CHECK(l.call.lengths[0] == 1001);
    CHECK(l.call.dtypes[1] == COHORT_F64);
    CHECK(l.call.output_length == 1001);
    CHECK(l.call.output_dtype == COHORT_F64);
    CHECK(l.call.alpha == 2);
    CHECK(l.call.m == 7);
    // Nothing held once the launches are collected.
    CHECK(r.fake->live_allocations() <= 1);
    // A reset takes the module with the context; the next launch loads it
    // again.
    CHECK_FALSE(r.dev->reset());
    CHECK(r.fake->live_modules() == 0);
    REQUIRE(run_typed(r, done, 4, id, a,
                      {{x.data(), 2, kernels::dtype::f64},
                       {y.data(), 2, kernels::dtype::f64}}));
    CHECK(r.fake->module_loads() == 2);
  }
  // The device's destruction unloads it.
  r.dev.reset();
  CHECK(r.fake->live_modules() == 0);
}

TEST_CASE("a module the driver refuses, or one without the entry point, is a "
          "kernel fault that says why",
          "[devices][gpu][kernels]") {
  rig r;
  test::completions done{*r.dev};
  std::vector<double> x{1, 2}, y{3, 4};
  std::vector<kernels::typed_view> in{{x.data(), 2, kernels::dtype::f64},
                                      {y.data(), 2, kernels::dtype::f64}};
  auto bad = fake_module_kernel("test.gpu_bad_image", ".version 99\n");
  auto res = run_typed(r, done, 1, bad, {}, in);
  REQUIRE_FALSE(res);
  CHECK(code_of(res.error()) == errc::kernel_fault);
  CHECK_THAT(describe(res.error()),
             Catch::Contains("loading the CUDA module of test.gpu_bad_image"));
  CHECK_THAT(describe(res.error()), Catch::Contains("not a fake module"));
  auto missing = fake_module_kernel(
      "test.gpu_no_entry",
      std::string{testing::fake_gpu_api::module_magic} + "something_else\n");
  res = run_typed(r, done, 2, missing, {}, in);
  REQUIRE_FALSE(res);
  CHECK(code_of(res.error()) == errc::kernel_fault);
  CHECK_THAT(describe(res.error()),
             Catch::Contains("finding entry point 'scale_add'"));
  // Neither leaves a module or memory behind, and the device still works.
  CHECK(r.fake->live_modules() == 0);
  CHECK_FALSE(r.dev->health());
  define_scale_add(*r.fake);
  auto good = fake_module_kernel(
      "test.gpu_scale_add",
      std::string{testing::fake_gpu_api::module_magic} + "other\nscale_add\n");
  REQUIRE(run_typed(r, done, 3, good, {}, in));
  // A module kernel that faults is sticky like any other.
  r.fake->fault_next_launch(status::illegal_address);
  res = run_typed(r, done, 4, good, {}, in);
  REQUIRE_FALSE(res);
  CHECK(code_of(res.error()) == errc::device_lost);
}

TEST_CASE("a chain runs a registered GPU kernel on a built-in's output",
          "[devices][gpu][kernels]") {
  // inclusive_scan (built-in, f32) feeding a registered f32 kernel that
  // doubles: the intermediate stays on the device.
  kernels::kernel_id twice;
  if (auto id = kernels::parse_kernel("test.gpu_twice")) {
    twice = *id;
  } else {
    kernels::kernel_def d;
    d.name = "test.gpu_twice";
    d.signature.inputs = {{"x", kernels::dtype::f32}};
    d.output_elements = [](const kernels::kernel_args&,
                           kernels::input_lengths in) { return in[0]; };
    d.cpu = [](const kernels::kernel_args&, kernels::typed_inputs in) {
      kernels::kernel_output out;
      for (auto v : in[0].as<float>())
        out.values.push_back(2 * v);
      return out;
    };
    std::string image =
        std::string{testing::fake_gpu_api::module_magic} + "twice\n";
    image.push_back('\0');
    d.cuda.kind = kernels::gpu_code::format::ptx;
    d.cuda.image = std::make_shared<const std::vector<uint8_t>>(image.begin(),
                                                                image.end());
    d.cuda.function = "twice";
    std::string why;
    auto got = kernels::register_kernel(std::move(d), why);
    REQUIRE(got);
    twice = *got;
  }
  rig r;
  r.fake->define_function("twice", [](const cohort_gpu_call& c) {
    auto* x = static_cast<const float*>(c.inputs[0]);
    auto* z = static_cast<float*>(c.output);
    for (uint64_t i = 0; i < c.output_length; ++i)
      z[i] = 2 * x[i];
  });
  test::completions done{*r.dev};
  std::vector<float> x{1, 2, 3};
  std::vector<stage_view> chain(2);
  chain[0].id = kernel_id::inclusive_scan;
  chain[0].inputs.push_back(kernels::typed_view{x});
  chain[1].id = twice;
  chain[1].inputs.push_back({});
  chain[1].from_previous = 0;
  auto res = r.dev->launch_chain(0, 1, chain, {"test", 1, "chain"});
  REQUIRE(res);
  REQUIRE(done.wait(1));
  auto out = r.dev->collect(1);
  REQUIRE(out);
  CHECK(out->output.values == std::vector<float>{2, 6, 12});
  // Only the last output came back to the host.
  CHECK(r.fake->bytes_to_host() == 3 * sizeof(float));
  auto l = r.fake->function_launches();
  REQUIRE(l.size() == 1);
  CHECK(l[0].grid == 1);
  CHECK(l[0].block == 256);
}

TEST_CASE("the runtime places a registered kernel with CUDA code on the GPU",
          "[devices][gpu][kernels]") {
  test::temp_dir dir;
  auto fake = std::make_shared<testing::fake_gpu_api>();
  define_scale_add(*fake);
  auto dev = gpu::gpu_device::open(fake, 0, device_kind::cuda_gpu, "fake0", {});
  REQUIRE(dev);
  auto id = fake_module_kernel(
      "test.gpu_scale_add",
      std::string{testing::fake_gpu_api::module_magic} + "other\nscale_add\n");
  system_config cfg;
  caf::actor_system sys{cfg};
  // The tenant may use the GPU only.
  auto rcfg = test::make_config(dir, 1, {});
  rcfg.mutable_tenant(0)->clear_devices();
  rcfg.mutable_tenant(0)->add_devices("fake0");
  auto rt = actors::runtime::start(sys, rcfg, {*dev});
  REQUIRE(rt);
  std::vector<double> x{1, 2, 3}, y{10, 20, 30};
  for (uint64_t i = 1; i <= 20; ++i) {
    work_item item;
    item.id = i;
    item.tenant = "t";
    item.kernel = id;
    item.args.alpha = double(i);
    item.inputs.push_back(host_buffer{x});
    item.inputs.push_back(host_buffer{y});
    auto r = (*rt)->run(std::move(item));
    REQUIRE(r);
    CHECK(r->device == "fake0");
    CHECK(r->output.as<double>()[2] == 3.0 * double(i) + 30);
  }
  CHECK(fake->module_loads() == 1);
  // A kernel without GPU code has nowhere to go here.
  kernels::kernel_id cpu_only;
  if (auto got = kernels::parse_kernel("test.gpu_cpu_only")) {
    cpu_only = *got;
  } else {
    kernels::kernel_def d;
    d.name = "test.gpu_cpu_only";
    d.signature.inputs = {{"x", kernels::dtype::f32}};
    d.output_elements = [](const kernels::kernel_args&,
                           kernels::input_lengths in) { return in[0]; };
    d.cpu = [](const kernels::kernel_args&, kernels::typed_inputs in) {
      kernels::kernel_output out;
      out.values.assign(in[0].as<float>().begin(), in[0].as<float>().end());
      return out;
    };
    std::string why;
    auto reg = kernels::register_kernel(std::move(d), why);
    REQUIRE(reg);
    cpu_only = *reg;
  }
  work_item item;
  item.id = 100;
  item.tenant = "t";
  item.kernel = cpu_only;
  item.inputs.push_back(host_buffer{std::vector<float>{1}});
  auto r = (*rt)->run(std::move(item));
  REQUIRE_FALSE(r);
  CHECK(code_of(r.error()) == errc::no_device_available);
  (*rt)->stop();
}

TEST_CASE("a signed bundle's PTX runs on a real CUDA GPU",
          "[devices][gpu][kernels][bundle]") {
  auto ptx_path = test::built_file(COHORT_ACME_PTX);
  if (ptx_path.empty()) {
    WARN("SKIPPED: no CUDA toolchain at build time, so no PTX to load");
    return;
  }
  auto found = gpu::discover({});
  size_t cuda = 0;
  for (auto& d : found.devices)
    cuda += d->info().kind == device_kind::cuda_gpu;
  if (cuda == 0) {
    WARN("SKIPPED: no CUDA GPU on this machine");
    return;
  }
  found.devices.clear();
  test::temp_dir dir;
  auto key = kernels::bundle::private_key::generate();
  REQUIRE(key);
  auto b = dir.file("gpu_acme");
  auto text = test::acme_kernels_text("realgpu");
  text.replace(text.find("  cpu_symbol: \"acme_scale_add\""), 0,
               "  cuda { blob: \"gpu/acme.ptx\" function: "
               "\"acme_scale_add_gpu\" block: 128 }\n");
  text.replace(text.find("  cpu_symbol: \"acme_histogram\""), 0,
               "  cuda { blob: \"gpu/acme.ptx\" function: "
               "\"acme_histogram_gpu\" threads: \"bytes\" }\n");
  test::make_bundle(b, "gpu_acme", text, nullptr);
  test::add_blob(b, "gpu/acme.ptx", test::read_bytes(ptx_path), "CUDA_PTX");
  auto sig = kernels::bundle::sign_bundle(b, *key);
  REQUIRE(std::holds_alternative<pb::BundleSignature>(sig));
  test::write_bytes(
      b + "/manifest.sig",
      kernels::bundle::signature_text(std::get<pb::BundleSignature>(sig)));
  // The tenant may use the CUDA GPUs only.
  auto cfg = test::make_config(dir, 1, {});
  cfg.mutable_devices()->set_gpus(true);
  cfg.mutable_tenant(0)->clear_devices();
  cfg.mutable_tenant(0)->add_devices("cuda");
  cfg.mutable_kernel_bundles()->add_trusted_key(
      test::write_public_key(dir, *key));
  cfg.mutable_kernel_bundles()->add_load(b);
  system_config sc;
  caf::actor_system sys{sc};
  auto rt = actors::runtime::start(sys, cfg);
  REQUIRE(rt);
  REQUIRE((*rt)->kernel_bundles().loaded == 1);
  auto scale_add = kernels::parse_kernel("realgpu.scale_add");
  auto histogram = kernels::parse_kernel("realgpu.histogram");
  REQUIRE(scale_add);
  REQUIRE(histogram);
  // A million elements, checked against the CPU implementation.
  size_t n = 1 << 20;
  std::vector<double> x(n), y(n);
  std::vector<uint8_t> bytes(n);
  for (size_t i = 0; i < n; ++i) {
    x[i] = double(i) * 0.25;
    y[i] = 1.0 / double(i + 1);
    bytes[i] = uint8_t(i * 7919 % 251);
  }
  work_item item;
  item.id = 1;
  item.tenant = "t";
  item.kernel = *scale_add;
  item.args.alpha = 3;
  item.inputs.push_back(host_buffer{x});
  item.inputs.push_back(host_buffer{y});
  auto r = (*rt)->run(item);
  REQUIRE(r);
  CHECK(r->device.rfind("cuda", 0) == 0);
  auto z = r->output.as<double>();
  REQUIRE(z.size() == n);
  size_t wrong = 0;
  for (size_t i = 0; i < n; ++i)
    wrong += z[i] != 3 * x[i] + y[i];
  CHECK(wrong == 0);
  work_item h;
  h.id = 2;
  h.tenant = "t";
  h.kernel = *histogram;
  h.inputs.push_back(host_buffer{bytes});
  r = (*rt)->run(h);
  REQUIRE(r);
  auto bins = r->output.as<int64_t>();
  REQUIRE(bins.size() == 256);
  std::vector<int64_t> want(256);
  for (auto v : bytes)
    ++want[v];
  CHECK(std::vector<int64_t>(bins.begin(), bins.end()) == want);
  (*rt)->stop();
}

TEST_CASE("the geo kernels run on a real CUDA GPU and agree with the CPU bit "
          "for bit",
          "[devices][gpu][kernels][geo]") {
  auto pip = kernels::parse_kernel("geo.point_in_polygon");
  auto seg = kernels::parse_kernel("geo.segment_intersection");
  REQUIRE(pip);
  REQUIRE(seg);
  if (!kernels::has_gpu_code(*pip, true)) {
    WARN("SKIPPED: no CUDA toolchain at build time, so no geo module");
    return;
  }
  auto found = gpu::discover({});
  size_t cuda = 0;
  for (auto& d : found.devices)
    cuda += d->info().kind == device_kind::cuda_gpu;
  found.devices.clear();
  if (cuda == 0) {
    WARN("SKIPPED: no CUDA GPU on this machine");
    return;
  }
  test::temp_dir dir;
  auto cfg = test::make_config(dir, 1, {});
  cfg.mutable_devices()->set_gpus(true);
  cfg.mutable_tenant(0)->clear_devices();
  cfg.mutable_tenant(0)->add_devices("cuda");
  system_config sc;
  caf::actor_system sys{sc};
  auto rt = actors::runtime::start(sys, cfg);
  REQUIRE(rt);
  // Integer grid coordinates (every degenerate case) and real ones.
  std::mt19937_64 rng{3};
  std::uniform_int_distribution<int> grid{-6, 6};
  std::uniform_real_distribution<double> real{-6, 6};
  size_t n = 1 << 18;
  std::vector<double> a, b;
  for (size_t i = 0; i < n; ++i)
    for (int k = 0; k < 4; ++k) {
      a.push_back(i % 2 ? real(rng) : grid(rng));
      b.push_back(i % 2 ? real(rng) : grid(rng));
    }
  std::vector<double> vertices = {0, 0, 4, 0, 4, 4,  0,  4,  1,  1,  3,
                                  1, 3, 3, 1, 3, -5, -5, -1, -5, -3, -1};
  std::vector<int64_t> rings = {0, 4, 8, 11}, polygons = {0, 2, 3}, which;
  std::vector<double> points;
  for (size_t i = 0; i < n; ++i) {
    points.push_back(i % 2 ? real(rng) : grid(rng));
    points.push_back(i % 2 ? real(rng) : grid(rng));
    which.push_back(int64_t(i % 2));
  }
  work_item s;
  s.id = 1;
  s.tenant = "t";
  s.kernel = *seg;
  s.inputs = {host_buffer{a}, host_buffer{b}};
  auto r = (*rt)->run(s);
  REQUIRE(r);
  CHECK(r->device.rfind("cuda", 0) == 0);
  std::vector<kernels::typed_view> sin{
      {a.data(), a.size(), kernels::dtype::f64},
      {b.data(), b.size(), kernels::dtype::f64}};
  auto want_out = kernels::geo::segment_intersection_cpu(sin);
  auto want = want_out.as<int32_t>();
  auto got = r->output.as<int32_t>();
  CHECK(std::vector<int32_t>(got.begin(), got.end()) ==
        std::vector<int32_t>(want.begin(), want.end()));
  work_item p;
  p.id = 2;
  p.tenant = "t";
  p.kernel = *pip;
  p.inputs = {host_buffer{points}, host_buffer{vertices}, host_buffer{rings},
              host_buffer{polygons}, host_buffer{which}};
  r = (*rt)->run(p);
  REQUIRE(r);
  CHECK(r->device.rfind("cuda", 0) == 0);
  std::vector<kernels::typed_view> pin{
      {points.data(), points.size(), kernels::dtype::f64},
      {vertices.data(), vertices.size(), kernels::dtype::f64},
      {rings.data(), rings.size(), kernels::dtype::i64},
      {polygons.data(), polygons.size(), kernels::dtype::i64},
      {which.data(), which.size(), kernels::dtype::i64}};
  auto where_out = kernels::geo::point_in_polygon_cpu(pin);
  auto where = where_out.as<int32_t>();
  auto gwhere = r->output.as<int32_t>();
  CHECK(std::vector<int32_t>(gwhere.begin(), gwhere.end()) ==
        std::vector<int32_t>(where.begin(), where.end()));
  (*rt)->stop();
}

TEST_CASE("a device actor in a host registers the node's kernel and runs it "
          "with the node's sizes",
          "[devices][gpu][kernels][host]") {
  // As in a device host process: a kernel this process does not have
  // arrives as kernel_code at an id free here (the node's), then items of
  // it with their sizes worked out by the node.
  rig r;
  define_scale_add(*r.fake);
  system_config cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  auto listener = caf::actor_cast<actors::device_listener>(self);
  auto act = self->spawn<caf::detached>(actors::device_impl, r.dev, listener,
                                        actors::device_actor_config{});
  uint8_t id = 0;
  for (unsigned i = kernels::max_kernels; i > 0 && id == 0; --i)
    if (kernels::find(kernel_id(i)) == nullptr)
      id = uint8_t(i);
  REQUIRE(id != 0);
  kernel_code code;
  code.id = id;
  code.name = "test.node_scale_add";
  code.origin = "application";
  code.inputs = {uint8_t(kernels::dtype::f64), uint8_t(kernels::dtype::f64)};
  code.output = uint8_t(kernels::dtype::f64);
  code.format = uint8_t(kernels::gpu_code::format::ptx);
  std::string image =
      std::string{testing::fake_gpu_api::module_magic} + "scale_add\n";
  code.image.assign(image.begin(), image.end());
  code.image.push_back(0);
  code.function = "scale_add";
  code.block = 32;
  self->send(act, code_atom::value, std::vector<kernel_code>{code});
  std::vector<double> x(1001), y(1001);
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = double(i);
    y[i] = 0.5;
  }
  auto request = [&](uint64_t ticket, std::vector<uint64_t> sizes) {
    run_request req;
    req.ticket = ticket;
    req.item.id = ticket;
    req.item.tenant = "t";
    req.item.kernel = kernel_id(id);
    req.item.args.alpha = 2;
    req.item.inputs = {host_buffer{x}, host_buffer{y}};
    req.sizes = std::move(sizes);
    return req;
  };
  // Either a result or a failure, for `ticket`.
  auto outcome = [&](uint64_t ticket) {
    std::variant<work_done, caf::error> got = caf::error{};
    bool seen = false;
    while (!seen)
      self->receive(
          [&](done_atom, uint32_t, std::vector<work_done>& done) {
            for (auto& d : done)
              if (d.id == ticket) {
                got = std::move(d);
                seen = true;
              }
          },
          [&](failed_atom, uint32_t, uint64_t t, caf::error& err) {
            if (t == ticket) {
              got = std::move(err);
              seen = true;
            }
          },
          caf::after(std::chrono::seconds(10)) >>
              [&] { FAIL("no answer for ticket " << ticket); });
    return got;
  };
  // 300 threads, as the node said (not one per output element): grid 10.
  self->send(act, run_atom::value,
             std::vector<run_request>{request(1, {1001, 300})});
  auto first = outcome(1);
  REQUIRE(std::holds_alternative<work_done>(first));
  auto z = std::get<work_done>(first).output.as<double>();
  REQUIRE(z.size() == 1001);
  CHECK(z[0] == 0.5);
  CHECK(z[1000] == 2000.5);
  auto launches = r.fake->function_launches();
  REQUIRE(launches.size() == 1);
  CHECK(launches[0].block == 32);
  CHECK(launches[0].grid == 10);
  CHECK(launches[0].call.output_length == 1001);
  auto* def = kernels::find(kernel_id(id));
  REQUIRE(def != nullptr);
  CHECK(def->sized_by_caller);
  // Without its sizes, or with the sizes of another number of stages: the
  // item fails (and may run elsewhere); the device stays.
  self->send(act, run_atom::value, std::vector<run_request>{request(2, {})});
  auto second = outcome(2);
  REQUIRE(std::holds_alternative<caf::error>(second));
  CHECK(code_of(std::get<caf::error>(second)) == errc::invalid_arguments);
  CHECK_THAT(describe(std::get<caf::error>(second)),
             Catch::Contains("came without its sizes"));
  self->send(act, run_atom::value,
             std::vector<run_request>{request(3, {1001, 300, 5, 5})});
  auto third = outcome(3);
  REQUIRE(std::holds_alternative<caf::error>(third));
  CHECK_THAT(describe(std::get<caf::error>(third)),
             Catch::Contains("sizes for 2 stages, it has 1"));
  // The node says the id is another kernel (a host of another build): its
  // items fail with unknown_kernel, saying why (the balancer sends them
  // elsewhere, and no more of them here).
  code.name = "test.node_other";
  self->send(act, code_atom::value, std::vector<kernel_code>{code});
  self->send(act, run_atom::value,
             std::vector<run_request>{request(4, {1001, 1001})});
  auto fourth = outcome(4);
  REQUIRE(std::holds_alternative<caf::error>(fourth));
  CHECK(code_of(std::get<caf::error>(fourth)) == errc::unknown_kernel);
  CHECK_THAT(describe(std::get<caf::error>(fourth)),
             Catch::Contains("could not be registered here") &&
                 Catch::Contains("is kernel 'test.node_scale_add'"));
  CHECK(r.fake->function_launches().size() == 1);
  self->send_exit(act, caf::exit_reason::user_shutdown);
}

TEST_CASE("a MIG instance acts on its own GPU instance's Xids and the whole "
          "GPU's, not its siblings'",
          "[devices][gpu]") {
  // On GPU instance 2 of its card.
  rig r{4, 2};
  auto raise = [&](uint32_t xid, uint32_t gi) {
    health::gpu_event ev;
    ev.what = xid == 79 ? health::gpu_event::kind::lost
                        : health::gpu_event::kind::xid;
    ev.xid = xid;
    ev.gpu_instance = gi;
    r.monitor->raise("0000:99:00.0", ev);
  };
  // A sibling's Xid 13: not counted, no warning.
  raise(13, 1);
  CHECK_FALSE(r.dev->health());
  CHECK(r.dev->take_warnings().empty());
  CHECK(r.dev->xid_errors() == 0);
  // Its own: counted, a warning (the default policy degrades on 13).
  raise(13, 2);
  CHECK_FALSE(r.dev->health());
  auto warnings = r.dev->take_warnings();
  REQUIRE(warnings.size() == 1);
  CHECK_THAT(warnings[0], Catch::Contains("Xid 13"));
  CHECK(r.dev->xid_errors() == 1);
  // The whole GPU fell off the bus: every instance is lost.
  raise(79, health::gpu_event::whole_gpu);
  CHECK(code_of(r.dev->health()) == errc::device_lost);
  CHECK(r.dev->xid_errors() == 2);
}

TEST_CASE("the Xid policy acts on a GPU's Xids as configured",
          "[devices][gpu]") {
  rig r;
  devices::xid_policy policy;
  policy.set(13, devices::xid_action::ignore);
  policy.set(48, devices::xid_action::degrade);
  policy.set(31, devices::xid_action::isolate);
  r.dev->set_xid_policy(policy);
  auto raise = [&](health::gpu_event::kind what, uint32_t xid) {
    health::gpu_event ev;
    ev.what = what;
    ev.xid = xid;
    r.monitor->raise("0000:99:00.0", ev);
  };
  // Ignored: counted, no warning.
  raise(health::gpu_event::kind::xid, 13);
  CHECK_FALSE(r.dev->health());
  CHECK(r.dev->take_warnings().empty());
  // A device-level code the policy degrades on: a warning, not a loss.
  raise(health::gpu_event::kind::xid, 48);
  CHECK_FALSE(r.dev->health());
  auto warnings = r.dev->take_warnings();
  REQUIRE(warnings.size() == 1);
  CHECK_THAT(warnings[0], Catch::Contains("Xid 48"));
  SECTION("isolated: device_offline, which no restart follows") {
    raise(health::gpu_event::kind::xid, 31);
    auto err = r.dev->health();
    CHECK(code_of(err) == errc::device_offline);
    CHECK_THAT(describe(err), Catch::Contains("fake NVML reported Xid 31"));
    CHECK_THAT(describe(err), Catch::Contains("isolated by the Xid policy"));
    // A reset asked for later does not undo the isolation.
    raise(health::gpu_event::kind::xid, 79);
    CHECK(code_of(r.dev->health()) == errc::device_offline);
    // An operator's online resets the device: it runs again.
    CHECK_FALSE(r.dev->reset());
    CHECK_FALSE(r.dev->health());
    // Every Xid counted, whatever its action.
    CHECK(r.dev->xid_errors() == 4);
  }
  SECTION("a GPU that is gone is reset at least, whatever the code's rule") {
    raise(health::gpu_event::kind::lost, 13);
    CHECK(code_of(r.dev->health()) == errc::device_lost);
    CHECK(r.dev->xid_errors() == 3);
  }
}
