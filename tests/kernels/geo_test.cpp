// The geo kernels (kernels/geo.hpp): golden answers for the cases a
// geometry library cares about (points on edges and vertices, rays through
// vertices and along edges, holes, degenerate polygons; crossing, touching,
// collinear and point segments), the CPU code against the reference
// (written apart from it, in long double) on integer grids where every
// degenerate case turns up, and bad input refused at admission or answered
// -1, never a crash. The GPU entry points run under the CPU emulation in
// gpu_emulation_test.cpp and on a real GPU in gpu_device_test.cpp.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <random>

#include "kernels/geo.hpp"
#include "kernels/gpu/geo_device.hpp"

using namespace cohort::kernels;

namespace {

constexpr double not_a_number = std::numeric_limits<double>::quiet_NaN();

/// Polygons as the kernel takes them.
struct polygon_set {
  std::vector<double> vertices;
  std::vector<int64_t> rings{0};
  std::vector<int64_t> polygons{0};

  /// Adds a ring to the polygon being built.
  void ring(std::vector<std::pair<double, double>> pts) {
    for (auto [x, y] : pts) {
      vertices.push_back(x);
      vertices.push_back(y);
    }
    rings.push_back(int64_t(vertices.size() / 2));
  }
  /// Ends the polygon being built (its rings since the last end).
  int64_t end() {
    polygons.push_back(int64_t(rings.size() - 1));
    return int64_t(polygons.size() - 2);
  }
};

std::vector<int32_t> as_i32(const kernel_output& o) {
  auto v = o.as<int32_t>();
  return {v.begin(), v.end()};
}

/// Both implementations' answers; they must agree.
std::vector<int32_t> locate_all(const polygon_set& ps,
                                const std::vector<double>& points,
                                const std::vector<int64_t>& which) {
  std::vector<typed_view> in{
      {points.data(), points.size(), dtype::f64},
      {ps.vertices.data(), ps.vertices.size(), dtype::f64},
      {ps.rings.data(), ps.rings.size(), dtype::i64},
      {ps.polygons.data(), ps.polygons.size(), dtype::i64},
      {which.data(), which.size(), dtype::i64}};
  auto cpu = as_i32(geo::point_in_polygon_cpu(in));
  auto ref = as_i32(geo::point_in_polygon_reference(in));
  CHECK(cpu == ref);
  return cpu;
}

std::vector<int32_t> classify_all(const std::vector<double>& a,
                                  const std::vector<double>& b) {
  std::vector<typed_view> in{{a.data(), a.size(), dtype::f64},
                             {b.data(), b.size(), dtype::f64}};
  auto cpu = as_i32(geo::segment_intersection_cpu(in));
  auto ref = as_i32(geo::segment_intersection_reference(in));
  CHECK(cpu == ref);
  return cpu;
}

const kernel_def& def(const char* name) {
  auto id = parse_kernel(name);
  REQUIRE(id);
  return *find(*id);
}

} // namespace

TEST_CASE("point in polygon: holes, edges, vertices and rays along edges",
          "[kernels][geo]") {
  polygon_set ps;
  // A 10x10 square with a 4x4 hole.
  ps.ring({{0, 0}, {10, 0}, {10, 10}, {0, 10}});
  ps.ring({{3, 3}, {7, 3}, {7, 7}, {3, 7}});
  auto square = ps.end();
  struct golden {
    double x, y;
    int32_t want;
  };
  std::vector<golden> cases = {
      {1, 1, geo::interior},    {5, 5, geo::exterior},   // in the hole
      {0, 0, geo::boundary},    {5, 0, geo::boundary},   // shell vertex, edge
      {10, 5, geo::boundary},   {3, 5, geo::boundary},   // hole edge
      {7, 7, geo::boundary},    {11, 5, geo::exterior},  // hole vertex
      {-1, 0, geo::exterior},   {12, 10, geo::exterior}, // on an edge's line
      {1, 3, geo::interior},    {1, 7, geo::interior}, // rays along hole edges
      {8, 3, geo::interior},    {0.5, 10, geo::boundary},
      {5, 10.5, geo::exterior}, {9.999, 9.999, geo::interior},
  };
  std::vector<double> pts;
  std::vector<int64_t> which;
  for (auto& c : cases) {
    pts.insert(pts.end(), {c.x, c.y});
    which.push_back(square);
  }
  auto got = locate_all(ps, pts, which);
  for (size_t i = 0; i < cases.size(); ++i) {
    INFO("point (" << cases[i].x << ", " << cases[i].y << ")");
    CHECK(got[i] == cases[i].want);
  }
}

TEST_CASE("point in polygon: a ray through a vertex, concave and degenerate "
          "polygons",
          "[kernels][geo]") {
  polygon_set ps;
  // A notch from the top down to the vertex (5, 5).
  ps.ring({{0, 0}, {10, 0}, {10, 10}, {5, 5}, {0, 10}});
  auto notch = ps.end();
  // A ring of collinear points: no area, only its segment.
  ps.ring({{0, 20}, {5, 20}, {10, 20}});
  auto flat = ps.end();
  // A ring of one vertex, and a polygon with no rings.
  ps.ring({{3, 30}});
  auto dot = ps.end();
  auto empty = ps.end();
  // The square again with its first vertex repeated at the end.
  ps.ring({{0, 40}, {10, 40}, {10, 50}, {0, 50}, {0, 40}});
  auto closed = ps.end();
  std::vector<double> pts = {2, 5,  5, 5,  5, 6,  8, 5,  5, 20, 5,  21,
                             3, 30, 3, 31, 3, 30, 5, 45, 0, 45, 11, 45};
  std::vector<int64_t> which = {notch, notch, notch, notch,  flat,   flat,
                                dot,   dot,   empty, closed, closed, closed};
  CHECK(locate_all(ps, pts, which) ==
        std::vector<int32_t>{geo::interior, geo::boundary, geo::exterior,
                             geo::interior, geo::boundary, geo::exterior,
                             geo::boundary, geo::exterior, geo::exterior,
                             geo::interior, geo::boundary, geo::exterior});
}

TEST_CASE("point in polygon: references out of range and NaN answer -1",
          "[kernels][geo]") {
  polygon_set ps;
  ps.ring({{0, 0}, {10, 0}, {10, 10}, {0, 10}});
  ps.end();
  std::vector<double> pts = {1, 1, 1, 1, 1, 1, not_a_number, 1};
  CHECK(locate_all(ps, pts, {0, 1, -1, 0}) ==
        std::vector<int32_t>{geo::interior, geo::invalid, geo::invalid,
                             geo::invalid});
  // Offsets that run backwards or past the end.
  auto bad = ps;
  bad.rings = {0, 9};
  CHECK(locate_all(bad, {1, 1}, {0}) == std::vector<int32_t>{geo::invalid});
  bad = ps;
  bad.polygons = {1, 0};
  CHECK(locate_all(bad, {1, 1}, {0}) == std::vector<int32_t>{geo::invalid});
  bad = ps;
  bad.polygons = {0, 5};
  CHECK(locate_all(bad, {1, 1}, {0}) == std::vector<int32_t>{geo::invalid});
}

TEST_CASE("segment intersection: crossing, touching, collinear, points",
          "[kernels][geo]") {
  struct golden {
    std::vector<double> a, b;
    int32_t want;
    const char* what;
  };
  std::vector<golden> cases = {
      {{0, 0, 10, 10}, {0, 10, 10, 0}, geo::crossing, "an X"},
      {{0, 0, 10, 0}, {5, 0, 5, 5}, geo::touching, "a T"},
      {{0, 0, 5, 5}, {5, 5, 10, 0}, geo::touching, "a shared endpoint"},
      {{0, 0, 10, 0}, {5, 0, 15, 0}, geo::overlapping, "collinear overlap"},
      {{0, 0, 5, 0}, {5, 0, 10, 0}, geo::touching, "collinear, end to end"},
      {{0, 0, 4, 0}, {5, 0, 10, 0}, geo::disjoint, "collinear, apart"},
      {{0, 0, 10, 0}, {0, 1, 10, 1}, geo::disjoint, "parallel"},
      {{0, 0, 0, 10}, {0, 5, 0, 20}, geo::overlapping, "vertical overlap"},
      {{0, 0, 10, 10}, {2, 2, 3, 3}, geo::overlapping, "one inside the other"},
      {{10, 10, 0, 0}, {0, 0, 10, 10}, geo::overlapping, "the same, reversed"},
      {{5, 5, 5, 5}, {0, 0, 10, 10}, geo::touching, "a point on a segment"},
      {{5, 6, 5, 6}, {0, 0, 10, 10}, geo::disjoint, "a point off it"},
      {{1, 1, 1, 1}, {1, 1, 1, 1}, geo::touching, "the same point"},
      {{1, 1, 1, 1}, {2, 1, 2, 1}, geo::disjoint, "two points, along x"},
      {{1, 1, 1, 1}, {1, 2, 1, 2}, geo::disjoint, "two points, along y"},
      {{0, 0, 10, 0}, {5, 1, 5, 10}, geo::disjoint, "a near miss"},
      {{0, 0, 1, 1}, {0, 10, 10, 0}, geo::disjoint, "lines cross, not they"},
      {{0, 0, 10, 0}, {10, 0, 10, 10}, geo::touching, "an L"},
      {{0, 0, 4, 2}, {2, 1, 2, 1}, geo::touching, "a point mid-segment"},
      {{not_a_number, 0, 1, 1}, {0, 0, 1, 1}, geo::bad_segment, "NaN"},
  };
  std::vector<double> a, b;
  for (auto& c : cases) {
    a.insert(a.end(), c.a.begin(), c.a.end());
    b.insert(b.end(), c.b.begin(), c.b.end());
  }
  auto got = classify_all(a, b);
  for (size_t i = 0; i < cases.size(); ++i) {
    INFO(cases[i].what);
    CHECK(got[i] == cases[i].want);
  }
  // Symmetric: swapping a and b changes nothing.
  CHECK(classify_all(b, a) == got);
}

TEST_CASE("the CPU code agrees with the reference on integer grids",
          "[kernels][geo]") {
  std::mt19937_64 rng{19};
  std::uniform_int_distribution<int> coord{-6, 6};
  auto c = [&] { return double(coord(rng)); };
  // Segments on a small grid: every kind of degenerate pair turns up.
  std::vector<double> a, b;
  for (int i = 0; i < 20000; ++i) {
    a.insert(a.end(), {c(), c(), c(), c()});
    b.insert(b.end(), {c(), c(), c(), c()});
  }
  auto got = classify_all(a, b);
  std::array<int, 4> seen{};
  for (auto g : got)
    ++seen[size_t(g)];
  for (int k = 0; k < 4; ++k)
    CHECK(seen[size_t(k)] > 0);
  // Polygons of random rings (self-crossing ones too: the even-odd rule
  // decides for both), points on the same grid.
  polygon_set ps;
  std::uniform_int_distribution<int> ring_size{1, 7}, ring_count{0, 3};
  std::vector<int64_t> ids;
  for (int p = 0; p < 200; ++p) {
    int rings = ring_count(rng);
    for (int r = 0; r < rings; ++r) {
      std::vector<std::pair<double, double>> pts;
      for (int v = ring_size(rng); v > 0; --v)
        pts.emplace_back(c(), c());
      ps.ring(pts);
    }
    ids.push_back(ps.end());
  }
  std::vector<double> pts;
  std::vector<int64_t> which;
  for (int i = 0; i < 20000; ++i) {
    pts.insert(pts.end(), {c(), c()});
    which.push_back(ids[size_t(i) % ids.size()]);
  }
  auto where = locate_all(ps, pts, which);
  std::array<int, 3> kinds{};
  for (auto w : where)
    ++kinds[size_t(w)];
  CHECK(kinds[0] > 0);
  CHECK(kinds[1] > 0);
  CHECK(kinds[2] > 0);
}

TEST_CASE("the geo kernels are registered with typed signatures and refuse "
          "bad shapes at admission",
          "[kernels][geo]") {
  auto& pip = def("geo.point_in_polygon");
  CHECK(pip.origin == "built-in");
  REQUIRE(pip.signature.inputs.size() == 5);
  CHECK(pip.signature.inputs[0].type == dtype::f64);
  CHECK(pip.signature.inputs[4].type == dtype::i64);
  CHECK(pip.signature.output.type == dtype::i32);
  auto check = [&](const kernel_def& d, std::vector<uint64_t> lens) {
    return d.check({}, input_lengths{lens});
  };
  CHECK(check(pip, {4, 8, 2, 2, 2}) == "");
  CHECK(pip.output_elements({}, std::vector<uint64_t>{4, 8, 2, 2, 2}) == 2);
  CHECK_THAT(check(pip, {3, 8, 2, 2, 1}), Catch::Contains("is odd"));
  CHECK_THAT(check(pip, {4, 8, 2, 2, 3}),
             Catch::Contains("one polygon index per point"));
  CHECK_THAT(check(pip, {4, 8, 0, 2, 2}), Catch::Contains("rings needs"));
  CHECK_THAT(check(pip, {4, 8, 2, 0, 2}), Catch::Contains("polygons needs"));
  auto& seg = def("geo.segment_intersection");
  CHECK(check(seg, {8, 8}) == "");
  CHECK(seg.output_elements({}, std::vector<uint64_t>{8, 8}) == 2);
  CHECK_THAT(check(seg, {6, 6}), Catch::Contains("x1, y1, x2, y2"));
  CHECK_THAT(check(seg, {8, 4}), Catch::Contains("pair by pair"));
  // GPU code exactly where this build had the toolchain for it.
#ifdef COHORT_TEST_HAVE_CUDA
  CHECK(pip.cuda.present());
  CHECK(pip.cuda.kind == gpu_code::format::fatbin);
  CHECK(seg.cuda.function == "cohort_geo_segment_intersection");
#else
  CHECK_FALSE(pip.cuda.present());
#endif
}
