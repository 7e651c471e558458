// An application's own kernels through the public API: registered once,
// named by handle or by name, run on CPU workers and simulated GPUs, typed
// inputs and outputs, and the errors a user meets.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <numeric>
#include <set>

#include <unistd.h>

#include "cohort/cohort.hpp"
#include "tests/kernels/bundle/bundle_fixture.hpp"
#include "tests/temp_dir.hpp"

namespace {

std::atomic<int> cpu_calls{0};

// Clamps i64 values to [0, m] and counts them into m + 1 i32 bins.
cohort::kernel histogram() {
  static auto k = [] {
    cohort::kernel_definition d;
    d.name = "test.histogram";
    d.inputs = {{"values", cohort::dtype::i64}};
    d.output = {"bins", cohort::dtype::i32};
    d.scalars = {"m"};
    d.check = [](const cohort::kernel_args& a,
                 std::span<const uint64_t>) -> std::string {
      if (a.m == 0 || a.m > 1'000'000)
        return "test.histogram: m must be in 1..1000000";
      return {};
    };
    d.output_size = [](const cohort::kernel_args& a,
                       std::span<const uint64_t>) { return a.m + 1; };
    d.flops = [](const cohort::kernel_args&, std::span<const uint64_t> in) {
      return double(in[0]);
    };
    d.cpu = [](const cohort::kernel_args& a, std::span<const cohort::buffer> in,
               cohort::output_span out) {
      ++cpu_calls;
      auto bins = out.as<int32_t>();
      for (auto v : in[0].view<int64_t>()) {
        if (v == -999)
          throw std::runtime_error("poison value -999");
        auto b = std::clamp<int64_t>(v, 0, int64_t(a.m));
        ++bins[size_t(b)];
      }
    };
    return cohort::register_kernel(std::move(d));
  }();
  return k;
}

cohort::work histogram_of(uint64_t id, std::vector<int64_t> values,
                          uint64_t m) {
  cohort::work w;
  w.id = id;
  w.kernel = histogram();
  w.args.m = m;
  w.inputs = {cohort::buffer{std::move(values)}};
  return w;
}

cohort::runtime start(const cohort::test::temp_dir& dir, uint32_t cpu,
                      uint32_t sims) {
  cohort::options opts;
  opts.cpu_workers = cpu;
  opts.simulated_gpus = sims;
  opts.gpus = false;
  opts.audit_path = (dir.path / "audit.log").string();
  return cohort::runtime::start(opts);
}

} // namespace

TEST_CASE("a registered kernel runs on CPU workers and simulated GPUs",
          "[api][kernels]") {
  auto k = histogram();
  CHECK(std::string{cohort::to_string(k)} == "test.histogram");
  CHECK(cohort::kernel_named("test.histogram") == k);
  cohort::test::temp_dir dir;
  for (auto [cpu, sims] : {std::pair{1u, 0u}, std::pair{0u, 2u}}) {
    auto rt = start(dir, cpu, sims);
    std::vector<cohort::future> fs;
    for (uint64_t i = 0; i < 20; ++i)
      fs.push_back(rt.submit(histogram_of(i + 1, {0, 1, 1, 2, 7, -3}, 3)));
    std::set<std::string> devices;
    for (auto& f : fs) {
      auto o = f.wait();
      REQUIRE(o.ok());
      REQUIRE(o->values.type() == cohort::dtype::i32);
      auto bins = o->values.view<int32_t>();
      CHECK(std::vector<int32_t>(bins.begin(), bins.end()) ==
            std::vector<int32_t>{2, 2, 1, 1});
      devices.insert(o->device);
    }
    for (auto& d : devices)
      CHECK(d.rfind(sims > 0 ? "sim" : "cpu", 0) == 0);
    rt.stop();
  }
}

TEST_CASE("a registered kernel's errors are clear and end items once",
          "[api][kernels]") {
  cohort::test::temp_dir dir;
  auto rt = start(dir, 1, 1);
  // Inputs of the wrong type, the wrong count, bad arguments.
  auto wrong = histogram_of(1, {}, 3);
  wrong.inputs = {cohort::buffer{std::vector<float>{1, 2}}};
  auto o = rt.run(wrong);
  CHECK(o.code() == cohort::errc::invalid_arguments);
  CHECK_THAT(o.message(),
             Catch::Contains("input 0 ('values') takes i64, got f32"));
  auto two = histogram_of(2, {1}, 3);
  two.inputs.push_back(two.inputs[0]);
  CHECK(rt.run(two).code() == cohort::errc::invalid_arguments);
  o = rt.run(histogram_of(3, {1}, 0));
  CHECK(o.code() == cohort::errc::invalid_arguments);
  CHECK_THAT(o.message(), Catch::Contains("m must be in 1..1000000"));
  // A value no kernel has.
  cohort::work unknown;
  unknown.id = 4;
  unknown.kernel = static_cast<cohort::kernel>(250);
  unknown.inputs = {cohort::buffer{std::vector<float>{1}}};
  o = rt.run(unknown);
  CHECK(o.code() == cohort::errc::unknown_kernel);
  // The kernel's own failure ends the item, once, with kernel_error, and is
  // not retried on another device.
  auto before = cpu_calls.load();
  o = rt.run(histogram_of(5, {1, -999}, 3));
  CHECK(o.code() == cohort::errc::kernel_error);
  CHECK_THAT(o.message(), Catch::Contains("poison value -999"));
  CHECK(cpu_calls.load() == before + 1);
  // The device is still fine.
  CHECK(rt.run(histogram_of(6, {1}, 3)).ok());
  // A chained stage's input must take what the previous stage produces.
  cohort::work chain;
  chain.id = 7;
  chain.kernel = cohort::kernel::reduce_sum;
  chain.inputs = {cohort::buffer{std::vector<float>{1, 2}}};
  chain.then.push_back({histogram(), {}, {}, 0});
  chain.then.back().args.m = 3;
  o = rt.run(chain);
  CHECK(o.code() == cohort::errc::invalid_arguments);
  CHECK_THAT(o.message(), Catch::Contains("takes i64, the previous stage's "
                                          "output is f32"));
  rt.stop();
}

// A kernel whose rules throw on a poison value of m: check on 13, the
// output size rule on 14, the flops rule on 15, the CPU code on 16.
cohort::kernel thrower() {
  static auto k = [] {
    cohort::kernel_definition d;
    d.name = "test.thrower";
    d.inputs = {{"x", cohort::dtype::f32}};
    d.scalars = {"m"};
    d.check = [](const cohort::kernel_args& a,
                 std::span<const uint64_t>) -> std::string {
      if (a.m == 13)
        throw std::invalid_argument("check saw 13");
      return {};
    };
    d.output_size = [](const cohort::kernel_args& a,
                       std::span<const uint64_t> in) -> uint64_t {
      if (a.m == 14)
        throw 14; // not even a std::exception
      return in[0];
    };
    d.flops = [](const cohort::kernel_args& a,
                 std::span<const uint64_t> in) -> double {
      if (a.m == 15)
        throw std::runtime_error("flops saw 15");
      return double(in[0]);
    };
    d.cpu = [](const cohort::kernel_args& a, std::span<const cohort::buffer> in,
               cohort::output_span out) {
      if (a.m == 16)
        throw std::runtime_error("cpu saw 16");
      auto x = in[0].view<float>();
      std::copy(x.begin(), x.end(), out.as<float>().begin());
    };
    return cohort::register_kernel(std::move(d));
  }();
  return k;
}

cohort::work thrower_of(uint64_t id, uint64_t m) {
  cohort::work w;
  w.id = id;
  w.kernel = thrower();
  w.args.m = m;
  w.inputs = {cohort::buffer{std::vector<float>{1, 2, 3}}};
  return w;
}

TEST_CASE("a registered kernel's throwing rules end its item, not the node",
          "[api][kernels]") {
  cohort::test::temp_dir dir;
  auto rt = start(dir, 1, 1);
  for (uint64_t round = 0; round < 2; ++round) {
    for (auto [m, what] : {std::pair{13, "check threw: check saw 13"},
                           std::pair{14, "output_size threw a non-standard "
                                         "exception"},
                           std::pair{15, "flops threw: flops saw 15"},
                           std::pair{16, "cpu saw 16"}}) {
      INFO("m = " << m);
      auto o = rt.run(thrower_of(round * 100 + m, m));
      CHECK(o.code() == cohort::errc::kernel_error);
      CHECK_THAT(o.message(), Catch::Contains("test.thrower"));
      CHECK_THAT(o.message(), Catch::Contains(what));
    }
  }
  // Many at once, mixed with good items: each ends once, the good ones
  // with their result.
  std::vector<cohort::future> fs;
  for (uint64_t i = 0; i < 40; ++i)
    fs.push_back(rt.submit(thrower_of(1000 + i, i % 2 == 0 ? 1 : 13 + i % 4)));
  for (uint64_t i = 0; i < fs.size(); ++i) {
    auto o = fs[i].wait();
    if (i % 2 == 0) {
      REQUIRE(o.ok());
      CHECK(o->values.view<float>().size() == 3);
    } else {
      CHECK(o.code() == cohort::errc::kernel_error);
    }
  }
  // The balancer is still there: stats answer and good items run.
  auto st = rt.stats();
  CHECK(st.completed >= 20);
  CHECK(st.failed + st.rejected >= 28);
  CHECK(rt.run(thrower_of(2000, 1)).ok());
  rt.stop();
}

TEST_CASE("bad definitions are refused when registered", "[api][kernels]") {
  auto refused = [](cohort::kernel_definition d) {
    try {
      cohort::register_kernel(std::move(d));
    } catch (const cohort::error& e) {
      CHECK(e.code() == cohort::errc::invalid_arguments);
      return std::string{e.what()};
    }
    return std::string{};
  };
  cohort::kernel_definition d;
  d.name = "test.api_bad";
  d.inputs = {{"x", cohort::dtype::f32}};
  CHECK_THAT(refused(d), Catch::Contains("CPU implementation"));
  d.cpu = [](const cohort::kernel_args&, std::span<const cohort::buffer>,
             cohort::output_span) {};
  CHECK_THAT(refused(d), Catch::Contains("output size rule"));
  d.output_size = [](const cohort::kernel_args&, std::span<const uint64_t>) {
    return uint64_t{1};
  };
  d.name = "gemm";
  CHECK_THAT(refused(d), Catch::Contains("already registered"));
  d.name = "Bad Name";
  CHECK_THAT(refused(d), Catch::Contains("not valid"));
  CHECK_FALSE(cohort::kernel_named("Bad Name"));
  // GPU code: the backend's formats, an entry point, a block size.
  d.name = "test.api_gpu_bad";
  d.cuda.kind = cohort::gpu_module::format::hip_code_object;
  d.cuda.image = {1, 2, 3};
  d.cuda.function = "f";
  CHECK_THAT(refused(d), Catch::Contains("PTX, a cubin or a fatbin"));
  d.cuda.kind = cohort::gpu_module::format::ptx;
  d.cuda.function = "no way";
  CHECK_THAT(refused(d), Catch::Contains("not a C identifier"));
  d.cuda.function = "f";
  d.cuda.block = 0;
  CHECK_THAT(refused(d), Catch::Contains("1 to 1024"));
  d.cuda.block = 256;
  d.cuda.image.clear();
  CHECK_THAT(refused(d), Catch::Contains("empty image"));
  CHECK_FALSE(cohort::kernel_named("test.api_gpu_bad"));
  // PTX without its NUL is accepted (the API adds it); the signature says
  // where the kernel came from.
  d.cuda.image = {'.', 'v'};
  auto k = cohort::register_kernel(d);
  auto sig = cohort::signature_of(k);
  REQUIRE(sig);
  CHECK(sig->origin == "application");
  CHECK(sig->inputs.size() == 1);
  CHECK(sig->inputs[0].name == "x");
}

// A signed bundle, as an embedding application meets it: named in the
// config, or loaded at run time; its kernels found by name and run with
// typed buffers; a refusal as a cohort::error.
TEST_CASE("a signed bundle's kernels run through the public API",
          "[api][kernels][bundle]") {
  cohort::test::temp_dir dir;
  auto key = cohort::kernels::bundle::private_key::generate();
  REQUIRE(key);
  auto good = dir.file("good");
  cohort::test::make_bundle(good, "apigood",
                            cohort::test::acme_kernels_text("api"), &*key);
  auto unsigned_dir = dir.file("unsigned");
  cohort::test::make_bundle(unsigned_dir, "apiunsigned",
                            cohort::test::acme_kernels_text("apiu"), nullptr);
  auto pub = cohort::test::write_public_key(dir, *key);
  cohort::options opts;
  opts.config_text = R"(
    devices { cpu_workers: 1 gpus: false
              sim_gpu { name: "sim0" memory_mib: 256 streams: 2 speed: 1 } }
    tenant { tenant: "default" kernels: "api.scale_add" devices: "*" }
    audit_path: ")" + dir.file("audit.log") +
                     R"("
    kernel_bundles { trusted_key: ")" +
                     pub + R"(" load: ")" + good + R"(" }
  )";
  auto rt = cohort::runtime::start(opts);
  auto k = cohort::kernel_named("api.scale_add");
  REQUIRE(k);
  std::set<std::string> devices;
  for (uint64_t i = 1; i <= 12; ++i) {
    cohort::work w;
    w.id = i;
    w.kernel = *k;
    w.args.alpha = 0.5;
    w.inputs = {cohort::buffer{std::vector<double>{2, 4, 8}},
                cohort::buffer{std::vector<double>{1, 1, 1}}};
    auto o = rt.run(w);
    REQUIRE(o.ok());
    REQUIRE(o->values.type() == cohort::dtype::f64);
    auto z = o->values.view<double>();
    CHECK(std::vector<double>(z.begin(), z.end()) ==
          std::vector<double>{2, 3, 5});
    devices.insert(o->device);
  }
  CHECK_FALSE(devices.empty());
  // The manifest's rule refuses unequal lengths at admission.
  cohort::work bad;
  bad.id = 100;
  bad.kernel = *k;
  bad.inputs = {cohort::buffer{std::vector<double>{2, 4}},
                cohort::buffer{std::vector<double>{1}}};
  auto o = rt.run(bad);
  CHECK(o.code() == cohort::errc::invalid_arguments);
  CHECK_THAT(o.message(), Catch::Contains("require 'x == y' does not hold"));
  // Loading at run time: the same bundle again is fine; an unsigned one is
  // refused, and nothing of it registered.
  CHECK(rt.load_kernel_bundle(good) ==
        std::vector<std::string>{"api.scale_add", "api.histogram",
                                 "api.checked_sum"});
  try {
    rt.load_kernel_bundle(unsigned_dir);
    FAIL("an unsigned bundle loaded");
  } catch (const cohort::error& e) {
    CHECK(e.code() == cohort::errc::bundle_refused);
    CHECK_THAT(e.what(), Catch::Contains("unsigned"));
  }
  CHECK_FALSE(cohort::kernel_named("apiu.scale_add"));
  rt.stop();
  try {
    rt.load_kernel_bundle(good);
    FAIL("loaded after stop");
  } catch (const cohort::error& e) {
    CHECK(e.code() == cohort::errc::shutting_down);
  }
}

TEST_CASE("the geo kernels run end to end on CPU workers and simulated GPUs",
          "[api][kernels][geo]") {
  auto pip = cohort::kernel_named("geo.point_in_polygon");
  auto seg = cohort::kernel_named("geo.segment_intersection");
  REQUIRE(pip);
  REQUIRE(seg);
  cohort::test::temp_dir dir;
  for (auto [cpu, sims] : {std::pair{1u, 0u}, std::pair{0u, 2u}}) {
    auto rt = start(dir, cpu, sims);
    // A square with a square hole; points inside, in the hole, on an edge,
    // outside.
    cohort::work w;
    w.id = 1;
    w.kernel = *pip;
    w.inputs = {cohort::buffer{std::vector<double>{1, 1, 5, 5, 10, 5, 11, 5}},
                cohort::buffer{std::vector<double>{0, 0, 10, 0, 10, 10, 0, 10,
                                                   3, 3, 7, 3, 7, 7, 3, 7}},
                cohort::buffer{std::vector<int64_t>{0, 4, 8}},
                cohort::buffer{std::vector<int64_t>{0, 2}},
                cohort::buffer{std::vector<int64_t>{0, 0, 0, 0}}};
    auto o = rt.run(w);
    REQUIRE(o.ok());
    REQUIRE(o->values.type() == cohort::dtype::i32);
    auto where = o->values.view<int32_t>();
    CHECK(std::vector<int32_t>(where.begin(), where.end()) ==
          std::vector<int32_t>{1, 0, 2, 0});
    CHECK(o->device.rfind(sims > 0 ? "sim" : "cpu", 0) == 0);
    cohort::work s;
    s.id = 2;
    s.kernel = *seg;
    s.inputs = {cohort::buffer{std::vector<double>{0, 0, 10, 10, 0, 0, 5, 0}},
                cohort::buffer{std::vector<double>{0, 10, 10, 0, 5, 0, 9, 0}}};
    o = rt.run(s);
    REQUIRE(o.ok());
    auto rel = o->values.view<int32_t>();
    CHECK(std::vector<int32_t>(rel.begin(), rel.end()) ==
          std::vector<int32_t>{1, 2});
    // A shape the kernel cannot take: refused at admission, clearly.
    s.id = 3;
    s.inputs[1] = cohort::buffer{std::vector<double>{0, 10, 10, 0}};
    o = rt.run(s);
    CHECK(o.code() == cohort::errc::invalid_arguments);
    CHECK_THAT(o.message(), Catch::Contains("pair by pair"));
    rt.stop();
  }
}
