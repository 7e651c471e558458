// Every kernel against its naive reference over random and edge sizes, plus
// argument validation.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>

#include "kernels/catalog.hpp"
#include "kernels/random_data.hpp"

using namespace cohort::kernels;

namespace {

std::vector<float> random_vec(std::mt19937& rng, size_t n) {
  return random_floats(rng(), n);
}

struct call {
  kernel_args args;
  std::vector<std::vector<float>> inputs;
  std::vector<std::span<const float>> views() const {
    std::vector<std::span<const float>> out;
    for (auto& in : inputs)
      out.emplace_back(in);
    return out;
  }
};

// A valid call of `id` whose main size is `n`.
call make_call(kernel_id id, size_t n, std::mt19937& rng) {
  call c;
  switch (id) {
  case kernel_id::axpy:
  case kernel_id::dot:
    c.args.alpha = -1.75f;
    c.inputs = {random_vec(rng, n), random_vec(rng, n)};
    break;
  case kernel_id::nrm2:
  case kernel_id::reduce_sum:
  case kernel_id::inclusive_scan:
    c.inputs = {random_vec(rng, n)};
    break;
  case kernel_id::gemv:
    c.args.m = n;
    c.args.n = n / 2 + 1;
    c.inputs = {random_vec(rng, c.args.m * c.args.n),
                random_vec(rng, c.args.n)};
    break;
  case kernel_id::gemm:
    c.args.m = n;
    c.args.n = n / 3 + 1;
    c.args.k = n / 2 + 2;
    c.inputs = {random_vec(rng, c.args.m * c.args.k),
                random_vec(rng, c.args.k * c.args.n)};
    break;
  case kernel_id::topk_cosine:
    c.args.m = n + 1;
    c.args.n = 16;
    c.args.top_k = uint32_t(std::min<size_t>(5, n + 1));
    c.inputs = {random_vec(rng, c.args.m * c.args.n), random_vec(rng, 3 * 16)};
    break;
  }
  return c;
}

size_t large_size(kernel_id id) {
  switch (id) {
  case kernel_id::gemv:
  case kernel_id::gemm:
    return 200;
  case kernel_id::topk_cosine:
    return 5000;
  default:
    return 1 << 20;
  }
}

} // namespace

TEST_CASE("every kernel matches its reference over edge and random sizes",
          "[kernels]") {
  std::mt19937 rng{42};
  for (auto id : all_kernels) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{2}, size_t{7}, size_t{17},
                     size_t{63}, size_t{1000}, large_size(id)}) {
      auto c = make_call(id, n, rng);
      auto views = c.views();
      INFO(std::string{name(id)} << " n=" << n);
      REQUIRE(validate(id, c.args, views).empty());
      auto got = run_cpu(id, c.args, views);
      auto want = run_reference(id, c.args, views);
      CHECK(compare(id, c.args, views, got, want).empty());
    }
  }
}

TEST_CASE("reductions over integer data are exact", "[kernels]") {
  for (size_t n : {1, 5, 4097, 100003}) {
    std::vector<float> x(n);
    for (size_t i = 0; i < n; ++i)
      x[i] = float(i % 7) - 3.0f;
    std::vector<std::span<const float>> one{x};
    std::vector<std::span<const float>> two{x, x};
    double sum = 0, sq = 0;
    for (float v : x) {
      sum += v;
      sq += double(v) * v;
    }
    CHECK(run_cpu(kernel_id::reduce_sum, {}, one).values[0] == float(sum));
    CHECK(run_cpu(kernel_id::dot, {}, two).values[0] == float(sq));
    auto scan = run_cpu(kernel_id::inclusive_scan, {}, one).values;
    REQUIRE(scan.size() == n);
    CHECK(scan.back() == float(sum));
  }
}

TEST_CASE("compare catches a wrong element", "[kernels]") {
  std::mt19937 rng{7};
  for (auto id : all_kernels) {
    auto c = make_call(id, 33, rng);
    auto views = c.views();
    auto got = run_cpu(id, c.args, views);
    auto want = run_reference(id, c.args, views);
    got.values[got.values.size() / 2] += 0.01f;
    INFO(name(id));
    CHECK_FALSE(compare(id, c.args, views, got, want).empty());
  }
}

TEST_CASE("topk_cosine ranks rows by cosine similarity", "[kernels]") {
  // Row 2 points the same way as the query, row 0 the opposite way.
  std::vector<float> rows{-1, 0, 0.5f, 0.5f, 3, 0.1f, 0, 0};
  std::vector<float> query{1, 0};
  std::vector<std::span<const float>> in{rows, query};
  kernel_args args;
  args.m = 4;
  args.n = 2;
  args.top_k = 3;
  REQUIRE(validate(kernel_id::topk_cosine, args, in).empty());
  auto out = run_cpu(kernel_id::topk_cosine, args, in);
  REQUIRE(out.indices.size() == 3);
  CHECK(out.indices[0] == 2);
  CHECK(out.indices[1] == 1);
  CHECK(out.indices[2] == 3); // the zero row scores 0
  CHECK(out.values[0] == Approx(3 / std::sqrt(9.01)));
  CHECK(out.values[2] == 0.0f);
}

TEST_CASE("bad arguments are named clearly", "[kernels]") {
  std::vector<float> a(6), b(5);
  std::vector<std::span<const float>> ab{a, b};
  std::vector<std::span<const float>> only_a{a};
  kernel_args args;
  CHECK_THAT(validate(kernel_id::axpy, args, ab),
             Catch::Contains("x has 6 elements but y has 5"));
  CHECK_THAT(validate(kernel_id::dot, args, only_a),
             Catch::Contains("takes 2 input buffer(s), got 1"));
  args.m = 2;
  args.n = 4;
  CHECK_THAT(validate(kernel_id::gemv, args, ab),
             Catch::Contains("A must have 2x4 = 8 elements, got 6"));
  args.m = uint64_t{1} << 40;
  CHECK_THAT(validate(kernel_id::gemm, args, ab), Catch::Contains("too large"));
  args = {};
  args.m = 3;
  args.n = 2;
  args.top_k = 4;
  std::vector<float> q(2);
  std::vector<std::span<const float>> rq{a, q};
  CHECK_THAT(validate(kernel_id::topk_cosine, args, rq),
             Catch::Contains("top_k must be in 1..m = 3"));
  args.n = 0;
  CHECK_THAT(validate(kernel_id::topk_cosine, args, rq),
             Catch::Contains("dimension n must be positive"));
  CHECK_THAT(validate(static_cast<kernel_id>(42), args, rq),
             Catch::Contains("unknown kernel"));
}

TEST_CASE("kernel names parse back", "[kernels]") {
  for (auto id : all_kernels)
    CHECK(parse_kernel(name(id)) == id);
  CHECK_FALSE(parse_kernel("fft").has_value());
  CHECK_FALSE(is_known(0));
  // The geo kernels follow the built-in ones; far above, nothing (tests
  // register a few dozen kernels at most).
  CHECK(is_known(9));
  CHECK(parse_kernel("geo.point_in_polygon") == static_cast<kernel_id>(9));
  CHECK(parse_kernel("geo.segment_intersection") == static_cast<kernel_id>(10));
  CHECK_FALSE(is_known(250));
}

TEST_CASE("small_vector keeps a few values inline and spills the rest",
          "[kernels]") {
  small_vector<uint64_t, 2> v;
  CHECK(v.empty());
  v.push_back(1);
  v.push_back(2);
  auto* inline_data = v.data();
  v.insert(0, 0); // spills: three values
  CHECK(v.data() != inline_data);
  v.insert(3, 3);
  v.insert(2, 9);
  CHECK(std::vector<uint64_t>(v.begin(), v.end()) ==
        std::vector<uint64_t>{0, 1, 9, 2, 3});
  input_lengths as_span{v};
  CHECK(as_span.size() == 5);
  CHECK(as_span[4] == 3);
  v.clear();
  v.push_back(7);
  CHECK(v.size() == 1);
  CHECK(v[0] == 7);
  // An insertion past the end appends.
  v.insert(10, 8);
  CHECK(v[1] == 8);
}

TEST_CASE("lengths of a call's inputs need no allocation for a few inputs",
          "[kernels]") {
  std::vector<float> a(5), b(7), c(1);
  std::vector<std::span<const float>> views{a, b, c};
  auto lens = lengths(views);
  REQUIRE(lens.size() == 3);
  CHECK(lens[0] == 5);
  CHECK(lens[1] == 7);
  CHECK(lens[2] == 1);
  // Validation sees the real count, also past the inline capacity.
  std::vector<std::vector<float>> many(9, std::vector<float>(4));
  std::vector<std::span<const float>> nine(many.begin(), many.end());
  CHECK_THAT(validate(kernel_id::axpy, {}, nine),
             Catch::Contains("takes 2 input buffer(s), got 9"));
}

TEST_CASE("random input data is the seed's, uniform in [-1, 1)", "[kernels]") {
  auto a = random_floats(7, 100000);
  REQUIRE(a.size() == 100000);
  // The same seed gives the same values, another seed others; a prefix is
  // the start of the longer sequence.
  CHECK(random_floats(7, 100000) == a);
  CHECK(random_floats(8, 100000) != a);
  auto head = random_floats(7, 10);
  CHECK(std::equal(head.begin(), head.end(), a.begin()));
  // Fixed values, whatever the compiler and its standard library.
  CHECK(random_floats(0, 1)[0] == 0.7666215896606445f);
  double sum = 0, lo = 1, hi = -1;
  size_t below_zero = 0;
  for (float x : a) {
    REQUIRE(x >= -1.0f);
    REQUIRE(x < 1.0f);
    // On the grid of 2^-23.
    REQUIRE(std::ldexp(double(x), 23) == std::round(std::ldexp(double(x), 23)));
    sum += x;
    lo = std::min(lo, double(x));
    hi = std::max(hi, double(x));
    below_zero += x < 0;
  }
  CHECK(std::abs(sum / double(a.size())) < 0.01);
  CHECK(lo < -0.999);
  CHECK(hi > 0.999);
  CHECK(below_zero > 49000);
  CHECK(below_zero < 51000);
  CHECK(random_floats(3, 0).empty());
}
