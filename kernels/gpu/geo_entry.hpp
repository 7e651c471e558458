// The geo kernels' GPU entry points (docs/kernels.md, "Geo kernels"), as
// registered kernels' GPU code is launched: one cohort_gpu_call by value
// (include/cohort/kernel_abi.h), one thread per output element. Compiled
// into a module image by nvcc (kernels/cuda/geo.cu) and hipcc
// (kernels/hip/geo.hip), which the core carries and each device loads on
// first use; the arithmetic is geo_device.hpp's, shared with the CPU.
#pragma once

#include "cohort/kernel_abi.h"
#include "kernels/gpu/geo_device.hpp"
#include "kernels/gpu/vendor_runtime.hpp"

/// out[i] = where point i lies against polygon which[i]. Inputs: points
/// (f64 x, y pairs), vertices (f64 x, y pairs), rings (i64 offsets into
/// vertices, ring count + 1), polygons (i64 offsets into rings, polygon
/// count + 1), which (i64, one per point). Output: i32 per point.
extern "C" __global__ void cohort_geo_point_in_polygon(cohort_gpu_call call) {
  const uint64_t i = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= call.output_length)
    return;
  const auto* points = static_cast<const double*>(call.inputs[0]);
  const auto* vertices = static_cast<const double*>(call.inputs[1]);
  const auto* rings = static_cast<const int64_t*>(call.inputs[2]);
  const auto* polygons = static_cast<const int64_t*>(call.inputs[3]);
  const auto* which = static_cast<const int64_t*>(call.inputs[4]);
  static_cast<int32_t*>(call.output)[i] = cohort::kernels::geo::locate(
      points[2 * i], points[2 * i + 1], vertices, call.lengths[1] / 2, rings,
      call.lengths[2] - 1, polygons, call.lengths[3] - 1, which[i]);
}

/// out[i] = how segment i of a meets segment i of b. Inputs: a, b (f64
/// x1, y1, x2, y2 per segment). Output: i32 per pair.
extern "C" __global__ void
cohort_geo_segment_intersection(cohort_gpu_call call) {
  const uint64_t i = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= call.output_length)
    return;
  const auto* a = static_cast<const double*>(call.inputs[0]) + 4 * i;
  const auto* b = static_cast<const double*>(call.inputs[1]) + 4 * i;
  static_cast<int32_t*>(call.output)[i] = cohort::kernels::geo::classify(
      a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3]);
}
