// Device-resident objects through the public API (docs/objects.md): put and
// get, items reading objects, outputs kept on a device and chained across
// items, placement that follows the objects, quotas and eviction, handles
// released, and the errors a user meets.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <numeric>
#include <thread>

#include <unistd.h>

#include "cohort/cohort.hpp"
#include "tests/api/api_fixture.hpp"
#include "tests/temp_dir.hpp"

namespace {

cohort::runtime start(const cohort::test::temp_dir& dir,
                      const std::string& devices,
                      const std::string& tenants =
                          "tenant { tenant: \"t\" kernels: \"*\" devices: "
                          "\"*\" } tenant { tenant: \"u\" kernels: \"*\" "
                          "devices: \"*\" }") {
  cohort::options o;
  o.config_text = "devices { " + devices + " gpus: false } " + tenants;
  o.audit_path = (dir.path / "audit.log").string();
  return cohort::runtime::start(o);
}

using cohort::test::code_of;
using cohort::test::ramp;

// Releases are one-way messages: waits until the runtime lists `n` objects.
bool wait_for_objects(cohort::runtime& rt, size_t n) {
  for (int i = 0; i < 400; ++i) {
    if (rt.objects().size() == n)
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

} // namespace

TEST_CASE("an object is put on a device, read by items and got back",
          "[api][objects]") {
  cohort::test::temp_dir dir;
  auto rt = start(dir, "cpu_workers: 1 sim_gpu { name: \"sim0\" memory_mib: "
                       "64 streams: 2 speed: 4 }");
  auto x = ramp(10000);
  auto obj = rt.put("t", cohort::buffer{x}, "sim0");
  REQUIRE(obj);
  CHECK(obj.id() != 0);
  CHECK(obj.tenant() == "t");
  CHECK(obj.type() == cohort::dtype::f32);
  CHECK(obj.size() == x.size());
  CHECK(obj.bytes() == x.size() * 4);
  auto list = rt.objects();
  REQUIRE(list.size() == 1);
  CHECK(list[0].id == obj.id());
  CHECK(list[0].devices == std::vector<std::string>{"sim0"});
  CHECK(list[0].host_copy);
  CHECK(list[0].handles == 1);
  CHECK(list[0].readers == 0);
  CHECK(rt.get(obj).to_vector<float>() == x);
  // An item reads the object in place and the host data beside it.
  auto y = ramp(10000, 0.5f);
  cohort::work w;
  w.id = 1;
  w.tenant = "t";
  w.kernel = cohort::kernel::axpy;
  w.args.alpha = 2.0f;
  w.inputs = {cohort::buffer{obj}, cohort::buffer{y}};
  auto r = rt.run(w);
  REQUIRE(r.ok());
  auto out = r->values.view<float>();
  REQUIRE(out.size() == x.size());
  for (size_t i = 0; i < x.size(); i += 997)
    CHECK(out[i] == Approx(2.0f * x[i] + y[i]));
  // A buffer naming an object has no host elements.
  CHECK(code_of([&] { (void)cohort::buffer{obj}.view<float>(); }) ==
        cohort::errc::invalid_arguments);
  CHECK(cohort::buffer{obj}.object() == obj.id());
}

TEST_CASE("outputs kept on a device chain items without host copies",
          "[api][objects]") {
  cohort::test::temp_dir dir;
  auto rt = start(dir, "cpu_workers: 1 sim_gpu { name: \"sim0\" memory_mib: "
                       "64 streams: 2 speed: 4 }");
  auto x = ramp(4096);
  auto y = ramp(4096, 2.0f);
  auto ox = rt.put("t", cohort::buffer{x});
  cohort::work first;
  first.id = 1;
  first.tenant = "t";
  first.kernel = cohort::kernel::axpy;
  first.args.alpha = 3.0f;
  first.inputs = {cohort::buffer{ox}, cohort::buffer{y}};
  first.keep_on_device = true;
  auto r1 = rt.run(first);
  REQUIRE(r1.ok());
  CHECK(r1->values.empty());
  auto kept = r1->object;
  REQUIRE(kept);
  CHECK(kept.size() == x.size());
  CHECK(kept.tenant() == "t");
  std::vector<float> expect(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    expect[i] = 3.0f * x[i] + y[i];
  auto listed = rt.objects("t");
  REQUIRE(listed.size() == 2);
  auto& lk = listed[1];
  CHECK(lk.id == kept.id());
  // Kept where it was computed, with no host copy.
  CHECK(lk.devices.size() == 1);
  CHECK_FALSE(lk.host_copy);
  // The second item reads the first one's output where it is.
  cohort::work second;
  second.id = 2;
  second.tenant = "t";
  second.kernel = cohort::kernel::reduce_sum;
  second.inputs = {cohort::buffer{kept}};
  auto r2 = rt.run(second);
  REQUIRE(r2.ok());
  CHECK(r2->device == lk.devices[0]);
  double sum = std::accumulate(expect.begin(), expect.end(), 0.0);
  CHECK(r2->values.view<float>()[0] == Approx(sum).epsilon(1e-4));
  CHECK(rt.get(kept).to_vector<float>() == expect);
  // Handles released (the items' inputs hold them too): both objects are
  // freed. The kept one holds the object it was made from while it has no
  // host copy (it may have to be made again from it), so both go together.
  CHECK(wait_for_objects(rt, 2));
  ox = {};
  kept = {};
  r1 = cohort::outcome{cohort::errc::cancelled, ""};
  first = {};
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(rt.objects().size() == 2);
  second = {};
  CHECK(wait_for_objects(rt, 0));
}

TEST_CASE("items follow their objects to the device that holds them",
          "[api][objects]") {
  cohort::test::temp_dir dir;
  auto rt = start(dir, "cpu_workers: 0 "
                       "sim_gpu { name: \"sim0\" memory_mib: 256 streams: 2 "
                       "speed: 1 } "
                       "sim_gpu { name: \"sim1\" memory_mib: 256 streams: 2 "
                       "speed: 1 }");
  // 16 MiB that an item on sim0 would have to move; a small vector beside.
  auto weights = ramp(size_t{4} << 20);
  auto obj = rt.put("t", cohort::buffer{weights}, "sim1");
  auto v = ramp(size_t{4} << 20, 0.25f);
  auto small = cohort::buffer{v};
  int on_holder = 0;
  for (uint64_t i = 0; i < 20; ++i) {
    cohort::work w;
    w.id = i + 1;
    w.tenant = "t";
    w.kernel = cohort::kernel::dot;
    w.inputs = {cohort::buffer{obj}, small};
    auto r = rt.run(w);
    REQUIRE(r.ok());
    on_holder += r->device == "sim1";
  }
  // One item may go to sim0 to measure it (a first run of its kernel and
  // size there); every other one runs where the object is.
  CHECK(on_holder >= 18);
}

TEST_CASE("objects are charged to their tenant and evicted for room",
          "[api][objects]") {
  cohort::test::temp_dir dir;
  auto rt = start(dir,
                  "cpu_workers: 1 sim_gpu { name: \"sim0\" memory_mib: 64 "
                  "streams: 2 speed: 1 }",
                  "tenant { tenant: \"t\" kernels: \"*\" devices: \"*\" "
                  "memory_quota_bytes: 16777216 }");
  auto six = ramp(size_t{6} << 18); // 6 MiB
  auto a = rt.put("t", cohort::buffer{six});
  auto b = rt.put("t", cohort::buffer{six});
  auto h = rt.headroom("t");
  REQUIRE(h.size() == 1);
  CHECK(h[0].memory == size_t{12} << 20);
  // A third would pass the quota: the least recently used copy that
  // nothing reads goes (its host copy stays), and the third is stored.
  (void)rt.get(b); // b is used after a
  auto c = rt.put("t", cohort::buffer{six});
  auto list = rt.objects("t");
  REQUIRE(list.size() == 3);
  CHECK(list[0].id == a.id());
  CHECK(list[0].devices.empty());
  CHECK(list[0].host_copy);
  CHECK(list[1].devices == std::vector<std::string>{"sim0"});
  CHECK(list[2].devices == std::vector<std::string>{"sim0"});
  CHECK(rt.headroom("t")[0].memory == size_t{12} << 20);
  // The evicted object is still read, from its host copy.
  cohort::work w;
  w.tenant = "t";
  w.kernel = cohort::kernel::reduce_sum;
  w.inputs = {cohort::buffer{a}};
  auto r = rt.run(w);
  REQUIRE(r.ok());
  // More than the quota at once is refused.
  auto big = ramp(size_t{20} << 18);
  CHECK(code_of([&] { rt.put("t", cohort::buffer{big}); }) ==
        cohort::errc::over_memory_quota);
  a = {};
  b = {};
  c = {};
  w = {};
  REQUIRE(wait_for_objects(rt, 0));
  CHECK(rt.headroom("t")[0].memory == 0);
}

TEST_CASE("the only copy of an object is spilled to host memory for room",
          "[api][objects]") {
  cohort::test::temp_dir dir;
  auto rt = start(dir,
                  "cpu_workers: 0 sim_gpu { name: \"sim0\" memory_mib: 64 "
                  "streams: 2 speed: 4 }",
                  "tenant { tenant: \"t\" kernels: \"*\" devices: \"*\" "
                  "memory_quota_bytes: 16777216 }");
  auto two = ramp(size_t{1} << 19); // 2 MiB
  auto a = rt.put("t", cohort::buffer{two});
  // Six outputs kept on sim0, 2 MiB each, with no host copy: 14 MiB in all.
  std::vector<cohort::object_ref> kept;
  for (int i = 0; i < 6; ++i) {
    cohort::work w;
    w.tenant = "t";
    w.kernel = cohort::kernel::axpy;
    w.args.alpha = float(i + 1);
    w.inputs = {cohort::buffer{a}, cohort::buffer{two}};
    w.keep_on_device = true;
    auto r = rt.run(w);
    REQUIRE(r.ok());
    REQUIRE(r->object);
    kept.push_back(r->object);
  }
  CHECK(rt.headroom("t")[0].memory == size_t{14} << 20);
  // 5 MiB more: dropping a's copy (it has a host copy) is not enough, so
  // the least recently used kept output goes to host memory first.
  auto five = ramp(size_t{5} << 18);
  auto b = rt.put("t", cohort::buffer{five});
  auto list = rt.objects("t");
  REQUIRE(list.size() == 8);
  CHECK(list[0].id == a.id());
  CHECK(list[0].devices.empty());
  CHECK(list[1].id == kept[0].id());
  CHECK(list[1].devices.empty());
  CHECK(list[1].host_copy);
  for (size_t i = 2; i < 7; ++i) {
    CHECK(list[i].devices == std::vector<std::string>{"sim0"});
    CHECK_FALSE(list[i].host_copy);
  }
  CHECK(list[7].id == b.id());
  CHECK(list[7].devices == std::vector<std::string>{"sim0"});
  CHECK(rt.headroom("t")[0].memory <= size_t{16} << 20);
  // The spilled output still holds its values, and items read it.
  auto back = rt.get(kept[0]).to_vector<float>();
  REQUIRE(back.size() == two.size());
  for (size_t i = 0; i < two.size(); i += 4099)
    CHECK(back[i] == Approx(2.0f * two[i]));
  cohort::work sum;
  sum.tenant = "t";
  sum.kernel = cohort::kernel::reduce_sum;
  sum.inputs = {cohort::buffer{kept[0]}};
  CHECK(rt.run(sum).ok());
}

TEST_CASE("handles are counted right under concurrency", "[api][objects]") {
  cohort::test::temp_dir dir;
  auto rt = start(dir, "cpu_workers: 1 "
                       "sim_gpu { name: \"sim0\" memory_mib: 256 streams: 4 "
                       "speed: 4 } "
                       "sim_gpu { name: \"sim1\" memory_mib: 256 streams: 4 "
                       "speed: 4 }");
  // Threads put objects, copy and drop handles, submit items that read
  // them and keep outputs, all at once; every result is checked, and in
  // the end nothing is left and no memory is charged.
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      auto x = ramp(2048, float(t + 1));
      for (int i = 0; i < 25; ++i) {
        auto obj = rt.put("t", cohort::buffer{x});
        auto copy = obj;
        cohort::work w;
        w.tenant = "t";
        w.kernel = cohort::kernel::axpy;
        w.inputs = {cohort::buffer{copy}, cohort::buffer{obj}};
        w.keep_on_device = i % 2 == 0;
        auto f = rt.submit(std::move(w));
        obj = {};
        copy = {};
        auto o = f.wait();
        if (!o.ok()) {
          ++bad;
          continue;
        }
        auto out = o->object ? rt.get(o->object).to_vector<float>()
                             : o->values.to_vector<float>();
        if (out.size() != x.size() || out[7] != 2.0f * x[7])
          ++bad;
      }
    });
  for (auto& th : threads)
    th.join();
  CHECK(bad == 0);
  CHECK(wait_for_objects(rt, 0));
  for (auto& h : rt.headroom("t"))
    CHECK(h.memory == 0);
}

TEST_CASE("a fleet of CPU workers keeps objects in host memory",
          "[api][objects]") {
  cohort::test::temp_dir dir;
  auto rt = start(dir, "cpu_workers: 2");
  auto x = ramp(1000);
  auto obj = rt.put("t", cohort::buffer{x});
  auto list = rt.objects();
  REQUIRE(list.size() == 1);
  CHECK(list[0].devices.empty());
  CHECK(list[0].host_copy);
  cohort::work w;
  w.tenant = "t";
  w.kernel = cohort::kernel::inclusive_scan;
  w.inputs = {cohort::buffer{obj}};
  w.keep_on_device = true;
  auto r = rt.run(w);
  REQUIRE(r.ok());
  REQUIRE(r->object);
  auto scan = rt.get(r->object).to_vector<float>();
  REQUIRE(scan.size() == x.size());
  CHECK(scan.back() == Approx(std::accumulate(x.begin(), x.end(), 0.0)));
}

TEST_CASE("an end nobody takes releases the object it names",
          "[api][objects]") {
  cohort::test::temp_dir dir;
  auto rt = start(dir, "cpu_workers: 1 sim_gpu { name: \"sim0\" memory_mib: "
                       "64 streams: 2 speed: 4 }");
  auto x = ramp(1000);
  {
    cohort::work w;
    w.tenant = "t";
    w.kernel = cohort::kernel::axpy;
    w.inputs = {cohort::buffer{x}, cohort::buffer{x}};
    w.keep_on_device = true;
    auto f = rt.submit(w);
    REQUIRE(f.wait_for(std::chrono::seconds(20)));
    // Dropped without get.
  }
  CHECK(wait_for_objects(rt, 0));
  // A callback that ignores its result releases it too.
  std::atomic<bool> called{false};
  cohort::work w;
  w.tenant = "t";
  w.kernel = cohort::kernel::axpy;
  w.inputs = {cohort::buffer{x}, cohort::buffer{x}};
  w.keep_on_device = true;
  rt.submit(w, [&](cohort::outcome o) { called = o.ok() && bool(o->object); });
  for (int i = 0; i < 400 && !called; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CHECK(called);
  CHECK(wait_for_objects(rt, 0));
}

TEST_CASE("objects refuse what they cannot do", "[api][objects]") {
  cohort::test::temp_dir dir;
  auto rt = start(dir, "cpu_workers: 1 sim_gpu { name: \"sim0\" memory_mib: "
                       "64 streams: 2 speed: 4 }");
  auto x = ramp(100);
  using cohort::errc;
  CHECK(code_of([&] { rt.put("nobody", cohort::buffer{x}); }) ==
        errc::unknown_tenant);
  CHECK(code_of([&] { rt.put("t", cohort::buffer{}); }) ==
        errc::invalid_arguments);
  CHECK(code_of([&] { rt.put("t", cohort::buffer{x}, "sim9"); }) ==
        errc::unknown_device);
  CHECK(code_of([&] { rt.get(cohort::object_ref{}); }) ==
        errc::invalid_arguments);
  CHECK(code_of([&] { (void)cohort::buffer{cohort::object_ref{}}; }) ==
        errc::invalid_arguments);
  auto obj = rt.put("t", cohort::buffer{x});
  CHECK(code_of([&] { rt.put("t", cohort::buffer{obj}); }) ==
        errc::invalid_arguments);
  // Another tenant's item may not read it.
  cohort::work w;
  w.tenant = "u";
  w.kernel = cohort::kernel::reduce_sum;
  w.inputs = {cohort::buffer{obj}};
  auto r = rt.run(w);
  CHECK(r.code() == errc::not_granted);
  // A gang does not read objects.
  w.tenant = "t";
  w.kernel = cohort::kernel::gemm;
  w.args.m = 10;
  w.args.n = 1;
  w.args.k = 10;
  w.gang = 2;
  w.inputs = {cohort::buffer{obj}, cohort::buffer{ramp(10)}};
  CHECK(rt.run(w).code() == errc::invalid_arguments);
  // Another runtime's object is refused by this one.
  cohort::test::temp_dir other_dir;
  auto other = start(other_dir, "cpu_workers: 1");
  CHECK(code_of([&] { other.get(obj); }) == errc::invalid_arguments);
  cohort::work foreign;
  foreign.tenant = "t";
  foreign.kernel = cohort::kernel::reduce_sum;
  foreign.inputs = {cohort::buffer{obj}};
  CHECK(other.run(foreign).code() == errc::invalid_arguments);
  // A handle outliving its runtime is harmless.
  auto late = obj;
  rt.stop();
  CHECK(code_of([&] { rt.get(late); }) == errc::shutting_down);
}
