// Dynamic batching on its own: which items may share a launch, and that a
// merged launch split back gives every item the bits it gets alone.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <unordered_set>

#include "actors/balancer/batching.hpp"
#include "kernels/random_data.hpp"
#include "messages/errc.hpp"

using namespace cohort;
using namespace cohort::actors;
using namespace cohort::actors::balancer;

namespace {

work_item axpy_item(uint64_t id, float alpha, std::vector<float> x,
                    std::vector<float> y) {
  work_item w;
  w.id = id;
  w.tenant = "t" + std::to_string(id % 3);
  w.kernel = kernel_id::axpy;
  w.args.alpha = alpha;
  w.inputs = {host_buffer{std::move(x)}, host_buffer{std::move(y)}};
  return w;
}

work_item random_axpy(uint64_t id, float alpha, size_t n) {
  return axpy_item(id, alpha, kernels::random_floats(2 * id, n),
                   kernels::random_floats(2 * id + 1, n));
}

work_item gemm_item(uint64_t id, uint64_t m, const host_buffer& b, uint64_t n,
                    uint64_t k) {
  work_item w;
  w.id = id;
  w.tenant = "t" + std::to_string(id % 3);
  w.kernel = kernel_id::gemm;
  w.args.m = m;
  w.args.n = n;
  w.args.k = k;
  w.inputs = {host_buffer{kernels::random_floats(id, m * k)}, b};
  return w;
}

std::vector<const work_item*> pointers(const std::vector<work_item>& items) {
  std::vector<const work_item*> out;
  for (auto& w : items)
    out.push_back(&w);
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  // memcmp wants valid pointers even for 0 bytes; empty vectors have none.
  return a.size() == b.size() &&
         (a.empty() ||
          std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

using runner = kernels::kernel_output (*)(kernel_id,
                                          const kernels::kernel_args&,
                                          kernels::typed_inputs);

// Merges `items`, runs the one launch with `run`, splits it and checks every
// part: bit for bit against the item run alone with `run` when `exact`,
// otherwise against the double-precision reference within the kernel's
// tolerance.
void check_batch(const std::vector<work_item>& items, runner run, bool exact) {
  auto members = pointers(items);
  auto merged = batching::merge(members, 4242, "batch");
  INFO("merged: " << kernels::name(merged.kernel) << " m=" << merged.args.m
                  << " n=" << merged.args.n << " k=" << merged.args.k);
  REQUIRE(validate_item(merged).empty());
  CHECK(merged.id == 4242);
  CHECK(merged.tenant == "batch");
  uint64_t total = 0;
  for (auto* m : members)
    total += batching::output_elements(*m);
  CHECK(batching::output_elements(merged) == total);
  auto out = run_item_on_host(merged, run);
  REQUIRE(out.values.size() == total);
  auto parts = batching::split(out, members);
  REQUIRE(parts);
  REQUIRE(parts->size() == items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    INFO("member " << i << ": m=" << items[i].args.m << ", "
                   << items[i].inputs[0].size() << " elements in");
    CHECK((*parts)[i].indices.empty());
    if (exact)
      CHECK(same_bits((*parts)[i].values,
                      run_item_on_host(items[i], run).values));
    else
      CHECK(check_result(items[i], (*parts)[i]) == "");
  }
}

} // namespace

TEST_CASE("only single-stage axpy and gemm with a shared B have a key",
          "[actors][batching]") {
  auto a = random_axpy(1, 2.0f, 10);
  auto b = random_axpy(2, 2.0f, 333);
  auto ka = batching::key_of(a);
  auto kb = batching::key_of(b);
  REQUIRE(ka);
  REQUIRE(kb);
  CHECK(ka->kernel == kernel_id::axpy);
  // Lengths do not matter: axpy inputs concatenate.
  CHECK(*ka == *kb);
  CHECK(batching::batch_key_hash{}(*ka) == batching::batch_key_hash{}(*kb));
  SECTION("another alpha is another batch") {
    auto c = random_axpy(3, 2.5f, 10);
    REQUIRE(batching::key_of(c));
    CHECK_FALSE(*batching::key_of(c) == *ka);
    // +0 and -0 give differently signed zeros, so they do not merge.
    auto pz = batching::key_of(random_axpy(4, 0.0f, 4));
    auto nz = batching::key_of(random_axpy(5, -0.0f, 4));
    REQUIRE(pz);
    REQUIRE(nz);
    CHECK_FALSE(*pz == *nz);
    // A NaN alpha is invalid: it is refused, never merged.
    auto nan = std::numeric_limits<float>::quiet_NaN();
    auto with_nan = random_axpy(6, nan, 4);
    CHECK_FALSE(validate_item(with_nan).empty());
    CHECK_FALSE(batching::key_of(with_nan));
    std::unordered_set<batching::batch_key, batching::batch_key_hash> keys{
        *ka, *pz, *nz};
    CHECK(keys.size() == 3);
    CHECK(keys.count(*pz) == 1);
  }
  SECTION("chained items are not merged") {
    auto c = random_axpy(3, 2.0f, 10);
    chained_stage st;
    st.kernel = kernel_id::nrm2;
    c.then.push_back(st);
    REQUIRE(validate_item(c).empty());
    CHECK_FALSE(batching::key_of(c));
    // Its output is its last stage's (what split would hand back).
    CHECK(batching::output_elements(c) == 1);
  }
  SECTION("gang items are not merged") {
    auto c = random_axpy(3, 2.0f, 10);
    c.gang = 2;
    CHECK_FALSE(batching::key_of(c));
  }
  SECTION("invalid items are not merged") {
    auto c = axpy_item(3, 2.0f, {1, 2, 3}, {1, 2});
    CHECK_FALSE(batching::key_of(c));
  }
  SECTION("other kernels are not merged") {
    auto dot = random_axpy(3, 2.0f, 10);
    dot.kernel = kernel_id::dot;
    REQUIRE(validate_item(dot).empty());
    CHECK_FALSE(batching::key_of(dot));
    work_item gemv;
    gemv.kernel = kernel_id::gemv;
    gemv.args.m = 3;
    gemv.args.n = 2;
    gemv.inputs = {host_buffer{kernels::random_floats(1, 6)},
                   host_buffer{kernels::random_floats(2, 2)}};
    REQUIRE(validate_item(gemv).empty());
    CHECK_FALSE(batching::key_of(gemv));
    work_item nrm2;
    nrm2.kernel = kernel_id::nrm2;
    nrm2.inputs = {host_buffer{kernels::random_floats(1, 6)}};
    REQUIRE(validate_item(nrm2).empty());
    CHECK_FALSE(batching::key_of(nrm2));
  }
  SECTION("gemm merges only against the same B values object") {
    host_buffer w{kernels::random_floats(9, 4 * 5)};
    auto g1 = gemm_item(1, 3, w, 5, 4);
    auto g2 = gemm_item(2, 7, w, 5, 4);
    auto k1 = batching::key_of(g1);
    auto k2 = batching::key_of(g2);
    REQUIRE(k1);
    REQUIRE(k2);
    CHECK(k1->kernel == kernel_id::gemm);
    CHECK(k1->shared == w.identity());
    CHECK(*k1 == *k2);
    CHECK(batching::batch_key_hash{}(*k1) == batching::batch_key_hash{}(*k2));
    // Equal values in another buffer: another identity, another batch.
    host_buffer copy{std::vector<float>(w.span().begin(), w.span().end())};
    auto g3 = gemm_item(3, 3, copy, 5, 4);
    REQUIRE(batching::key_of(g3));
    CHECK_FALSE(*batching::key_of(g3) == *k1);
    // Different alpha on the same B: another batch.
    auto g4 = gemm_item(4, 3, w, 5, 4);
    g4.args.alpha = 3.0f;
    REQUIRE(batching::key_of(g4));
    CHECK_FALSE(*batching::key_of(g4) == *k1);
    // The same B read as another shape: another batch.
    auto g5 = gemm_item(5, 3, w, 4, 5);
    REQUIRE(validate_item(g5).empty());
    REQUIRE(batching::key_of(g5));
    CHECK_FALSE(*batching::key_of(g5) == *k1);
    // A gemm that fails validation has no key.
    auto g6 = gemm_item(6, 3, w, 5, 4);
    g6.args.m = 4;
    CHECK_FALSE(batching::key_of(g6));
    // Nor an axpy.
    CHECK_FALSE(*k1 == *ka);
  }
}

TEST_CASE("merged axpy items split back into their own bits",
          "[actors][batching]") {
  std::mt19937 rng{7};
  for (float alpha : {2.0f, -0.75f, 0.0f, -0.0f, 1e-30f}) {
    std::vector<work_item> items;
    // Lengths around vector widths and unrolling, and one empty item.
    std::vector<size_t> lens{0, 1, 3, 7, 8, 15, 16, 17, 64, 1000, 4099};
    std::shuffle(lens.begin(), lens.end(), rng);
    uint64_t id = 100;
    for (auto n : lens)
      items.push_back(random_axpy(id++, alpha, n));
    // Signed zeros in y: alpha * 0 + -0 keeps the sign of alpha * x.
    items.push_back(
        axpy_item(id++, alpha, {0.0f, -0.0f, 1.0f}, {-0.0f, -0.0f, 0.0f}));
    INFO("alpha " << alpha);
    check_batch(items, kernels::run_cpu, true);
  }
  // One member: the item itself under the batch's id and tenant.
  std::vector<work_item> one{random_axpy(1, 3.0f, 33)};
  check_batch(one, kernels::run_cpu, true);
  auto merged = batching::merge(pointers(one), 9, "solo");
  CHECK(merged.inputs[0].identity() == one[0].inputs[0].identity());
}

// Not bit for bit with OpenBLAS: its sgemm computes a row of C with a
// micro-kernel chosen by the row's place in the register tiling (and in the
// split between threads), and micro-kernels round differently; a row stacked
// under other items lands elsewhere in the tiling than alone. The naive
// reference computes every row the same way wherever it is, so it checks the
// stacking exactly; OpenBLAS results are checked within tolerance.
TEST_CASE("merged gemm items with a shared B split back into their own rows",
          "[actors][batching]") {
  // (n, k) shapes: tiny, odd, and k past OpenBLAS's k-blocking.
  std::vector<std::pair<uint64_t, uint64_t>> shapes{
      {1, 1}, {5, 4}, {16, 16}, {33, 17}, {64, 300}, {129, 1000}};
  std::vector<uint64_t> ms{1, 2, 3, 7, 16, 31, 100, 1, 257};
  uint64_t id = 1;
  for (auto [n, k] : shapes) {
    host_buffer b{kernels::random_floats(1000 + n * k, k * n)};
    std::vector<work_item> items;
    for (auto m : ms)
      items.push_back(gemm_item(id++, m, b, n, k));
    INFO("n " << n << ", k " << k);
    for (auto& w : items)
      REQUIRE(batching::key_of(w) == batching::key_of(items.front()));
    check_batch(items, kernels::run_reference, true);
    check_batch(items, kernels::run_cpu, false);
    // Only the rows of A are copied: B is the same values object.
    auto merged = batching::merge(pointers(items), 1, "batch");
    CHECK(merged.inputs[1].identity() == b.identity());
  }
  SECTION("items with no rows merge too") {
    host_buffer b{kernels::random_floats(3, 8 * 6)};
    std::vector<work_item> items{gemm_item(1, 0, b, 6, 8),
                                 gemm_item(2, 4, b, 6, 8),
                                 gemm_item(3, 0, b, 6, 8)};
    check_batch(items, kernels::run_reference, true);
    check_batch(items, kernels::run_cpu, false);
  }
}

TEST_CASE("splitting an output of the wrong size is an error",
          "[actors][batching]") {
  std::vector<work_item> items{random_axpy(1, 2.0f, 5),
                               random_axpy(2, 2.0f, 7)};
  auto members = pointers(items);
  auto merged = batching::merge(members, 1, "batch");
  auto out = run_item_on_host(merged, kernels::run_cpu);
  REQUIRE(batching::split(out, members));
  SECTION("one value short") {
    out.values.pop_back();
    auto parts = batching::split(out, members);
    REQUIRE_FALSE(parts);
    CHECK(code_of(parts.error()) == errc::invalid_arguments);
    CHECK_THAT(describe(parts.error()),
               Catch::Contains("has 11 values") &&
                   Catch::Contains("2 members need 12 values"));
  }
  SECTION("one value too many") {
    out.values.push_back(1.0f);
    auto parts = batching::split(out, members);
    REQUIRE_FALSE(parts);
    CHECK(code_of(parts.error()) == errc::invalid_arguments);
  }
  SECTION("an empty output") {
    auto parts = batching::split(kernels::kernel_output{}, members);
    REQUIRE_FALSE(parts);
    CHECK_THAT(describe(parts.error()), Catch::Contains("has 0 values"));
  }
  SECTION("indices, which no batchable kernel returns") {
    out.indices.assign(out.values.size(), 0);
    auto parts = batching::split(out, members);
    REQUIRE_FALSE(parts);
    CHECK_THAT(describe(parts.error()), Catch::Contains("12 indices"));
  }
}
