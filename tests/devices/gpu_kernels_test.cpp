// Kernels registered at run time on the GPU backends' host side: a
// registered kernel's CUDA module loaded once and launched with its typed
// arguments, modules the driver refuses, chains through registered kernels,
// the runtime placing them, a signed bundle's PTX and the geo kernels on a
// real CUDA GPU where there is one, and a device actor in a host registering
// the node's kernels. The rest of the GPU backends' host side:
// tests/devices/gpu_device_test.cpp.
#include <catch2/catch.hpp>

#include <caf/all.hpp>

#include "actors/device_actor.hpp"
#include "actors/runtime.hpp"
#include "devices/gpu/discover.hpp"
#include "devices/gpu/gpu_device.hpp"
#include "kernels/geo.hpp"
#include "kernels/random_data.hpp"
#include "messages/errc.hpp"
#include "messages/system_config.hpp"
#include "tests/devices/fake_gpu.hpp"
#include "tests/devices/gpu_rig.hpp"
#include "tests/devices/launch_sync.hpp"
#include "tests/json_fixture.hpp"
#include "tests/kernels/bundle/bundle_fixture.hpp"
#include "tests/runtime_fixture.hpp"

using namespace cohort;
using namespace cohort::devices;
using gpu::status;
using kernels::kernel_id;

namespace {

using testing::gpu_rig;

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

caf::expected<launch_result> run_typed(gpu_rig& r, test::completions& done,
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
  gpu_rig r;
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
  gpu_rig r;
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
  gpu_rig r;
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
  gpu_rig r;
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
