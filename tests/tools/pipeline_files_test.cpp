// Pipelines over real data: stages that name registered kernels, read .npy
// files (split into batches or whole) and earlier stages' outputs, and
// write their outputs to .npy files; and every way such a spec is refused.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>

#include "kernels/registry.hpp"
#include "messages/convert.hpp"
#include "tests/tools/cli_fixture.hpp"
#include "tools/npy.hpp"
#include "tools/pipeline.hpp"

using namespace cohort;
using test::cohort_cli;
using test::write;
namespace npy = cohort::tools::npy;

namespace {

template <class T>
std::string save(const test::temp_dir& dir, const std::string& name,
                 const std::vector<T>& values, std::vector<uint64_t> shape) {
  auto path = dir.file(name);
  auto w = npy::writer::create(path, kernels::dtype_of<T>::value, shape);
  REQUIRE(w);
  REQUIRE(!w->write(
      0, {values.data(), values.size(), kernels::dtype_of<T>::value}));
  REQUIRE(!w->commit());
  return path;
}

template <class T> std::vector<T> load(const std::string& path) {
  auto r = npy::reader::open(path);
  REQUIRE(r);
  REQUIRE(r->info().type == kernels::dtype_of<T>::value);
  auto all = r->rows(0, r->info().rows);
  REQUIRE(all);
  auto xs = all->view().as<T>();
  return {xs.begin(), xs.end()};
}

// test.root: the square root of each f64; a negative value fails the item.
void register_root() {
  static bool done = [] {
    kernels::kernel_def d;
    d.name = "test.root";
    d.signature.inputs = {{"x", kernels::dtype::f64}};
    d.signature.output = {"y", kernels::dtype::f64};
    d.output_elements = [](const kernels::kernel_args&,
                           kernels::input_lengths in) { return in[0]; };
    d.cpu = [](const kernels::kernel_args&, kernels::typed_inputs in) {
      kernels::kernel_output out;
      out.resize(kernels::dtype::f64, in[0].size);
      auto y = out.as<double>();
      auto x = in[0].as<double>();
      for (size_t i = 0; i < x.size(); ++i) {
        if (x[i] < 0)
          throw kernels::kernel_failure("test.root: a negative value");
        y[i] = std::sqrt(x[i]);
      }
      return out;
    };
    std::string why;
    REQUIRE(kernels::register_kernel(std::move(d), why));
    return true;
  }();
  (void)done;
}

const char* runtime_text = R"(
runtime {
  devices {
    cpu_workers: 2
    gpus: false
    sim_gpu { name: "sim0" memory_mib: 256 streams: 2 speed: 1 }
    sim_gpu { name: "sim1" memory_mib: 256 streams: 2 speed: 2 }
  }
  tenant { tenant: "t" kernels: "*" devices: "*" }
}
tenant: "t"
)";

caf::expected<tools::pipeline_report> run(const test::temp_dir& dir,
                                          const std::string& text) {
  system_config cfg;
  caf::actor_system sys{cfg};
  auto spec = load_pipeline(
      write(dir, "p.textproto", text + std::string{runtime_text}));
  if (!spec)
    return spec.error();
  spec->mutable_runtime()->set_audit_path(dir.file("audit.log"));
  return tools::run_pipeline(sys, *spec, {});
}

std::string refusal(const test::temp_dir& dir, const std::string& text) {
  auto r = run(dir, text);
  REQUIRE(!r);
  CHECK(code_of(r.error()) == errc::malformed_pipeline);
  return describe(r.error());
}

} // namespace

TEST_CASE("a pipeline reads .npy files in batches, chains stages through "
          "the host and writes .npy files",
          "[tools][pipeline-files]") {
  test::temp_dir dir;
  register_root();
  // 1,000 points against one square with a hole; a 1000 x 6 matrix times a
  // 6 x 4 one, split by rows.
  std::vector<double> points;
  for (int i = 0; i < 1000; ++i) {
    points.push_back(i % 13 - 1);
    points.push_back(i / 13 % 13 - 1);
  }
  std::vector<float> a(1000 * 6), b(6 * 4);
  for (size_t i = 0; i < a.size(); ++i)
    a[i] = float(i % 7) - 3;
  for (size_t i = 0; i < b.size(); ++i)
    b[i] = float(i % 5) * 0.5f;
  std::vector<double> squares;
  for (int i = 0; i < 1000; ++i)
    squares.push_back(double(i) * i);
  save(dir, "points.npy", points, {1000, 2});
  save(dir, "which.npy", std::vector<int64_t>(1000, 0), {1000});
  save(dir, "vertices.npy",
       std::vector<double>{0, 0, 10, 0, 10, 10, 0, 10, 3, 3, 7, 3, 7, 7, 3, 7},
       {8, 2});
  save(dir, "rings.npy", std::vector<int64_t>{0, 4, 8}, {3});
  save(dir, "polygons.npy", std::vector<int64_t>{0, 2}, {2});
  save(dir, "a.npy", a, {1000, 6});
  save(dir, "b.npy", b, {6, 4});
  save(dir, "squares.npy", squares, {1000});
  auto d = [&](const std::string& f) { return "\"" + dir.file(f) + "\""; };
  auto r = run(
      dir, "name: \"files\" batch_rows: 128 window: 4\n"
           "stage { name: \"inside\" kernel_name: "
           "\"geo.point_in_polygon\" input { file: " +
               d("points.npy") + " } input { file: " + d("vertices.npy") +
               " whole: true } input { file: " + d("rings.npy") +
               " whole: true } input { file: " + d("polygons.npy") +
               " whole: true } input { file: " + d("which.npy") +
               " } output: " + d("inside.npy") +
               " }\n"
               "stage { name: \"proj\" kernel: GEMM args { k: 6 n: 4 "
               "} input { file: " +
               d("a.npy") + " rows_arg: \"m\" } input { file: " + d("b.npy") +
               " whole: true } output: " + d("proj.npy") +
               " output_columns: 4 }\n"
               "stage { name: \"sum\" kernel_name: \"reduce_sum\" "
               "input { stage: \"proj\" } output: " +
               d("sums.npy") +
               " }\n"
               "stage { name: \"root\" kernel_name: \"test.root\" "
               "input { file: " +
               d("squares.npy") + " } output: " + d("roots.npy") + " }\n");
  REQUIRE(r);
  INFO(r->errors.size());
  CHECK(r->items == 8 * 4); // ceil(1000 / 128) batches of 4 items
  CHECK(r->completed == 32);
  CHECK(r->mismatches == 0);
  CHECK(r->lost == 0);
  CHECK(r->skipped == 0);
  CHECK(r->outputs_written.size() == 4);
  CHECK(r->ok());
  // Where each point lies, in the order of the file.
  auto inside = load<int32_t>(dir.file("inside.npy"));
  REQUIRE(inside.size() == 1000);
  for (int i = 0; i < 1000; ++i) {
    double x = points[2 * i], y = points[2 * i + 1];
    auto on = [](double v, double lo, double hi) { return v == lo || v == hi; };
    auto within = [](double v, double lo, double hi) {
      return v >= lo && v <= hi;
    };
    int want = 0;
    if ((within(x, 0, 10) && within(y, 0, 10) &&
         (on(x, 0, 10) || on(y, 0, 10))) ||
        (within(x, 3, 7) && within(y, 3, 7) && (on(x, 3, 7) || on(y, 3, 7))))
      want = 2;
    else if (x > 0 && x < 10 && y > 0 && y < 10 &&
             !(x > 3 && x < 7 && y > 3 && y < 7))
      want = 1;
    INFO("point " << i << " (" << x << ", " << y << ")");
    REQUIRE(inside[size_t(i)] == want);
  }
  // The product, row by row as split, and its per-batch sums.
  auto proj = load<float>(dir.file("proj.npy"));
  REQUIRE(proj.size() == 4000);
  auto info = npy::reader::open(dir.file("proj.npy"));
  CHECK(info->info().shape == std::vector<uint64_t>{1000, 4});
  for (size_t row : {0ul, 127ul, 128ul, 999ul})
    for (size_t col = 0; col < 4; ++col) {
      float want = 0;
      for (size_t k = 0; k < 6; ++k)
        want += a[row * 6 + k] * b[k * 4 + col];
      CHECK(proj[row * 4 + col] == Approx(want));
    }
  auto sums = load<float>(dir.file("sums.npy"));
  REQUIRE(sums.size() == 8);
  for (size_t bt = 0; bt < 8; ++bt) {
    double want = 0;
    for (size_t i = bt * 128 * 4;
         i < std::min<size_t>(4000, (bt + 1) * 128 * 4); ++i)
      want += proj[i];
    CHECK(sums[bt] == Approx(want).epsilon(1e-5));
  }
  auto roots = load<double>(dir.file("roots.npy"));
  REQUIRE(roots.size() == 1000);
  for (int i = 0; i < 1000; ++i)
    REQUIRE(roots[size_t(i)] == double(i));
}

TEST_CASE("without batch_rows, a file's rows are shared out over the batches",
          "[tools][pipeline-files]") {
  test::temp_dir dir;
  register_root();
  std::vector<double> xs;
  for (int i = 0; i < 10; ++i)
    xs.push_back(i * i);
  save(dir, "x.npy", xs, {10});
  auto r = run(dir, "batches: 3 stage { name: \"r\" kernel_name: \"test.root\" "
                    "input { file: \"" +
                        dir.file("x.npy") + "\" } output: \"" +
                        dir.file("y.npy") + "\" }");
  REQUIRE(r);
  CHECK(r->items == 3);
  CHECK(r->ok());
  auto ys = load<double>(dir.file("y.npy"));
  CHECK(ys == std::vector<double>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  // More rows per batch than the file has: one batch.
  auto one = run(dir, "batch_rows: 18446744073709551615 stage { name: \"r\" "
                      "kernel_name: \"test.root\" input { file: \"" +
                          dir.file("x.npy") + "\" } }");
  REQUIRE(one);
  CHECK(one->items == 1);
  CHECK(one->ok());
}

TEST_CASE("a batch that fails skips the stages reading it and keeps its "
          "output file from being written",
          "[tools][pipeline-files]") {
  test::temp_dir dir;
  register_root();
  std::vector<double> xs(40, 4.0);
  xs[25] = -1; // batch 2 of 4 fails
  save(dir, "x.npy", xs, {40});
  auto r = run(dir, "batch_rows: 10\n"
                    "stage { name: \"r\" kernel_name: \"test.root\" input { "
                    "file: \"" +
                        dir.file("x.npy") + "\" } output: \"" +
                        dir.file("roots.npy") +
                        "\" }\n"
                        "stage { name: \"again\" kernel_name: \"test.root\" "
                        "input { stage: \"r\" } output: \"" +
                        dir.file("again.npy") + "\" }\n");
  REQUIRE(r);
  CHECK(r->items == 8);
  CHECK(r->completed == 6);
  CHECK(r->failed == 1);
  CHECK(r->skipped == 1);
  CHECK(r->lost == 0);
  CHECK(r->duplicates == 0);
  CHECK(!r->ok());
  REQUIRE(r->outputs_not_written.size() == 2);
  CHECK_THAT(r->outputs_not_written[0],
             Catch::Contains("1 of 4 batches did not end well"));
  bool named = false;
  for (auto& e : r->errors)
    named = named || e.find("a negative value") != std::string::npos;
  CHECK(named);
  for (auto f : {"roots.npy", "again.npy"}) {
    CHECK(!std::filesystem::exists(dir.file(f)));
    CHECK(!std::filesystem::exists(dir.file(std::string{f} + ".part")));
  }
}

TEST_CASE("pipelines over files: a spec that cannot run is refused with the "
          "stage and the file named",
          "[tools][pipeline-files]") {
  test::temp_dir dir;
  register_root();
  auto x = save(dir, "x.npy", std::vector<double>(12, 1.0), {12});
  auto f32 = save(dir, "f.npy", std::vector<float>(12, 1.0f), {12});
  auto seven = save(dir, "seven.npy", std::vector<double>(7, 1.0), {7});
  auto in = [](const std::string& path, const std::string& more = {}) {
    return "input { file: \"" + path + "\" " + more + "}";
  };
  auto root = [&](const std::string& name, const std::string& inputs,
                  const std::string& more = {}) {
    return "stage { name: \"" + name + "\" kernel_name: \"test.root\" " +
           inputs + " " + more + "}\n";
  };
  CHECK_THAT(refusal(dir, "batch_rows: 4 stage { name: \"s\" kernel_name: "
                          "\"fft\" " +
                              in(x) + " }"),
             Catch::Contains("no kernel named 'fft' is registered"));
  CHECK_THAT(refusal(dir, "batch_rows: 4 " + root("s", in(f32))),
             Catch::Contains("takes f64, got f32"));
  CHECK_THAT(refusal(dir, "batch_rows: 4 " + root("s", in(x) + in(x))),
             Catch::Contains("test.root takes 1 input(s) (x), the stage "
                             "names 2"));
  CHECK_THAT(refusal(dir, "batches: 2 stage { name: \"g\" kernel_name: "
                          "\"geo.segment_intersection\" }"),
             Catch::Contains("no random-data mode"));
  CHECK_THAT(
      refusal(dir, "batch_rows: 4 " + root("a", in(x)) + root("b", in(seven))),
      Catch::Contains("has 7 rows"));
  CHECK_THAT(refusal(dir, "batch_rows: 4 batches: 2 " + root("a", in(x))),
             Catch::Contains("make 3 (leave batches out)"));
  CHECK_THAT(refusal(dir, "batches: 13 " + root("a", in(x))),
             Catch::Contains("13 batches, but"));
  CHECK_THAT(refusal(dir, "batch_rows: 4 " +
                              root("a", "input { stage: "
                                        "\"later\" }") +
                              root("later", in(x))),
             Catch::Contains("no stage before it has that name"));
  CHECK_THAT(refusal(dir, "batch_rows: 4 " + root("a", in(x)) +
                              root("b", "input { stage: \"a\" }",
                                   "output: \"" + x + "\"")),
             Catch::Contains("is an input of the pipeline"));
  CHECK_THAT(refusal(dir, "batch_rows: 4 " +
                              root("a", in(x),
                                   "output: \"" + dir.file("o.npy") + "\"") +
                              root("b", "input { stage: \"a\" }",
                                   "output: \"" + dir.file("./o.npy") + "\"")),
             Catch::Contains("another stage writes"));
  // One file under two names is still one file.
  CHECK_THAT(
      refusal(dir, "batch_rows: 4 " +
                       root("a", in(x),
                            "output: \"" + dir.file("sub/../x.npy") + "\"")),
      Catch::Contains("is an input of the pipeline"));
  CHECK_THAT(
      refusal(dir, "batch_rows: 4 " +
                       root("a", in(x),
                            "output: \"" + dir.file("nodir/o.npy") + "\"")),
      Catch::Contains("cannot create it"));
  CHECK_THAT(
      refusal(dir, "batch_rows: 4 " + root("a", in(x),
                                           "output: \"" + dir.file("o.npy") +
                                               "\" output_columns: 5")),
      Catch::Contains("not a multiple of output_columns 5"));
  CHECK_THAT(
      refusal(dir, "batch_rows: 4 " + root("a", in(dir.file("none.npy")))),
      Catch::Contains("stage 'a': " + dir.file("none.npy") +
                      ": cannot open it"));
  CHECK_THAT(refusal(dir, "batches: 2 stage { name: \"s\" kernel: AXPY "
                          "kernel_name: \"axpy\" args { n: 4 } }"),
             Catch::Contains("names its kernel twice"));
  CHECK_THAT(
      refusal(dir, "batch_rows: 4 " + root("a", in(x, "rows_arg: \"q\""))),
      Catch::Contains("rows_arg is \"m\", \"n\" or \"k\""));
  CHECK_THAT(refusal(dir, "batches: 1 stage { name: \"s\" kernel: "
                          "INCLUSIVE_SCAN args { n: 4 } }\n"
                          "stage { name: \"t\" kernel: REDUCE_SUM args { n: 4 "
                          "} chain: true }\n" +
                              root("u", "input { stage: \"s\" }")),
             Catch::Contains("stays on the device"));
  CHECK_THAT(refusal(dir, "batch_rows: 4"),
             Catch::Contains("at least one stage"));
  // Random inputs are bounded like any input.
  CHECK_THAT(refusal(dir, "batches: 1 stage { name: \"big\" kernel: "
                          "REDUCE_SUM args { n: 67108865 } }"),
             Catch::Contains("more than 67108864 elements"));
  // No output file is left behind by a refused spec.
  CHECK(!std::filesystem::exists(dir.file("o.npy.part")));
}

TEST_CASE("cohort run over files from the command line", "[tools][cli]") {
  test::temp_dir dir;
  save(dir, "v.npy", std::vector<float>{1, 2, 3, 4, 5, 6}, {6});
  auto spec = write(dir, "s.textproto",
                    "name: \"sum\" batches: 2\n"
                    "stage { name: \"s\" kernel_name: \"reduce_sum\" input { "
                    "file: \"" +
                        dir.file("v.npy") + "\" } output: \"" +
                        dir.file("out.npy") + "\" }\n" + runtime_text);
  auto res =
      cohort_cli("run " + spec + " --no-progress --audit " + dir.file("a.log"));
  INFO(res.output);
  CHECK(res.status == 0);
  CHECK_THAT(res.output,
             Catch::Contains("output written     " + dir.file("out.npy") +
                             " (f32, shape (2,))"));
  CHECK(load<float>(dir.file("out.npy")) == std::vector<float>{6, 15});
  auto bad = write(dir, "b.npy", "\x93NUMPY\x01");
  auto broken = write(dir, "b.textproto",
                      "batches: 1 stage { name: \"s\" kernel_name: "
                      "\"reduce_sum\" input { file: \"" +
                          bad + "\" } }\n" + runtime_text);
  auto refused = cohort_cli("run " + broken + " --no-progress");
  CHECK(refused.status == 2);
  CHECK_THAT(refused.output, Catch::Contains("stage 's': " + bad));
}
