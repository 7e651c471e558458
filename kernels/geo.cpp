#include "kernels/geo.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "kernels/gpu/geo_device.hpp"

// The module images nvcc and hipcc built from kernels/cuda/geo.cu and
// kernels/hip/geo.hip (scripts/embed_blob.py), when the build had them.
namespace cohort::kernels::images {
#ifdef COHORT_GEO_CUDA
extern const unsigned char geo_cuda[];
extern const std::size_t geo_cuda_size;
#endif
#ifdef COHORT_GEO_HIP
extern const unsigned char geo_hip[];
extern const std::size_t geo_hip_size;
#endif
} // namespace cohort::kernels::images

namespace cohort::kernels::geo {

namespace {

std::string format(const char* fmt, auto... xs) {
  char buf[256];
  std::snprintf(buf, sizeof(buf), fmt, xs...);
  return buf;
}

using ull = unsigned long long;

std::string check_pip(input_lengths in) {
  if (in[0] % 2 != 0)
    return format("geo.point_in_polygon: points holds x, y pairs: %llu "
                  "values is odd",
                  ull(in[0]));
  if (in[1] % 2 != 0)
    return format("geo.point_in_polygon: vertices holds x, y pairs: %llu "
                  "values is odd",
                  ull(in[1]));
  if (in[2] == 0)
    return "geo.point_in_polygon: rings needs at least one offset (ring "
           "count + 1)";
  if (in[3] == 0)
    return "geo.point_in_polygon: polygons needs at least one offset "
           "(polygon count + 1)";
  if (in[4] != in[0] / 2)
    return format("geo.point_in_polygon: which needs one polygon index per "
                  "point: %llu points, %llu indices",
                  ull(in[0] / 2), ull(in[4]));
  return {};
}

std::string check_segments(input_lengths in) {
  if (in[0] % 4 != 0 || in[1] % 4 != 0)
    return format("geo.segment_intersection: a and b hold x1, y1, x2, y2 per "
                  "segment: %llu and %llu values",
                  ull(in[0]), ull(in[1]));
  if (in[0] != in[1])
    return format("geo.segment_intersection: a and b are compared pair by "
                  "pair: %llu and %llu segments",
                  ull(in[0] / 4), ull(in[1] / 4));
  return {};
}

double bytes_of(input_lengths in, size_t out_elements) {
  // Every input but `which`'s and the offsets' is f64; those are i64:
  // eight bytes each all the same. The output is i32.
  double b = 0;
  for (auto n : in)
    b += 8.0 * double(n);
  return b + 4.0 * double(out_elements);
}

gpu_code module_code(const unsigned char* image, std::size_t size,
                     gpu_code::format kind, const char* function) {
  gpu_code c;
  c.kind = kind;
  c.image = std::make_shared<const std::vector<uint8_t>>(image, image + size);
  c.function = function;
  c.block = 256;
  return c;
}

// The entry point `function` of the carried images, for each backend the
// build had a toolchain for; the kernel is built-in either way.
void attach_gpu_code(kernel_def& d, const char* function) {
#ifdef COHORT_GEO_CUDA
  d.cuda = module_code(images::geo_cuda, images::geo_cuda_size,
                       gpu_code::format::fatbin, function);
#endif
#ifdef COHORT_GEO_HIP
  d.hip = module_code(images::geo_hip, images::geo_hip_size,
                      gpu_code::format::hip_code_object, function);
#endif
  d.origin = "built-in";
}

kernel_def pip_def() {
  kernel_def d;
  d.name = point_in_polygon_name;
  d.signature.inputs = {{"points", dtype::f64},
                        {"vertices", dtype::f64},
                        {"rings", dtype::i64},
                        {"polygons", dtype::i64},
                        {"which", dtype::i64}};
  d.signature.output = {"location", dtype::i32};
  d.check = [](const kernel_args&, input_lengths in) { return check_pip(in); };
  d.output_elements = [](const kernel_args&, input_lengths in) {
    return in[0] / 2;
  };
  d.cost = [](const kernel_args&, input_lengths in) {
    // Each point walks its polygon's edges: about ten flops an edge, with
    // the average polygon's size standing in for its own.
    double polygons = double(std::max<uint64_t>(in[3], 2) - 1);
    double edges = std::max(1.0, double(in[1] / 2) / polygons);
    return kernel_cost{double(in[0] / 2) * edges * 10.0,
                       bytes_of(in, in[0] / 2)};
  };
  d.cpu = [](const kernel_args&, typed_inputs in) {
    return point_in_polygon_cpu(in);
  };
  d.reference = [](const kernel_args&, typed_inputs in) {
    return point_in_polygon_reference(in);
  };
  attach_gpu_code(d, "cohort_geo_point_in_polygon");
  return d;
}

kernel_def segment_def() {
  kernel_def d;
  d.name = segment_intersection_name;
  d.signature.inputs = {{"a", dtype::f64}, {"b", dtype::f64}};
  d.signature.output = {"relation", dtype::i32};
  d.check = [](const kernel_args&, input_lengths in) {
    return check_segments(in);
  };
  d.output_elements = [](const kernel_args&, input_lengths in) {
    return in[0] / 4;
  };
  d.cost = [](const kernel_args&, input_lengths in) {
    return kernel_cost{double(in[0] / 4) * 30.0, bytes_of(in, in[0] / 4)};
  };
  d.cpu = [](const kernel_args&, typed_inputs in) {
    return segment_intersection_cpu(in);
  };
  d.reference = [](const kernel_args&, typed_inputs in) {
    return segment_intersection_reference(in);
  };
  attach_gpu_code(d, "cohort_geo_segment_intersection");
  return d;
}

// -- the references: long double, another formulation ------------------------

using real = long double;

real cross(real ax, real ay, real bx, real by) {
  return ax * by - ay * bx;
}

// p on the closed segment a-b, by projection (a point segment: p == a).
bool reference_on_segment(real ax, real ay, real bx, real by, real px,
                          real py) {
  real dx = bx - ax, dy = by - ay;
  if (dx == 0 && dy == 0)
    return px == ax && py == ay;
  if (cross(dx, dy, px - ax, py - ay) != 0)
    return false;
  real t = (px - ax) * dx + (py - ay) * dy;
  return t >= 0 && t <= dx * dx + dy * dy;
}

int32_t reference_locate(const double* pt, std::span<const double> v,
                         std::span<const int64_t> rings,
                         std::span<const int64_t> polygons, int64_t g) {
  real px = pt[0], py = pt[1];
  if (std::isnan(pt[0]) || std::isnan(pt[1]) || g < 0 ||
      uint64_t(g) + 1 >= polygons.size())
    return invalid;
  auto r0 = polygons[size_t(g)], r1 = polygons[size_t(g) + 1];
  if (r0 < 0 || r1 < r0 || uint64_t(r1) >= rings.size())
    return invalid;
  int crossings = 0;
  for (auto r = r0; r < r1; ++r) {
    auto v0 = rings[size_t(r)], v1 = rings[size_t(r) + 1];
    if (v0 < 0 || v1 < v0 || uint64_t(v1) > v.size() / 2)
      return invalid;
    for (auto j = v0; j < v1; ++j) {
      auto k = j + 1 < v1 ? j + 1 : v0;
      real ax = v[size_t(2 * j)], ay = v[size_t(2 * j + 1)];
      real bx = v[size_t(2 * k)], by = v[size_t(2 * k + 1)];
      if (reference_on_segment(ax, ay, bx, by, px, py))
        return boundary;
      // Where the edge meets the horizontal line through p, if it spans
      // it (half-open in y); a crossing when that is right of p.
      if ((ay > py) != (by > py)) {
        real x = ax + (py - ay) * (bx - ax) / (by - ay);
        if (px < x)
          ++crossings;
      }
    }
  }
  return crossings % 2 == 1 ? interior : exterior;
}

int32_t reference_classify(const double* a, const double* b) {
  for (int i = 0; i < 4; ++i)
    if (std::isnan(a[i]) || std::isnan(b[i]))
      return bad_segment;
  real a1x = a[0], a1y = a[1], a2x = a[2], a2y = a[3];
  real b1x = b[0], b1y = b[1], b2x = b[2], b2y = b[3];
  real rx = a2x - a1x, ry = a2y - a1y, sx = b2x - b1x, sy = b2y - b1y;
  bool a_point = rx == 0 && ry == 0, b_point = sx == 0 && sy == 0;
  if (a_point && b_point)
    return a1x == b1x && a1y == b1y ? touching : disjoint;
  if (a_point)
    return reference_on_segment(b1x, b1y, b2x, b2y, a1x, a1y) ? touching
                                                              : disjoint;
  if (b_point)
    return reference_on_segment(a1x, a1y, a2x, a2y, b1x, b1y) ? touching
                                                              : disjoint;
  real qx = b1x - a1x, qy = b1y - a1y;
  real d = cross(rx, ry, sx, sy);
  if (d == 0) {
    if (cross(qx, qy, rx, ry) != 0)
      return disjoint; // parallel, apart
    // Collinear: b's ends along a, in units of |a|^2.
    real len = rx * rx + ry * ry;
    real s0 = qx * rx + qy * ry;
    real s1 = (b2x - a1x) * rx + (b2y - a1y) * ry;
    real lo = std::max<real>(0, std::min(s0, s1));
    real hi = std::min(len, std::max(s0, s1));
    if (lo > hi)
      return disjoint;
    return lo == hi ? touching : overlapping;
  }
  // a1 + t r = b1 + u s, with t = tn / d and u = un / d.
  real tn = cross(qx, qy, sx, sy), un = cross(qx, qy, rx, ry);
  if (d < 0) {
    d = -d;
    tn = -tn;
    un = -un;
  }
  if (tn < 0 || tn > d || un < 0 || un > d)
    return disjoint;
  if (tn > 0 && tn < d && un > 0 && un < d)
    return crossing;
  return touching;
}

} // namespace

std::vector<kernel_def> definitions() {
  return {pip_def(), segment_def()};
}

kernel_output point_in_polygon_cpu(typed_inputs in) {
  auto points = in[0].as<double>();
  auto vertices = in[1].as<double>();
  auto rings = in[2].as<int64_t>();
  auto polygons = in[3].as<int64_t>();
  auto which = in[4].as<int64_t>();
  kernel_output out;
  out.resize(dtype::i32, points.size() / 2);
  auto o = out.as<int32_t>();
  for (size_t i = 0; i < o.size(); ++i)
    o[i] = locate(points[2 * i], points[2 * i + 1], vertices.data(),
                  vertices.size() / 2, rings.data(), rings.size() - 1,
                  polygons.data(), polygons.size() - 1, which[i]);
  return out;
}

kernel_output segment_intersection_cpu(typed_inputs in) {
  auto a = in[0].as<double>();
  auto b = in[1].as<double>();
  kernel_output out;
  out.resize(dtype::i32, a.size() / 4);
  auto o = out.as<int32_t>();
  for (size_t i = 0; i < o.size(); ++i) {
    auto* p = &a[4 * i];
    auto* q = &b[4 * i];
    o[i] = classify(p[0], p[1], p[2], p[3], q[0], q[1], q[2], q[3]);
  }
  return out;
}

kernel_output point_in_polygon_reference(typed_inputs in) {
  auto points = in[0].as<double>();
  kernel_output out;
  out.resize(dtype::i32, points.size() / 2);
  auto o = out.as<int32_t>();
  for (size_t i = 0; i < o.size(); ++i)
    o[i] = reference_locate(&points[2 * i], in[1].as<double>(),
                            in[2].as<int64_t>(), in[3].as<int64_t>(),
                            in[4].as<int64_t>()[i]);
  return out;
}

kernel_output segment_intersection_reference(typed_inputs in) {
  auto a = in[0].as<double>();
  auto b = in[1].as<double>();
  kernel_output out;
  out.resize(dtype::i32, a.size() / 4);
  auto o = out.as<int32_t>();
  for (size_t i = 0; i < o.size(); ++i)
    o[i] = reference_classify(&a[4 * i], &b[4 * i]);
  return out;
}

} // namespace cohort::kernels::geo
