// The geo kernels' arithmetic (docs/kernels.md, "Geo kernels"), one source
// for the CPU implementation (kernels/cpu/geo.cpp), the CUDA and HIP
// modules (kernels/cuda/geo.cu, kernels/hip/geo.hip) and the tests' GPU
// emulation: every backend computes the same operations in the same order,
// in double precision, with no fused multiply-add, so they agree bit for
// bit. Orientation signs are exact while coordinates are integers of
// magnitude below 2^26 (their products are exact doubles); beyond that a
// point within rounding of an edge may be classified either way, the same
// way on every backend.
#pragma once

#include <cstdint>

#if defined(__CUDACC__) || defined(__HIPCC__) || defined(COHORT_GPU_EMULATION)
#define COHORT_GEO_FN __host__ __device__ inline
#else
#define COHORT_GEO_FN inline
#endif

namespace cohort::kernels::geo {

/// point_in_polygon's answers (GEOS's and JTS's Location, with an answer
/// for a point that cannot be placed).
enum location : int32_t {
  /// A NaN coordinate, or a point whose polygon index or ring offsets are
  /// out of range: nothing can be said.
  invalid = -1,
  exterior = 0,
  interior = 1,
  /// On an edge or a vertex of the shell or of a hole.
  boundary = 2,
};

/// segment_intersection's answers.
enum intersection : int32_t {
  /// A NaN coordinate.
  bad_segment = -1,
  disjoint = 0,
  /// One common point, interior to both segments.
  crossing = 1,
  /// One common point, an endpoint of at least one segment (a shared
  /// endpoint, a T, a point segment on the other).
  touching = 2,
  /// Collinear with a common part of positive length.
  overlapping = 3,
};

/// A product the compiler may not fuse with a following add.
COHORT_GEO_FN double product(double a, double b) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}

/// Twice the signed area of (a, b, p): > 0 when p is left of a->b, < 0
/// right of it, 0 on its line.
COHORT_GEO_FN double orientation(double ax, double ay, double bx, double by,
                                 double px, double py) {
  double l = product(bx - ax, py - ay);
  double r = product(by - ay, px - ax);
  return l - r;
}

COHORT_GEO_FN int sign_of(double v) {
  return v > 0 ? 1 : (v < 0 ? -1 : 0);
}

COHORT_GEO_FN double min2(double a, double b) {
  return a < b ? a : b;
}
COHORT_GEO_FN double max2(double a, double b) {
  return a < b ? b : a;
}

/// p lies on the closed segment a-b, given that it is on its line.
COHORT_GEO_FN bool within_box(double ax, double ay, double bx, double by,
                              double px, double py) {
  return min2(ax, bx) <= px && px <= max2(ax, bx) && min2(ay, by) <= py &&
         py <= max2(ay, by);
}

COHORT_GEO_FN bool on_segment(double ax, double ay, double bx, double by,
                              double px, double py) {
  return orientation(ax, ay, bx, by, px, py) == 0 &&
         within_box(ax, ay, bx, by, px, py);
}

COHORT_GEO_FN bool is_nan(double v) {
  return v != v;
}

/// Where point (px, py) lies against polygon `g`: `vertices` holds x, y
/// pairs; ring r is vertices rings[r] .. rings[r + 1] - 1 (closed from its
/// last vertex back to its first; repeating the first vertex at the end
/// is allowed); polygon g is rings polygons[g] .. polygons[g + 1] - 1, the
/// first its shell, the others its holes. Inside is decided by the
/// even-odd rule over all its rings, so a point in a hole is exterior.
COHORT_GEO_FN int32_t locate(double px, double py, const double* vertices,
                             uint64_t vertex_count, const int64_t* rings,
                             uint64_t ring_count, const int64_t* polygons,
                             uint64_t polygon_count, int64_t g) {
  if (is_nan(px) || is_nan(py) || g < 0 || uint64_t(g) >= polygon_count)
    return invalid;
  int64_t r0 = polygons[g], r1 = polygons[g + 1];
  if (r0 < 0 || r1 < r0 || uint64_t(r1) > ring_count)
    return invalid;
  bool inside = false;
  for (int64_t r = r0; r < r1; ++r) {
    int64_t v0 = rings[r], v1 = rings[r + 1];
    if (v0 < 0 || v1 < v0 || uint64_t(v1) > vertex_count)
      return invalid;
    for (int64_t j = v0; j < v1; ++j) {
      int64_t k = j + 1 < v1 ? j + 1 : v0;
      double ax = vertices[2 * j], ay = vertices[2 * j + 1];
      double bx = vertices[2 * k], by = vertices[2 * k + 1];
      double o = orientation(ax, ay, bx, by, px, py);
      if (o == 0 && within_box(ax, ay, bx, by, px, py))
        return boundary;
      // A crossing of the ray from p towards +x: an upward edge with p on
      // its left, a downward one with p on its right (each edge half-open
      // in y, so a vertex on the ray counts once).
      if (ay <= py && by > py && o > 0)
        inside = !inside;
      else if (by <= py && ay > py && o < 0)
        inside = !inside;
    }
  }
  return inside ? interior : exterior;
}

/// How segment a (a1-a2) and segment b (b1-b2) meet.
COHORT_GEO_FN int32_t classify(double a1x, double a1y, double a2x, double a2y,
                               double b1x, double b1y, double b2x, double b2y) {
  if (is_nan(a1x) || is_nan(a1y) || is_nan(a2x) || is_nan(a2y) || is_nan(b1x) ||
      is_nan(b1y) || is_nan(b2x) || is_nan(b2y))
    return bad_segment;
  int o1 = sign_of(orientation(a1x, a1y, a2x, a2y, b1x, b1y));
  int o2 = sign_of(orientation(a1x, a1y, a2x, a2y, b2x, b2y));
  int o3 = sign_of(orientation(b1x, b1y, b2x, b2y, a1x, a1y));
  int o4 = sign_of(orientation(b1x, b1y, b2x, b2y, a2x, a2y));
  if (o1 == 0 && o2 == 0 && o3 == 0 && o4 == 0) {
    // All on one line (or points): compare intervals along the axis on
    // which the four points spread most.
    double lo_x = min2(min2(a1x, a2x), min2(b1x, b2x));
    double hi_x = max2(max2(a1x, a2x), max2(b1x, b2x));
    double lo_y = min2(min2(a1y, a2y), min2(b1y, b2y));
    double hi_y = max2(max2(a1y, a2y), max2(b1y, b2y));
    bool by_x = hi_x - lo_x >= hi_y - lo_y;
    double a_lo = by_x ? min2(a1x, a2x) : min2(a1y, a2y);
    double a_hi = by_x ? max2(a1x, a2x) : max2(a1y, a2y);
    double b_lo = by_x ? min2(b1x, b2x) : min2(b1y, b2y);
    double b_hi = by_x ? max2(b1x, b2x) : max2(b1y, b2y);
    double lo = max2(a_lo, b_lo), hi = min2(a_hi, b_hi);
    if (lo > hi)
      return disjoint;
    return lo == hi ? touching : overlapping;
  }
  if (o1 * o2 < 0 && o3 * o4 < 0)
    return crossing;
  if ((o1 == 0 && within_box(a1x, a1y, a2x, a2y, b1x, b1y)) ||
      (o2 == 0 && within_box(a1x, a1y, a2x, a2y, b2x, b2y)) ||
      (o3 == 0 && within_box(b1x, b1y, b2x, b2y, a1x, a1y)) ||
      (o4 == 0 && within_box(b1x, b1y, b2x, b2y, a2x, a2y)))
    return touching;
  return disjoint;
}

} // namespace cohort::kernels::geo
