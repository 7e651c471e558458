// The device code shared by the CUDA and HIP kernels (kernels/gpu/*_device.hpp)
// run on the CPU through tests/kernels/emulated_gpu.hpp, against the double
// references of the catalog. It proves the index math (grid-stride loops,
// small grids that wrap, odd sizes and edges), the block sums and the
// two-pass reductions, the shared-memory GEMM tiling (both B layouts), and
// topk_cosine's key encoding, batching and tie order. It proves nothing
// about the vendor library calls the wrappers make (CUB/rocPRIM radix sort,
// cuBLAS), which std::stable_sort and the catalog stand in for, nor about
// real hardware: warps, memory spaces, timing.
#include "emulated_gpu.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <limits>
#include <numeric>
#include <random>
#include <span>
#include <vector>

#include "kernels/catalog.hpp"
#include "kernels/geo.hpp"
#include "kernels/gpu/blas1_device.hpp"
#include "kernels/gpu/dense_device.hpp"
#include "kernels/gpu/geo_entry.hpp"
#include "kernels/gpu/launch_checks.hpp"
#include "kernels/gpu/topk_cosine_device.hpp"
#include "kernels/gpu/topk_cosine_plan.hpp"

using namespace cohort::kernels;
namespace g = cohort::kernels::gpu;
using g::emulated::launch;

namespace {

std::vector<float> random_vec(size_t n, uint64_t seed) {
  std::mt19937_64 rng{seed};
  std::uniform_real_distribution<float> d{-1.0f, 1.0f};
  std::vector<float> v(n);
  for (auto& x : v)
    x = d(rng);
  return v;
}

// Compares `got` with the catalog's reference for a call on `inputs`.
std::string check_reference(kernel_id id, const kernel_args& args,
                            std::vector<std::span<const float>> inputs,
                            const kernel_output& got) {
  const auto want = run_reference(id, args, inputs);
  return compare(id, args, inputs, got, want);
}

template <class Term, class Finish>
float two_pass(uint64_t n, unsigned blocks, Term term, Finish finish) {
  std::vector<double> partial(blocks, -1e300);
  float out = -1;
  launch(dim3(blocks), dim3(g::block_threads), &g::partial_sums<Term>, n, term,
         partial.data());
  launch(dim3(1), dim3(g::block_threads), &g::finish_sum<Finish>,
         static_cast<const double*>(partial.data()), blocks, finish, &out);
  return out;
}

} // namespace

TEST_CASE("for_each_index covers every element once (axpy)",
          "[kernels][gpu-emulation]") {
  // Edges of a block, and grids below elementwise_blocks(n) that wrap.
  for (uint64_t n : {1, 255, 256, 257, 5000}) {
    for (unsigned grid : {1u, 3u, g::elementwise_blocks(n)}) {
      INFO("n=" << n << " grid=" << grid);
      kernel_args args;
      args.alpha = 0.5f;
      const auto x = random_vec(n, 1);
      const auto y = random_vec(n, 2);
      kernel_output got;
      got.values.assign(n, -99.0f);
      launch(dim3(grid), dim3(g::block_threads), &g::for_each_index<g::axpy_op>,
             n, g::axpy_op{args.alpha, x.data(), y.data(), got.values.data()});
      CHECK(check_reference(kernel_id::axpy, args, {x, y}, got) == "");
    }
  }
}

TEST_CASE("two-pass reductions (dot, nrm2)", "[kernels][gpu-emulation]") {
  // Blocks with no items, grids that wrap many times, and
  // reduction_blocks(n). Every block costs ~10 barriers of 256 threads here
  // (~0.2 ms each), hence 20000 items (79 blocks), not more.
  for (uint64_t n : {0, 1, 255, 256, 257, 20000}) {
    const auto x = random_vec(n, 3);
    const auto y = random_vec(n, 4);
    double exact_dot = 0;
    for (uint64_t i = 0; i < n; ++i)
      exact_dot += static_cast<double>(x[i]) * y[i];
    for (unsigned blocks : {1u, 5u, g::reduction_blocks(n)}) {
      INFO("n=" << n << " blocks=" << blocks);
      const kernel_args args;
      kernel_output dot;
      dot.values = {
          two_pass(n, blocks, g::dot_term{x.data(), y.data()}, g::round_sum{})};
      // Summed in double and rounded once: exact unless a double rounding
      // of the block order lands on a float tie, which these inputs avoid.
      CHECK(dot.values[0] == static_cast<float>(exact_dot));
      CHECK(check_reference(kernel_id::dot, args, {x, y}, dot) == "");
      kernel_output nrm2;
      nrm2.values = {
          two_pass(n, blocks, g::square_term{x.data()}, g::root_sum{})};
      CHECK(check_reference(kernel_id::nrm2, args, {x}, nrm2) == "");
    }
  }
  CHECK(g::reduction_blocks(0) == 1);
  CHECK(g::reduction_scratch_bytes(0) == 256);
  CHECK(g::reduction_blocks(uint64_t{1} << 30) == 1024);
  CHECK(g::reduction_scratch_bytes(uint64_t{1} << 30) == 8192);
}

TEST_CASE("row_sums gives one sum per row (gemv)", "[kernels][gpu-emulation]") {
  // Every row costs ~10 barriers of 256 threads here, so rows are few; the
  // grids below m make blocks wrap over the rows.
  for (uint64_t m : {1, 3, 33}) {
    for (uint64_t n : {0, 1, 300}) {
      kernel_args args;
      args.m = m;
      args.n = n;
      const auto a = random_vec(m * n, 5);
      const auto x = random_vec(n, 6);
      for (unsigned grid : {1u, 2u, g::row_blocks(m)}) {
        INFO("m=" << m << " n=" << n << " grid=" << grid);
        kernel_output got;
        got.values.assign(m, -99.0f);
        launch(dim3(grid), dim3(g::block_threads),
               &g::row_sums<g::gemv_term, g::store_sum>, m, n,
               g::gemv_term{a.data(), x.data(), n},
               g::store_sum{got.values.data()});
        CHECK(check_reference(kernel_id::gemv, args, {a, x}, got) == "");
      }
    }
  }
}

TEST_CASE("gemm_tiles covers every tile, both B layouts",
          "[kernels][gpu-emulation]") {
  struct shape {
    uint64_t m, n, k;
  };
  // Every pair of m, n among a row, a partial tile, an exact tile (64) and
  // partial tiles past one and two tiles; k cycles through none, shorter
  // than, equal to and not a multiple of the staged slice (16), so each k
  // meets every m and every n.
  const uint64_t extents[] = {1, 17, 64, 65, 130};
  const uint64_t depths[] = {0, 1, 16, 33};
  std::vector<shape> shapes;
  for (size_t i = 0; i < std::size(extents); ++i)
    for (size_t j = 0; j < std::size(extents); ++j)
      shapes.push_back(
          {extents[i], extents[j], depths[(i + j) % std::size(depths)]});
  for (const auto& s : shapes) {
    kernel_args args;
    args.m = s.m;
    args.n = s.n;
    args.k = s.k;
    const auto a = random_vec(s.m * s.k, 7);
    const auto b = random_vec(s.k * s.n, 8);
    std::vector<float> bt(s.n * s.k);
    for (uint64_t p = 0; p < s.k; ++p)
      for (uint64_t c = 0; c < s.n; ++c)
        bt[c * s.k + p] = b[p * s.n + c];
    // The full grid, then grids too small for the matrix, so blocks wrap
    // along both axes, along x only, along y only.
    const dim3 full(g::gemm_blocks(s.n), g::gemm_blocks(s.m));
    std::vector<dim3> grids = {full};
    for (const dim3 grid : {dim3(1, 1), dim3(1, full.y), dim3(full.x, 1)})
      if (grid.x * grid.y < full.x * full.y &&
          std::none_of(grids.begin(), grids.end(), [&](const dim3& seen) {
            return seen.x == grid.x && seen.y == grid.y;
          }))
        grids.push_back(grid);
    for (const dim3& grid : grids) {
      INFO("m=" << s.m << " n=" << s.n << " k=" << s.k << " grid=" << grid.x
                << "x" << grid.y);
      kernel_output plain;
      kernel_output transposed;
      plain.values.assign(s.m * s.n, -99.0f);
      transposed.values.assign(s.m * s.n, -99.0f);
      const dim3 block(g::gemm_side, g::gemm_side);
      launch(grid, block, &g::gemm_tiles<false, g::store_matrix>, s.m, s.n, s.k,
             a.data(), b.data(), g::store_matrix{plain.values.data(), s.n});
      launch(grid, block, &g::gemm_tiles<true, g::store_matrix>, s.m, s.n, s.k,
             a.data(), bt.data(),
             g::store_matrix{transposed.values.data(), s.n});
      CHECK(check_reference(kernel_id::gemm, args, {a, b}, plain) == "");
      // Same products in the same order, only staged differently.
      CHECK(transposed.values == plain.values);
    }
  }
}

TEST_CASE("descending_code orders floats descending and round-trips",
          "[kernels][gpu-emulation]") {
  constexpr float inf = std::numeric_limits<float>::infinity();
  constexpr float big = std::numeric_limits<float>::max();
  std::vector<float> vals = {0.0f,    -0.0f, 1.0f, -1.0f, 0.5f, -0.5f, 1e-40f,
                             -1e-40f, inf,   -inf, big,   -big, 3e-39f};
  const auto more = random_vec(300, 9);
  vals.insert(vals.end(), more.begin(), more.end());
  for (float a : vals) {
    INFO("a=" << a);
    const float back = g::code_value(g::descending_code(a));
    CHECK(back == a);
    CHECK_FALSE((a == 0.0f && std::signbit(back))); // -0 codes as +0
    const uint32_t ca = g::descending_code(a);
    float wrong = std::numeric_limits<float>::quiet_NaN();
    for (float b : vals) {
      const uint32_t cb = g::descending_code(b);
      if ((a > b) != (ca < cb) || (a == b) != (ca == cb)) {
        wrong = b;
        break;
      }
    }
    INFO("misordered against b=" << wrong);
    CHECK(std::isnan(wrong));
  }
}

TEST_CASE("topk_cosine plan batches queries and sizes the sort key",
          "[kernels][gpu-emulation]") {
  g::launch_args a;
  a.id = kernel_id::topk_cosine;
  a.args.m = 1000;
  a.args.n = 8;
  a.args.top_k = 3;
  a.in_len[0] = 8000;
  a.in_len[1] = 8 * 10000;
  auto p = g::plan_topk_cosine(a);
  CHECK(p.batch == 4194);
  CHECK(p.last_batch_queries() == 10000 - 2 * 4194);
  CHECK(p.batch_queries(8388) == 1612);
  CHECK(p.row_norm == 0);
  CHECK(p.query_norm == 4096);
  CHECK(p.keys[0] == 4096 + 40192);
  CHECK(g::topk_key_bits(1) == 32);
  CHECK(g::topk_key_bits(2) == 33);
  CHECK(g::topk_key_bits(4096) == 44);
  CHECK(g::topk_key_bits(4194) == 45);
  a.args.m = 10000000;
  a.in_len[0] = 80000000;
  p = g::plan_topk_cosine(a);
  CHECK(p.batch == 1);
  CHECK(p.last_batch_queries() == 1);
}

namespace {

// The wrappers' topk_cosine with std::stable_sort for the vendor radix sort;
// `batch` > 0 overrides the plan's batch size to exercise batching.
void emulated_topk(const g::launch_args& a, uint64_t batch) {
  auto p = g::plan_topk_cosine(a);
  REQUIRE_FALSE(p.empty());
  if (batch > 0)
    p.batch = batch;
  const uint64_t items = p.batch * p.rows;
  std::vector<float> row_norm(p.rows);
  std::vector<float> query_norm(p.queries);
  std::vector<uint64_t> keys(items);
  std::vector<uint64_t> sorted_keys(items);
  std::vector<int32_t> index(items);
  std::vector<int32_t> sorted_index(items);
  // At most three blocks (the wrappers launch row_blocks), so the norms also
  // check blocks that wrap over the rows.
  launch(dim3(std::min(3u, g::row_blocks(p.rows))), dim3(g::block_threads),
         &g::row_sums<g::row_square_term, g::store_root>, p.rows, p.dim,
         g::row_square_term{a.in[0], p.dim}, g::store_root{row_norm.data()});
  launch(dim3(std::min(2u, g::row_blocks(p.queries))), dim3(g::block_threads),
         &g::row_sums<g::row_square_term, g::store_root>, p.queries, p.dim,
         g::row_square_term{a.in[1], p.dim}, g::store_root{query_norm.data()});
  for (uint64_t first = 0; first < p.queries; first += p.batch) {
    const uint64_t nq = p.batch_queries(first);
    const uint64_t used = nq * p.rows;
    std::fill(keys.begin(), keys.end(), ~uint64_t{0});
    launch(dim3(g::gemm_blocks(p.rows), g::gemm_blocks(nq)),
           dim3(g::gemm_side, g::gemm_side),
           &g::gemm_tiles<true, g::cosine_keys>, nq, p.rows, p.dim,
           a.in[1] + first * p.dim, a.in[0],
           g::cosine_keys{query_norm.data() + first, row_norm.data(), p.rows,
                          keys.data(), index.data()});
    // The sort looks at topk_key_bits only: every key must fit.
    const unsigned bits = g::topk_key_bits(nq);
    CHECK(std::all_of(keys.begin(), keys.begin() + used,
                      [bits](uint64_t key) { return key >> bits == 0; }));
    std::vector<uint64_t> order(used);
    std::iota(order.begin(), order.end(), uint64_t{0});
    std::stable_sort(order.begin(), order.end(),
                     [&](uint64_t x, uint64_t y) { return keys[x] < keys[y]; });
    for (uint64_t i = 0; i < used; ++i) {
      sorted_keys[i] = keys[order[i]];
      sorted_index[i] = index[order[i]];
    }
    const uint64_t count = nq * p.top_k;
    launch(dim3(g::elementwise_blocks(count)), dim3(g::block_threads),
           &g::for_each_index<g::take_top>, count,
           g::take_top{p.rows, p.top_k, sorted_keys.data(), sorted_index.data(),
                       a.out + first * p.top_k,
                       a.out_indices + first * p.top_k});
  }
}

} // namespace

TEST_CASE("topk_cosine keys, batches and ties", "[kernels][gpu-emulation]") {
  struct shape {
    uint64_t m, n, q;
    uint32_t top_k;
    uint64_t batch; // 0: the plan's
  };
  // 130 and 200 rows span several GEMM tiles, 66 queries two; batches of
  // 2 of 5 queries and 3 of 4 leave a short last batch; top_k = m ranks
  // every row.
  const shape shapes[] = {{1, 1, 1, 1, 0},     {5, 3, 2, 5, 0},
                          {70, 20, 3, 7, 0},   {70, 20, 5, 7, 2},
                          {130, 7, 4, 130, 3}, {200, 33, 66, 4, 0}};
  for (const auto& s : shapes) {
    INFO("m=" << s.m << " n=" << s.n << " q=" << s.q << " top_k=" << s.top_k
              << " batch=" << s.batch);
    auto rows = random_vec(s.m * s.n, 10);
    auto queries = random_vec(s.q * s.n, 11);
    const bool ties = s.m >= 5;
    if (ties) {
      // Row 3 duplicates row 0, row 1 is zero, row 4 is -row 0; query 0 is
      // zero, so it scores every row 0.
      std::copy(rows.begin(), rows.begin() + s.n, rows.begin() + 3 * s.n);
      std::fill(rows.begin() + s.n, rows.begin() + 2 * s.n, 0.0f);
      for (uint64_t c = 0; c < s.n; ++c)
        rows[4 * s.n + c] = -rows[c];
      std::fill(queries.begin(), queries.begin() + s.n, 0.0f);
    }
    g::launch_args a;
    a.id = kernel_id::topk_cosine;
    a.args.m = s.m;
    a.args.n = s.n;
    a.args.top_k = s.top_k;
    a.in[0] = rows.data();
    a.in[1] = queries.data();
    a.in_len[0] = rows.size();
    a.in_len[1] = queries.size();
    REQUIRE(g::shapes_match(a));
    const uint64_t outs = g::output_values(a);
    kernel_output got;
    got.values.assign(outs, -99.0f);
    got.indices.assign(outs, -1);
    a.out = got.values.data();
    a.out_indices = got.indices.data();
    emulated_topk(a, s.batch);
    // compare lets rows that tie within rounding come in either order.
    CHECK(check_reference(kernel_id::topk_cosine, a.args, {rows, queries},
                          got) == "");
    if (ties) {
      // Exact ties come in row order: the zero query ranks row t t-th.
      for (uint32_t t = 0; t < s.top_k; ++t) {
        INFO("t=" << t);
        CHECK(got.indices[t] == t);
        CHECK(got.values[t] == 0.0f);
      }
    }
  }
}

TEST_CASE("the geo entry points cover every element and agree with the CPU "
          "bit for bit",
          "[kernels][gpu-emulation][geo]") {
  std::mt19937_64 rng{7};
  std::uniform_int_distribution<int> coord{-5, 5};
  auto c = [&] { return double(coord(rng)); };
  // 1000 segment pairs over a grid not a multiple of the block.
  const uint64_t pairs = 1000;
  std::vector<double> a, b;
  for (uint64_t i = 0; i < pairs; ++i) {
    a.insert(a.end(), {c(), c(), c(), c()});
    b.insert(b.end(), {c(), c(), c(), c()});
  }
  std::vector<int32_t> out(pairs, -7);
  cohort_gpu_call call{};
  call.inputs[0] = a.data();
  call.inputs[1] = b.data();
  call.lengths[0] = a.size();
  call.lengths[1] = b.size();
  call.input_count = 2;
  call.output = out.data();
  call.output_length = pairs;
  launch(dim3(unsigned((pairs + 127) / 128)), dim3(128),
         &cohort_geo_segment_intersection, call);
  std::vector<typed_view> in{{a.data(), a.size(), dtype::f64},
                             {b.data(), b.size(), dtype::f64}};
  auto cpu_out = geo::segment_intersection_cpu(in);
  auto cpu = cpu_out.as<int32_t>();
  CHECK(std::vector<int32_t>(cpu.begin(), cpu.end()) == out);

  // Points against two polygons, one with a hole.
  std::vector<double> vertices = {0, 0, 4, 0, 4, 4,  0,  4,  1,  1,  3,
                                  1, 3, 3, 1, 3, -5, -5, -1, -5, -3, -1};
  std::vector<int64_t> rings = {0, 4, 8, 11};
  std::vector<int64_t> polygons = {0, 2, 3};
  const uint64_t points = 777;
  std::vector<double> pts;
  std::vector<int64_t> which;
  for (uint64_t i = 0; i < points; ++i) {
    pts.insert(pts.end(), {c(), c()});
    which.push_back(int64_t(i % 3) - (i % 50 == 0 ? 5 : 0)); // some invalid
  }
  std::vector<int32_t> where(points, -7);
  cohort_gpu_call pc{};
  const void* ins[] = {pts.data(), vertices.data(), rings.data(),
                       polygons.data(), which.data()};
  uint64_t lens[] = {pts.size(), vertices.size(), rings.size(), polygons.size(),
                     which.size()};
  for (int i = 0; i < 5; ++i) {
    pc.inputs[i] = ins[i];
    pc.lengths[i] = lens[i];
  }
  pc.input_count = 5;
  pc.output = where.data();
  pc.output_length = points;
  launch(dim3(unsigned((points + 255) / 256)), dim3(256),
         &cohort_geo_point_in_polygon, pc);
  std::vector<typed_view> pin{{pts.data(), pts.size(), dtype::f64},
                              {vertices.data(), vertices.size(), dtype::f64},
                              {rings.data(), rings.size(), dtype::i64},
                              {polygons.data(), polygons.size(), dtype::i64},
                              {which.data(), which.size(), dtype::i64}};
  auto want_out = geo::point_in_polygon_cpu(pin);
  auto want = want_out.as<int32_t>();
  CHECK(std::vector<int32_t>(want.begin(), want.end()) == where);
  CHECK(std::count(where.begin(), where.end(), geo::invalid) > 0);
  CHECK(std::count(where.begin(), where.end(), geo::interior) > 0);
}
