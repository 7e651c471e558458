// The geo kernels (docs/kernels.md, "Geo kernels"): batched point in
// polygon (polygons with holes) and segment intersection, in double
// precision, for a batch geo backend's refine step. Registered at start
// like any kernel (kernels/registry.hpp) with CPU code, a double-precision
// reference written apart from it, and, when the build had nvcc or hipcc,
// CUDA and HIP module images the core carries.
#pragma once

#include <vector>

#include "kernels/registry.hpp"

namespace cohort::kernels::geo {

/// "geo.point_in_polygon", "geo.segment_intersection".
inline constexpr const char* point_in_polygon_name = "geo.point_in_polygon";
inline constexpr const char* segment_intersection_name =
    "geo.segment_intersection";

/// Their definitions, as the registry registers them at start.
std::vector<kernel_def> definitions();

/// The CPU implementations (also what simulated GPUs and fallback run).
kernel_output point_in_polygon_cpu(typed_inputs in);
kernel_output segment_intersection_cpu(typed_inputs in);

/// The references: the same answers computed another way (crossings by
/// the edge's intersection with the ray, on-edge by projection, in long
/// double), for tests and `--check`.
kernel_output point_in_polygon_reference(typed_inputs in);
kernel_output segment_intersection_reference(typed_inputs in);

} // namespace cohort::kernels::geo
