// The host side of the GPU backends without a GPU: error mapping, stream
// bookkeeping, staging reuse and the completion path, driven through a fake
// runtime; and the real CUDA and HIP runtimes on a machine without GPUs.
// Kernels registered at run time on GPUs: tests/devices/gpu_kernels_test.cpp.
#include <catch2/catch.hpp>

#include <random>

#include <caf/all.hpp>

#include "actors/device_actor.hpp"
#include "actors/runtime.hpp"
#include "devices/gpu/discover.hpp"
#include "devices/gpu/staging.hpp"
#include "kernels/random_data.hpp"
#include "messages/errc.hpp"
#include "messages/system_config.hpp"
#include "tests/devices/fake_gpu.hpp"
#include "tests/devices/gpu_rig.hpp"
#include "tests/devices/launch_sync.hpp"
#include "tests/json_fixture.hpp"
#include "tests/runtime_fixture.hpp"

using namespace cohort;
using namespace cohort::devices;
using gpu::status;
using kernels::kernel_id;

namespace {

using testing::gpu_rig;

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
  gpu_rig r;
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
  gpu_rig r;
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
  gpu_rig r;
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
  gpu_rig r;
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
  gpu_rig r{2};
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
  gpu_rig r{4};
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
  gpu_rig r{2};
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
  gpu_rig r;
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
  gpu_rig r;
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
  gpu_rig r;
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
  gpu_rig r;
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
  gpu_rig r;
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
  gpu_rig r;
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

TEST_CASE("a MIG instance acts on its own GPU instance's Xids and the whole "
          "GPU's, not its siblings'",
          "[devices][gpu]") {
  // On GPU instance 2 of its card.
  gpu_rig r{4, 2};
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
  gpu_rig r;
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
