// The kernel registry: the built-in catalog registered like any kernel,
// registration of an application's kernel, and what is refused.
#include <catch2/catch.hpp>

#include <atomic>
#include <numeric>
#include <thread>

#include "kernels/catalog.hpp"
#include "kernels/registry.hpp"

using namespace cohort::kernels;

namespace {

// Sums each row of an i32 matrix (m rows of n) into f64.
kernel_def row_sums(std::string name) {
  kernel_def d;
  d.name = std::move(name);
  d.signature.inputs = {{"a", dtype::i32}};
  d.signature.output = {"sums", dtype::f64};
  d.signature.scalars = {"m", "n"};
  d.check = [](const kernel_args& a, input_lengths in) -> std::string {
    if (a.m * a.n != in[0])
      return "a must have m*n elements";
    return {};
  };
  d.output_elements = [](const kernel_args& a, input_lengths) { return a.m; };
  d.cost = [](const kernel_args& a, input_lengths) {
    return kernel_cost{double(a.m * a.n), 0};
  };
  d.cpu = [](const kernel_args& a, typed_inputs in) {
    kernel_output out;
    out.resize(dtype::f64, a.m);
    auto x = in[0].as<int32_t>();
    auto o = out.as<double>();
    for (uint64_t r = 0; r < a.m; ++r)
      for (uint64_t c = 0; c < a.n; ++c)
        o[r] += x[r * a.n + c];
    return out;
  };
  return d;
}

} // namespace

TEST_CASE("the built-in kernels are in the registry", "[kernels][registry]") {
  auto all = registered_kernels();
  REQUIRE(all.size() >= std::size(all_kernels));
  for (auto id : all_kernels) {
    auto* d = find(id);
    REQUIRE(d != nullptr);
    CHECK(d->origin == "built-in");
    CHECK(is_builtin(id));
    CHECK(has_gpu_code(id, true));
    CHECK(has_gpu_code(id, false));
    CHECK(parse_kernel(d->name) == id);
    CHECK(d->signature.inputs.size() == input_count(id));
    for (auto& p : d->signature.inputs)
      CHECK(p.type == dtype::f32);
  }
  CHECK(find(kernel_id::gemm)->signature.scalars ==
        std::vector<std::string>{"m", "n", "k"});
  CHECK(find(static_cast<kernel_id>(0)) == nullptr);
}

TEST_CASE("an application's kernel registers, validates and runs typed",
          "[kernels][registry]") {
  std::string why;
  auto id = register_kernel(row_sums("test.row_sums"), why);
  REQUIRE(id);
  CHECK(why.empty());
  CHECK_FALSE(is_builtin(*id));
  CHECK(name(*id) == "test.row_sums");
  CHECK(parse_kernel("test.row_sums") == *id);
  CHECK(input_count(*id) == 1);
  CHECK(output_type(*id) == dtype::f64);
  CHECK_FALSE(has_gpu_code(*id, true));
  CHECK_FALSE(has_gpu_code(*id, false));

  kernel_args a;
  a.m = 2;
  a.n = 3;
  uint64_t six[] = {6};
  uint64_t five[] = {5};
  CHECK(validate(*id, a, input_lengths{six}).empty());
  CHECK(validate(*id, a, input_lengths{five}) == "a must have m*n elements");
  uint64_t two[] = {3, 3};
  CHECK(validate(*id, a, input_lengths{two}).find("takes 1 input") !=
        std::string::npos);
  dtype right[] = {dtype::i32};
  dtype wrong[] = {dtype::f32};
  CHECK(check_types(*id, right).empty());
  CHECK(check_types(*id, wrong) ==
        "test.row_sums: input 0 ('a') takes i32, got f32");
  CHECK(output_elements(*id, a, input_lengths{six}) == 2);
  CHECK(output_bytes(*id, a, input_lengths{six}) == 2 * sizeof(double));
  auto c = cost(*id, a, input_lengths{six});
  CHECK(c.flops == 6);
  CHECK(c.bytes == 6 * 4 + 2 * 8);

  std::vector<int32_t> m{1, 2, 3, 4, 5, 6};
  typed_view in[] = {{m.data(), m.size(), dtype::i32}};
  auto out = run_cpu(*id, a, typed_inputs{in});
  REQUIRE(out.type == dtype::f64);
  REQUIRE(out.elements() == 2);
  CHECK(out.as<double>()[0] == 6);
  CHECK(out.as<double>()[1] == 15);
  // No reference of its own: the CPU implementation is the reference.
  auto ref = run_reference(*id, a, typed_inputs{in});
  CHECK(compare(*id, a, {}, out, ref).empty());
  auto off = out;
  off.as<double>()[1] = 15.5;
  CHECK(compare(*id, a, {}, off, ref).find("element 1") != std::string::npos);
}

TEST_CASE("bad kernel definitions are refused with a reason",
          "[kernels][registry]") {
  std::string why;
  auto refused = [&](kernel_def d) {
    why.clear();
    return !register_kernel(std::move(d), why) && !why.empty();
  };
  CHECK(refused(row_sums("Upper")));
  CHECK(why.find("not valid") != std::string::npos);
  CHECK(refused(row_sums("")));
  CHECK(refused(row_sums("9lives")));
  CHECK(refused(row_sums(std::string(65, 'a'))));
  CHECK(refused(row_sums("axpy")));
  CHECK(why == "kernel 'axpy' is already registered (built-in)");
  REQUIRE(register_kernel(row_sums("test.twice"), why));
  CHECK(refused(row_sums("test.twice")));
  CHECK(why.find("already registered (application)") != std::string::npos);
  auto d = row_sums("test.no_cpu");
  d.cpu = nullptr;
  CHECK(refused(d));
  CHECK(why.find("CPU implementation") != std::string::npos);
  d = row_sums("test.no_rule");
  d.output_elements = nullptr;
  CHECK(refused(d));
  CHECK(why.find("output size rule") != std::string::npos);
  d = row_sums("test.no_inputs");
  d.signature.inputs.clear();
  CHECK(refused(d));
  d = row_sums("test.nine");
  d.signature.inputs.assign(9, {"x", dtype::f32});
  CHECK(refused(d));
  CHECK(why.find("1 to 8") != std::string::npos);
  d = row_sums("test.unnamed");
  d.signature.inputs = {{"", dtype::f32}};
  CHECK(refused(d));
  d = row_sums("test.bad_type");
  d.signature.inputs = {{"x", static_cast<dtype>(9)}};
  CHECK(refused(d));
  d = row_sums("test.scalar");
  d.signature.scalars = {"beta"};
  CHECK(refused(d));
  CHECK(why.find("'beta'") != std::string::npos);
  // GPU code: the right format per backend, an image, an entry point, a
  // block size.
  auto ptx = std::make_shared<const std::vector<uint8_t>>(
      std::vector<uint8_t>{'.', 'v', 0});
  d = row_sums("test.gpu");
  d.cuda.kind = gpu_code::format::hip_code_object;
  d.cuda.image = ptx;
  d.cuda.function = "f";
  CHECK(refused(d));
  CHECK(why.find("PTX, a cubin or a fatbin") != std::string::npos);
  d.cuda.kind = gpu_code::format::ptx;
  d.cuda.image = std::make_shared<const std::vector<uint8_t>>(
      std::vector<uint8_t>{'.', 'v'});
  CHECK(refused(d));
  CHECK(why.find("NUL") != std::string::npos);
  d.cuda.image = ptx;
  d.cuda.function = "f()";
  CHECK(refused(d));
  CHECK(why.find("not a C identifier") != std::string::npos);
  d.cuda.function = "f";
  d.cuda.block = 2048;
  CHECK(refused(d));
  CHECK(why.find("1 to 1024") != std::string::npos);
  d.cuda.block = 128;
  d.hip.kind = gpu_code::format::cubin;
  d.hip.image = ptx;
  d.hip.function = "f";
  CHECK(refused(d));
  CHECK(why.find("HIP code object") != std::string::npos);
  CHECK_FALSE(parse_kernel("test.gpu"));
  CHECK_FALSE(parse_kernel("test.no_cpu"));
}

TEST_CASE("registration from several threads gives distinct ids",
          "[kernels][registry]") {
  std::vector<std::thread> threads;
  std::vector<int> ids(8, -1);
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      std::string why;
      if (auto id =
              register_kernel(row_sums("test.par" + std::to_string(t)), why))
        ids[t] = int(*id);
    });
  for (auto& th : threads)
    th.join();
  std::sort(ids.begin(), ids.end());
  CHECK(ids.front() > 0);
  CHECK(std::adjacent_find(ids.begin(), ids.end()) == ids.end());
  for (int t = 0; t < 8; ++t)
    CHECK(parse_kernel("test.par" + std::to_string(t)));
}
