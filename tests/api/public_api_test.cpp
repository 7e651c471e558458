// The public API as an application uses it: <cohort/cohort.hpp> alone, no
// CAF, no internal header.
#include <catch2/catch.hpp>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <numeric>
#include <thread>

#include <unistd.h>

#include <future>

#include "cohort/cohort.hpp"
#include "tests/temp_dir.hpp"
#include "tests/tools/cli_fixture.hpp"

namespace {

cohort::runtime start(const cohort::test::temp_dir& dir, uint32_t cpu = 2) {
  cohort::options opts;
  opts.cpu_workers = cpu;
  opts.gpus = false;
  opts.audit_path = (dir.path / "audit.log").string();
  return cohort::runtime::start(opts);
}

std::vector<float> iota(size_t n, float from = 1) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), from);
  return v;
}

cohort::work axpy(uint64_t id, size_t n, float alpha = 2) {
  cohort::work w;
  w.id = id;
  w.kernel = cohort::kernel::axpy;
  w.args.alpha = alpha;
  w.inputs = {cohort::buffer{iota(n)}, cohort::buffer{iota(n, 10)}};
  return w;
}

cohort::work big_gemm(uint64_t id, uint64_t m) {
  cohort::work w;
  w.id = id;
  w.kernel = cohort::kernel::gemm;
  w.args.m = w.args.n = w.args.k = m;
  w.inputs = {cohort::buffer{std::vector<float>(m * m, 0.5f)},
              cohort::buffer{std::vector<float>(m * m, 0.25f)}};
  return w;
}

} // namespace

TEST_CASE("the public API runs work through a future, a callback and run",
          "[api]") {
  cohort::test::temp_dir dir;
  auto rt = start(dir);
  // A future: y = 2x + y.
  auto f = rt.submit(axpy(1, 100));
  CHECK(f.valid());
  CHECK(f.id() == 1);
  auto r = f.get();
  CHECK_FALSE(f.valid());
  CHECK(r.id == 1);
  REQUIRE(r.values.size() == 100);
  CHECK(r.values.type() == cohort::dtype::f32);
  auto v = r.values.view<float>();
  CHECK(v[0] == 2 * 1 + 10);
  CHECK(v[99] == 2 * 100 + 109);
  CHECK(r.device.rfind("cpu", 0) == 0);
  CHECK(r.indices.empty());
  // A callback.
  std::mutex m;
  std::condition_variable cv;
  std::optional<cohort::outcome> got;
  rt.submit(axpy(2, 10, 1), [&](cohort::outcome o) {
    std::lock_guard<std::mutex> guard{m};
    got = std::move(o);
    cv.notify_all();
  });
  {
    std::unique_lock<std::mutex> guard{m};
    REQUIRE(cv.wait_for(guard, std::chrono::seconds{30},
                        [&] { return got.has_value(); }));
  }
  REQUIRE(got->ok());
  CHECK((*got)->id == 2);
  CHECK((*got)->values.view<float>()[0] == 1 + 10);
  // run.
  auto o = rt.run(axpy(3, 4, 0));
  REQUIRE(o);
  CHECK(o.value().values.to_vector<float>() ==
        std::vector<float>{10, 11, 12, 13});
  // topk_cosine returns i64 row indices.
  cohort::work search;
  search.id = 4;
  search.kernel = cohort::kernel::topk_cosine;
  search.args.m = 3;
  search.args.n = 2;
  search.args.top_k = 1;
  search.inputs = {cohort::buffer{std::vector<float>{1, 0, 0, 1, 1, 1}},
                   cohort::buffer{std::vector<float>{0, 2}}};
  auto s = rt.run(search);
  REQUIRE(s);
  REQUIRE(s->indices.type() == cohort::dtype::i64);
  CHECK(s->indices.to_vector<int64_t>() == std::vector<int64_t>{1});
  auto stats = rt.stats();
  CHECK(stats.completed == 4);
  CHECK(stats.admitted == 4);
  CHECK(stats.per_device.size() == 2);
}

TEST_CASE("submit_many keeps the order of its items", "[api]") {
  cohort::test::temp_dir dir;
  auto rt = start(dir);
  std::vector<cohort::work> items;
  for (uint64_t i = 1; i <= 50; ++i)
    items.push_back(axpy(i, 8, float(i)));
  // One with an f64 input among them is refused on its own.
  items[10].inputs[0] = cohort::buffer{std::vector<double>(8, 1.0)};
  auto futures = rt.submit_many(std::move(items));
  REQUIRE(futures.size() == 50);
  for (uint64_t i = 1; i <= 50; ++i) {
    auto o = futures[i - 1].wait();
    if (i == 11) {
      CHECK(o.code() == cohort::errc::invalid_arguments);
      CHECK_THAT(o.message(), Catch::Contains("f64"));
      continue;
    }
    REQUIRE(o);
    CHECK(o->id == i);
    CHECK(o->values.view<float>()[0] == float(i) * 1 + 10);
  }
  // The callback form: one call per item.
  std::mutex m;
  std::map<uint64_t, int> ends;
  std::vector<cohort::work> more;
  for (uint64_t i = 100; i < 120; ++i)
    more.push_back(axpy(i, 8));
  std::atomic<int> calls{0};
  rt.submit_many(std::move(more), [&](uint64_t id, cohort::outcome o) {
    std::lock_guard<std::mutex> guard{m};
    ends[id] += o.ok() ? 1 : 100;
    ++calls;
  });
  for (int i = 0; i < 3000 && calls.load() < 20; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds{10});
  REQUIRE(calls.load() == 20);
  for (uint64_t i = 100; i < 120; ++i)
    CHECK(ends[i] == 1);
}

TEST_CASE("buffers carry their element type and wrap the caller's memory",
          "[api]") {
  using cohort::dtype;
  CHECK(cohort::buffer{std::vector<double>{1, 2}}.type() == dtype::f64);
  CHECK(cohort::buffer{std::vector<int32_t>{1}}.type() == dtype::i32);
  CHECK(cohort::buffer{std::vector<int64_t>{1}}.bytes() == 8);
  CHECK(cohort::buffer{std::vector<uint8_t>{1, 2, 3}}.bytes() == 3);
  CHECK(cohort::element_size(dtype::f64) == 8);
  CHECK(std::string{cohort::to_string(dtype::u8)} == "u8");
  cohort::buffer ints{std::vector<int32_t>{1, 2}};
  CHECK_THROWS_AS(ints.view<float>(), cohort::error);
  try {
    (void)ints.view<float>();
  } catch (const cohort::error& e) {
    CHECK(e.code() == cohort::errc::invalid_arguments);
    CHECK_THAT(e.what(), Catch::Contains("i32"));
  }
  // A vector moved in is not copied.
  std::vector<float> values(1000, 1.0f);
  const float* where = values.data();
  cohort::buffer owned{std::move(values)};
  CHECK(owned.data() == where);
  // Wrapped memory: no copy, and the owner lives while Cohort holds it.
  auto memory = std::make_shared<std::vector<float>>(iota(64));
  auto wrapped = cohort::buffer::wrap(memory->data(), memory->size(), memory);
  CHECK(wrapped.data() == memory->data());
  CHECK(memory.use_count() == 2);
  cohort::test::temp_dir dir;
  auto rt = start(dir, 1);
  cohort::work w;
  w.id = 9;
  w.kernel = cohort::kernel::reduce_sum;
  w.inputs = {wrapped};
  std::weak_ptr<std::vector<float>> watch = memory;
  memory.reset();
  wrapped = {};
  // Only the item holds the memory now; it is read after the caller let go.
  auto o = rt.run(std::move(w));
  REQUIRE(o);
  CHECK(o->values.view<float>()[0] == 64 * 65 / 2);
  rt.stop();
  CHECK(watch.expired());
  // An input of another type than the kernel takes is a clear error.
  auto rt2 = start(dir, 1);
  cohort::work bad = axpy(5, 4);
  bad.inputs[1] = cohort::buffer{std::vector<uint8_t>(4, 1)};
  auto refused = rt2.run(bad);
  CHECK(refused.code() == cohort::errc::invalid_arguments);
  CHECK_THAT(refused.message(), Catch::Contains("takes f32, got u8"));
  CHECK_THROWS_AS(rt2.submit(bad).get(), cohort::error);
}

TEST_CASE("cancel by id ends every such item exactly once", "[api]") {
  cohort::test::temp_dir dir;
  auto rt = start(dir, 1);
  // One worker, twenty products that take a while: most still wait when
  // the cancel arrives (made first, so that submitting takes no time).
  std::vector<cohort::work> items;
  for (int i = 0; i < 20; ++i)
    items.push_back(big_gemm(7, 256));
  std::vector<cohort::future> futures;
  for (auto& w : items)
    futures.push_back(rt.submit(std::move(w)));
  auto other = rt.submit(axpy(8, 16));
  rt.cancel(7);
  int cancelled = 0;
  int done = 0;
  for (auto& f : futures) {
    auto o = f.wait();
    CHECK_FALSE(f.valid()); // one end, taken once
    if (o.code() == cohort::errc::cancelled)
      ++cancelled;
    else if (o.ok())
      ++done;
  }
  CHECK(cancelled + done == 20);
  CHECK(cancelled >= 10);
  // Another id is untouched.
  CHECK(other.wait().ok());
  // Cancelling an id with nothing in flight does nothing.
  rt.cancel(12345);
  CHECK(rt.run(axpy(12345, 4)).ok());
}

TEST_CASE("cancel of one future and run with a timeout", "[api]") {
  cohort::test::temp_dir dir;
  auto rt = start(dir, 1);
  // The one worker is busy long enough (tens of milliseconds) that the
  // cancel reaches the balancer while the second item still waits, also
  // on a loaded machine (with a 256 one it sometimes had already run).
  auto busy = rt.submit(big_gemm(1, 640));
  auto f = rt.submit(big_gemm(2, 256));
  rt.cancel(f);
  auto o = f.wait();
  if (o.ok())
    UNSCOPED_INFO("ended ok on " << o->device << " after " << o->attempts
                                 << " placement(s)");
  CHECK(o.code() == cohort::errc::cancelled);
  CHECK(busy.wait().ok());
  auto slow = rt.run(big_gemm(3, 768), std::chrono::milliseconds{1});
  CHECK(slow.code() == cohort::errc::timed_out);
  auto zero = rt.run(axpy(4, 4), std::chrono::milliseconds{0});
  CHECK(zero.code() == cohort::errc::invalid_arguments);
  // An empty future says so.
  cohort::future empty;
  CHECK(empty.wait().code() == cohort::errc::invalid_arguments);
}

TEST_CASE("a ticket cancels the one item submitted with a callback",
          "[api]") {
  cohort::test::temp_dir dir;
  // One item a thousand seconds: the others wait for as long as the test
  // looks.
  cohort::options opts;
  opts.config_text = "devices { cpu_workers: 1 gpus: false } tenant { "
                     "tenant: \"t\" kernels: \"*\" devices: \"*\" "
                     "rate_limit { items_per_second: 0.001 burst: 1 } "
                     "on_limit: QUEUE queue_timeout_ms: 600000 }";
  opts.audit_path = (dir.path / "t.log").string();
  auto rt = cohort::runtime::start(opts);
  std::mutex mtx;
  std::condition_variable cv;
  // The ends in the order they came: (which submission, its error).
  std::vector<std::pair<int, cohort::errc>> ends;
  auto submit = [&](int which, uint64_t id) {
    auto w = axpy(id, 8);
    w.tenant = "t";
    return rt.submit(std::move(w), [&, which](cohort::outcome o) {
      std::lock_guard guard{mtx};
      ends.emplace_back(which, o.ok() ? cohort::errc::none : o.code());
      cv.notify_all();
    });
  };
  auto wait_ends = [&](size_t n) {
    std::unique_lock guard{mtx};
    return cv.wait_for(guard, std::chrono::seconds{30},
                       [&] { return ends.size() >= n; });
  };
  auto first = submit(1, 1);
  REQUIRE(wait_ends(1));
  auto second = submit(2, 2);
  auto third = submit(3, 2); // the same id: only the second is cancelled
  CHECK(second.valid());
  rt.cancel(second);
  REQUIRE(wait_ends(2));
  // A ticket of an item that ended cancels nothing.
  rt.cancel(first);
  rt.cancel(second);
  auto live = rt.items();
  REQUIRE(live.size() == 1);
  CHECK(live[0].state == "held");
  rt.cancel(third);
  REQUIRE(wait_ends(3));
  {
    std::lock_guard guard{mtx};
    CHECK(ends == std::vector<std::pair<int, cohort::errc>>{
                      {1, cohort::errc::none},
                      {2, cohort::errc::cancelled},
                      {3, cohort::errc::cancelled}});
  }
  CHECK(rt.stats().cancelled == 2);
  CHECK_FALSE(cohort::ticket{}.valid());
}

TEST_CASE("the public runtime refuses bad options and ends work after stop",
          "[api]") {
  cohort::test::temp_dir dir;
  cohort::options bad;
  bad.config_text = "devices { cpu_workers: 1 } tenant { tenant: ";
  bad.audit_path = (dir.path / "a.log").string();
  try {
    cohort::runtime::start(bad);
    FAIL("a broken config started");
  } catch (const cohort::error& e) {
    CHECK(e.code() == cohort::errc::malformed_config);
  }
  // A scheduler out of bounds is refused before the actor system starts
  // its threads (4294967295 of them were tried).
  for (auto threads : {"4294967295", "100000", "0"}) {
    cohort::options many;
    many.config_text = std::string{"devices { cpu_workers: 1 } scheduler { "
                                   "threads: "} +
                       threads + " }";
    many.audit_path = (dir.path / "s.log").string();
    try {
      cohort::runtime::start(many);
      FAIL("scheduler threads " << threads << " started");
    } catch (const cohort::error& e) {
      CHECK(e.code() == cohort::errc::malformed_config);
      CHECK_THAT(e.what(), Catch::Contains("threads is"));
    }
  }
  cohort::options both;
  both.config_text = "devices { cpu_workers: 1 }";
  both.cpu_workers = 2;
  CHECK_THROWS_AS(cohort::runtime::start(both), cohort::error);
  cohort::options missing;
  missing.config_file = (dir.path / "nowhere.textproto").string();
  CHECK_THROWS_AS(cohort::runtime::start(missing), cohort::error);
  // A config as text: its tenants and devices.
  cohort::options text;
  text.config_text = "devices { cpu_workers: 1 gpus: false "
                     "sim_gpu { name: \"sim0\" memory_mib: 64 streams: 2 "
                     "speed: 1 } } tenant { tenant: \"t\" kernels: \"*\" "
                     "devices: \"*\" }";
  text.audit_path = (dir.path / "b.log").string();
  auto rt = cohort::runtime::start(text);
  auto devices = rt.devices();
  REQUIRE(devices.size() == 2);
  CHECK(devices[0].name == "cpu0");
  CHECK(devices[1].name == "sim0");
  CHECK(devices[1].simulated);
  CHECK(devices[1].memory_bytes == uint64_t{64} << 20);
  auto w = axpy(1, 4);
  CHECK(rt.run(w).code() == cohort::errc::unknown_tenant);
  w.tenant = "t";
  CHECK(rt.run(w).ok());
  CHECK(rt.audit_path() == text.audit_path);
  rt.stop();
  CHECK(rt.run(w).code() == cohort::errc::shutting_down);
  CHECK(rt.submit(w).wait().code() == cohort::errc::shutting_down);
  // The final counters stay readable, and the devices.
  CHECK(rt.stats().completed == 1);
  CHECK(rt.devices().size() == 2);
  // What the header says of the other calls after stop(): shutting_down.
  auto shutting = [](auto&& call) {
    try {
      call();
      return false;
    } catch (const cohort::error& e) {
      return e.code() == cohort::errc::shutting_down;
    }
  };
  CHECK(shutting([&] { rt.items(); }));
  CHECK(shutting([&] { rt.item(1); }));
  CHECK(shutting([&] { rt.cancel_job(1); }));
  CHECK(shutting([&] { rt.cancel_tenant("t"); }));
  CHECK(shutting([&] { rt.cancel_client(rt.client()); }));
  CHECK(shutting([&] { rt.start_trace(); }));
  CHECK(shutting([&] { rt.stop_trace(); }));
  CHECK(shutting([&] { rt.headroom(); }));
  CHECK(shutting(
      [&] { rt.put("t", cohort::buffer{std::vector<float>{1, 2}}); }));
  CHECK(shutting([&] { rt.load_kernel_bundle(dir.path.string()); }));
  rt.stop(); // again: nothing more
}

TEST_CASE("a moved-from runtime says so, and runtimes in statics stop at exit",
          "[api]") {
  cohort::test::temp_dir dir;
  cohort::options opts;
  opts.cpu_workers = 1;
  opts.gpus = false;
  opts.audit_path = (dir.path / "moved.log").string();
  auto a = cohort::runtime::start(opts);
  auto b = std::move(a);
  auto moved_from = [](auto&& call) {
    try {
      call();
      return false;
    } catch (const cohort::error& e) {
      return e.code() == cohort::errc::invalid_arguments &&
             std::string{e.what()}.find("moved from") != std::string::npos;
    }
  };
  CHECK(moved_from([&] { (void) a.submit(axpy(1, 4)); }));
  CHECK(moved_from([&] { a.run(axpy(2, 4)); }));
  CHECK(moved_from([&] { a.submit(axpy(3, 4), [](cohort::outcome) {}); }));
  CHECK(moved_from([&] { a.stats(); }));
  CHECK(moved_from([&] { a.devices(); }));
  CHECK(moved_from([&] { a.items(); }));
  CHECK(moved_from([&] { a.audit_path(); }));
  a.stop(); // nothing to stop
  CHECK(b.run(axpy(4, 4)).ok());
  // Moved back: it works again.
  a = std::move(b);
  CHECK(a.run(axpy(5, 4)).ok());
  a.stop();
  // Runtimes in a global, a function-local static and a static moved into,
  // with items in flight when main returns: the process exits 0 and every
  // item's callback ran.
  // Under ASan without the leak check: this program checks the teardown at
  // exit, where LeakSanitizer sometimes found OpenSSL's per-thread state
  // of a thread still held (904 bytes from CRYPTO_zalloc, 1 run in 5); the
  // rest of the suite keeps the check.
  auto r = cohort::test::run_command(
      "ASAN_OPTIONS=\"${ASAN_OPTIONS:-}:detect_leaks=0\" "
      "COHORT_STATIC_AUDIT_DIR=" +
      dir.path.string() + " " + COHORT_STATIC_RUNTIME);
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK_THAT(r.output, Catch::Contains("static_runtime: 16 items ran"));
  CHECK_THAT(r.output, Catch::Contains("static_runtime: 128 callbacks ran"));
  CHECK_THAT(r.output, !Catch::Contains("ERROR") && !Catch::Contains("abort"));
}

TEST_CASE("a device view lists the GPUs it reaches directly", "[api]") {
  cohort::test::temp_dir dir;
  cohort::options opts;
  opts.config_text = "devices { cpu_workers: 0 gpus: false "
                     "sim_gpu { name: \"sim0\" memory_mib: 64 streams: 1 "
                     "speed: 1 nvlink: \"sim1\" p2p: \"sim2\" } "
                     "sim_gpu { name: \"sim1\" memory_mib: 64 streams: 1 "
                     "speed: 1 } "
                     "sim_gpu { name: \"sim2\" memory_mib: 64 streams: 1 "
                     "speed: 1 } }";
  opts.audit_path = (dir.path / "audit.log").string();
  auto rt = cohort::runtime::start(opts);
  auto devices = rt.devices();
  REQUIRE(devices.size() == 3);
  REQUIRE(devices[0].links.size() == 2);
  CHECK(devices[0].links[0].peer == "sim1");
  CHECK(devices[0].links[0].kind == "NVLink");
  CHECK(devices[0].links[1].peer == "sim2");
  CHECK(devices[0].links[1].kind == "PCIe P2P");
  REQUIRE(devices[1].links.size() == 1);
  CHECK(devices[1].links[0].peer == "sim0");
  CHECK(devices[2].links.size() == 1);
  // A link to a device the config does not have is refused.
  opts.config_text = "devices { cpu_workers: 0 gpus: false "
                     "sim_gpu { name: \"sim0\" memory_mib: 64 streams: 1 "
                     "speed: 1 nvlink: \"sim7\" } }";
  try {
    cohort::runtime::start(opts);
    FAIL("started");
  } catch (const cohort::error& e) {
    CHECK(e.code() == cohort::errc::malformed_config);
    CHECK_THAT(e.what(), Catch::Contains("'sim7'"));
  }
}

TEST_CASE("kernels by name and the version", "[api]") {
  CHECK(cohort::kernel_named("gemm") == cohort::kernel::gemm);
  CHECK_FALSE(cohort::kernel_named("conv2d").has_value());
  CHECK(std::string{cohort::to_string(cohort::kernel::topk_cosine)} ==
        "topk_cosine");
  CHECK(std::string{cohort::version()}.find('.') != std::string::npos);
  CHECK(cohort::to_string(cohort::errc::cancelled) == "cancelled");
}

TEST_CASE("headroom and dry runs through the public API", "[api]") {
  cohort::test::temp_dir dir;
  cohort::options text;
  text.config_text =
      "devices { cpu_workers: 1 gpus: false "
      "sim_gpu { name: \"sim0\" memory_mib: 64 streams: 2 speed: 1 } } "
      "tenant { tenant: \"t\" kernels: \"*\" devices: \"*\" "
      "memory_quota_bytes: 16777216 }";
  text.audit_path = (dir.path / "h.log").string();
  auto rt = cohort::runtime::start(text);
  auto all = rt.headroom();
  REQUIRE(all.size() == 1);
  CHECK(all[0].tenant == "t");
  CHECK(all[0].memory_quota == uint64_t{16} << 20);
  CHECK(all[0].cpu_workers == 1);
  REQUIRE(all[0].devices.size() == 1);
  CHECK(all[0].devices[0].device == "sim0");
  CHECK(all[0].devices[0].headroom > 0);
  CHECK(all[0].devices[0].headroom <= uint64_t{16} << 20);
  try {
    rt.headroom("nobody");
    FAIL("headroom of an unknown tenant");
  } catch (const cohort::error& e) {
    CHECK(e.code() == cohort::errc::unknown_tenant);
  }
  // 8 MiB fits the 16 MiB quota; 8 MiB more fits; a third does not.
  std::vector<cohort::dry_run_step> plan = {
      {"t", "sim0", uint64_t{8} << 20, "", "a", ""},
      {"t", "sim0", uint64_t{8} << 20, "", "b", ""},
      {"t", "sim0", uint64_t{8} << 20, "", "c", ""},
  };
  auto report = rt.dry_run(plan);
  CHECK_FALSE(report.ok);
  REQUIRE(report.steps.size() == 3);
  CHECK(report.steps[0].ok);
  CHECK(report.steps[1].ok);
  CHECK_FALSE(report.steps[2].ok);
  CHECK(report.steps[2].error == "over_memory_quota");
  CHECK(report.steps[2].soft);
  // Nothing was allocated: the same plan less its last step passes.
  plan.pop_back();
  CHECK(rt.dry_run(plan).ok);
  CHECK_THROWS_AS(rt.dry_run({}), cohort::error);
}

TEST_CASE("a callback may stop the runtime, or destroy it", "[api]") {
  cohort::test::temp_dir dir;
  SECTION("stop") {
    auto rt = start(dir);
    std::promise<bool> stopped;
    rt.submit(axpy(1, 8), [&](cohort::outcome o) {
      rt.stop(); // must not wait for this very callback
      stopped.set_value(o.ok());
    });
    auto f = stopped.get_future();
    REQUIRE(f.wait_for(std::chrono::seconds{30}) == std::future_status::ready);
    CHECK(f.get());
    // After stop, an item ends at once with shutting_down.
    auto late = rt.submit(axpy(2, 8)).wait();
    CHECK_FALSE(late.ok());
    CHECK(late.code() == cohort::errc::shutting_down);
  }
  SECTION("destroy") {
    auto rt = std::make_unique<cohort::runtime>(start(dir));
    std::promise<void> gone;
    rt->submit(axpy(1, 8), [&](cohort::outcome) {
      rt.reset(); // the callback thread outlives its runtime
      gone.set_value();
    });
    auto f = gone.get_future();
    REQUIRE(f.wait_for(std::chrono::seconds{30}) == std::future_status::ready);
    CHECK(rt == nullptr);
  }
}

TEST_CASE("work a callback submits goes out before that thread waits, "
          "cancels or stops",
          "[api]") {
  cohort::test::temp_dir dir;
  auto rt = start(dir);
  auto within = [](auto& fut) {
    return fut.wait_for(std::chrono::seconds{30}) == std::future_status::ready;
  };
  SECTION("run and a future's wait from a callback") {
    std::promise<std::pair<bool, bool>> done;
    rt.submit(axpy(1, 8), [&](cohort::outcome) {
      // Each would wait forever for an item the hub still held.
      auto ran = rt.run(axpy(2, 8), std::chrono::seconds{20});
      auto f = rt.submit(axpy(3, 8));
      auto waited = f.wait_for(std::chrono::seconds{20});
      done.set_value({ran.ok(), waited});
    });
    auto f = done.get_future();
    REQUIRE(within(f));
    auto [ran, waited] = f.get();
    CHECK(ran);
    CHECK(waited);
  }
  SECTION("cancel from a callback reaches what it just submitted") {
    std::promise<cohort::errc> ended;
    rt.submit(axpy(1, 8), [&](cohort::outcome) {
      rt.submit(big_gemm(77, 640), [&](cohort::outcome o) {
        ended.set_value(o.ok() ? cohort::errc::invalid_arguments : o.code());
      });
      // Sent after the item, not before it: the item ends cancelled. (The
      // gemm takes tens of milliseconds, so the cancel comes while it is
      // still in flight; sent first, it would find nothing and the item
      // would end with its result.)
      rt.cancel(77);
    });
    auto f = ended.get_future();
    REQUIRE(within(f));
    CHECK(f.get() == cohort::errc::cancelled);
  }
  SECTION("stop from a callback ends what it submitted") {
    std::atomic<int> ends{0};
    std::promise<void> stopped;
    rt.submit(axpy(1, 8), [&](cohort::outcome) {
      for (uint64_t id = 10; id < 20; ++id)
        rt.submit(axpy(id, 8), [&](cohort::outcome o) { ends += o.ok(); });
      rt.stop();
      stopped.set_value();
    });
    auto f = stopped.get_future();
    REQUIRE(within(f));
    // stop() from a callback returns before the callbacks queued behind
    // it run; a second stop from here waits for them.
    rt.stop();
    CHECK(ends.load() == 10);
  }
  SECTION("a chain of callbacks, each item ending once") {
    constexpr uint64_t total = 3000;
    std::mutex m;
    std::map<uint64_t, int> seen;
    std::atomic<uint64_t> sent{0};
    std::promise<void> all;
    std::atomic<int> failed{0};
    std::function<void(cohort::outcome)> on_end = [&](cohort::outcome o) {
      size_t count;
      {
        std::lock_guard<std::mutex> guard{m};
        if (o.ok())
          ++seen[o->id];
        else
          ++failed;
        count = seen.size();
      }
      auto next = ++sent;
      if (next <= total)
        rt.submit(axpy(next, 16), on_end);
      if (count == total)
        all.set_value();
    };
    for (int i = 0; i < 64; ++i)
      rt.submit(axpy(++sent, 16), on_end);
    auto f = all.get_future();
    REQUIRE(within(f));
    rt.stop();
    std::lock_guard<std::mutex> guard{m};
    CHECK(failed == 0);
    CHECK(seen.size() == total);
    for (auto& [id, n] : seen)
      CHECK(n == 1);
  }
}

TEST_CASE("after_callbacks runs once the callbacks of a batch returned",
          "[api]") {
  cohort::test::temp_dir dir;
  auto rt = start(dir);
  // Elsewhere than on the callback thread: at once, on the calling thread.
  auto here = std::this_thread::get_id();
  std::thread::id ran_on;
  rt.after_callbacks([&] { ran_on = std::this_thread::get_id(); });
  CHECK(ran_on == here);
  CHECK_THROWS_AS(rt.after_callbacks({}), cohort::error);
  // From callbacks: after the one that asked has returned, on the callback
  // thread, once per request, a request made by such a function included.
  std::mutex m;
  std::vector<std::string> events;
  std::promise<void> done;
  auto log = [&](std::string e) {
    std::lock_guard<std::mutex> guard{m};
    events.push_back(std::move(e));
  };
  rt.submit(axpy(1, 8), [&](cohort::outcome) {
    rt.after_callbacks([&] {
      log("after");
      rt.after_callbacks([&] {
        log("after the after");
        done.set_value();
      });
    });
    log("callback returns");
  });
  auto f = done.get_future();
  REQUIRE(f.wait_for(std::chrono::seconds{30}) == std::future_status::ready);
  rt.stop();
  std::lock_guard<std::mutex> guard{m};
  CHECK(events == std::vector<std::string>{"callback returns", "after",
                                           "after the after"});
}

TEST_CASE("work a callback holds while another thread stops the runtime "
          "ends exactly once",
          "[api]") {
  cohort::test::temp_dir dir;
  auto rt = std::make_unique<cohort::runtime>(start(dir));
  std::mutex m;
  std::map<uint64_t, int> ends;
  std::map<uint64_t, cohort::errc> codes;
  std::promise<void> holding;
  std::promise<void> go_on;
  auto go = go_on.get_future().share();
  rt->submit(axpy(1, 8), [&](cohort::outcome) {
    for (uint64_t id = 100; id < 150; ++id)
      rt->submit(axpy(id, 8), [&, id](cohort::outcome o) {
        std::lock_guard<std::mutex> guard{m};
        ++ends[id];
        if (!o.ok())
          codes[id] = o.code();
      });
    holding.set_value();
    // Blocks with its 50 submissions held while stop() begins.
    go.wait();
  });
  holding.get_future().wait();
  std::thread stopper{[&] { rt->stop(); }};
  std::this_thread::sleep_for(std::chrono::milliseconds{200});
  go_on.set_value();
  stopper.join();
  rt.reset();
  std::lock_guard<std::mutex> guard{m};
  CHECK(ends.size() == 50);
  for (auto& [id, n] : ends)
    CHECK(n == 1);
  for (auto& [id, code] : codes)
    CHECK(code == cohort::errc::shutting_down);
}

TEST_CASE("a callback may submit more items than one message carries",
          "[api]") {
  // 70,000 items from one callback: held, then sent as two messages (at
  // most 65,536 items each). Each is admitted or refused on its own (the
  // tenant's in-flight cap is 1,024), none as part of an oversized batch,
  // and each ends once.
  cohort::test::temp_dir dir;
  auto rt = start(dir);
  constexpr uint64_t total = 70000;
  std::atomic<uint64_t> ok{0};
  std::atomic<uint64_t> oversized{0};
  std::atomic<uint64_t> ended{0};
  std::promise<void> all;
  rt.submit(axpy(1, 1), [&](cohort::outcome) {
    for (uint64_t id = 0; id < total; ++id)
      rt.submit(axpy(id, 1), [&](cohort::outcome o) {
        ok += o.ok();
        oversized += !o.ok() && o.code() == cohort::errc::invalid_arguments;
        if (++ended == total)
          all.set_value();
      });
  });
  auto f = all.get_future();
  REQUIRE(f.wait_for(std::chrono::seconds{120}) == std::future_status::ready);
  CHECK(oversized == 0);
  CHECK(ok >= 1024);
}
