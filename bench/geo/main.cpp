// bench/geo: throughput of the geo kernels (docs/kernels.md, "Geo kernels")
// in pairs per second, the figure issue 19 asks for.
//
//   cpu      geo::*_cpu called directly on one thread.
//   runtime  items of the same size through a Cohort runtime whose only
//            devices are one backend's: one CPU worker, or the machine's
//            CUDA (or HIP) GPUs when there are any (copies in and out
//            included). Without a GPU, the GPU rows say so.
//
// Workloads: point in polygon, points against 64-vertex star polygons with
// a 16-vertex hole (1,000 polygons, each point against one); segment
// intersection, random segment pairs in a unit square.
//
//   build/bench/bench_geo [PAIRS] [ROUNDS]   (defaults 1000000, 5)
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include <cohort/cohort.hpp>

#include "kernels/geo.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

struct workload {
  std::vector<double> points, vertices;
  std::vector<int64_t> rings, polygons, which;
  std::vector<double> a, b;
};

workload make(uint64_t pairs) {
  workload w;
  std::mt19937_64 rng{42};
  std::uniform_real_distribution<double> u{0, 1};
  const int polygons = 1000;
  w.rings.push_back(0);
  w.polygons.push_back(0);
  auto ring = [&](double cx, double cy, double r, int n, bool jagged) {
    for (int i = 0; i < n; ++i) {
      double t = 2 * M_PI * i / n;
      double rr = jagged ? r * (0.6 + 0.4 * u(rng)) : r;
      w.vertices.push_back(cx + rr * std::cos(t));
      w.vertices.push_back(cy + rr * std::sin(t));
    }
    w.rings.push_back(int64_t(w.vertices.size() / 2));
  };
  for (int p = 0; p < polygons; ++p) {
    double cx = u(rng), cy = u(rng);
    ring(cx, cy, 0.02, 64, true);
    ring(cx, cy, 0.005, 16, false);
    w.polygons.push_back(int64_t(w.rings.size() - 1));
  }
  for (uint64_t i = 0; i < pairs; ++i) {
    auto g = int64_t(i % polygons);
    // Near the polygon's centre, so that every answer turns up.
    double cx =
        w.vertices[size_t(2 * w.rings[size_t(w.polygons[size_t(g)])])] - 0.02;
    double cy =
        w.vertices[size_t(2 * w.rings[size_t(w.polygons[size_t(g)])]) + 1];
    w.points.push_back(cx + 0.04 * (u(rng) - 0.5));
    w.points.push_back(cy + 0.04 * (u(rng) - 0.5));
    w.which.push_back(g);
    for (int k = 0; k < 4; ++k) {
      w.a.push_back(u(rng));
      w.b.push_back(u(rng));
    }
  }
  return w;
}

void row(const char* kernel, const char* path, uint64_t pairs,
         std::vector<double> secs) {
  std::sort(secs.begin(), secs.end());
  auto rate = [&](double s) { return double(pairs) / s / 1e6; };
  std::printf("%-22s %-18s %12.2f %12.2f %12.2f\n", kernel, path,
              rate(secs[secs.size() / 2]), rate(secs.back()), rate(secs[0]));
}

std::vector<cohort::buffer> pip_inputs(const workload& w) {
  return {cohort::buffer{w.points}, cohort::buffer{w.vertices},
          cohort::buffer{w.rings}, cohort::buffer{w.polygons},
          cohort::buffer{w.which}};
}

} // namespace

int main(int argc, char** argv) {
  uint64_t pairs = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 1000000;
  int rounds = argc > 2 ? std::atoi(argv[2]) : 5;
  if (pairs == 0 || pairs > 100000000 || rounds < 1 || rounds > 1000) {
    std::fprintf(stderr, "usage: bench_geo [PAIRS 1..1e8] [ROUNDS 1..1000]\n");
    return 2;
  }
  auto w = make(pairs);
  using cohort::kernels::dtype;
  using cohort::kernels::typed_view;
  std::vector<typed_view> pin{
      {w.points.data(), w.points.size(), dtype::f64},
      {w.vertices.data(), w.vertices.size(), dtype::f64},
      {w.rings.data(), w.rings.size(), dtype::i64},
      {w.polygons.data(), w.polygons.size(), dtype::i64},
      {w.which.data(), w.which.size(), dtype::i64}};
  std::vector<typed_view> sin{{w.a.data(), w.a.size(), dtype::f64},
                              {w.b.data(), w.b.size(), dtype::f64}};
  std::printf("geo kernels, %llu pairs per item, %d rounds (million pairs "
              "per second)\n",
              (unsigned long long)pairs, rounds);
  std::printf("%-22s %-18s %12s %12s %12s\n", "kernel", "path", "median", "min",
              "max");
  std::vector<double> pip_s, seg_s;
  std::array<uint64_t, 4> kinds{};
  for (int r = 0; r < rounds; ++r) {
    auto t0 = clock_type::now();
    auto out = cohort::kernels::geo::point_in_polygon_cpu(pin);
    pip_s.push_back(seconds_since(t0));
    t0 = clock_type::now();
    auto rel = cohort::kernels::geo::segment_intersection_cpu(sin);
    seg_s.push_back(seconds_since(t0));
    if (r == 0)
      for (auto v : out.as<int32_t>())
        ++kinds[size_t(v + 1)];
  }
  row("point_in_polygon", "cpu, direct", pairs, pip_s);
  row("segment_intersection", "cpu, direct", pairs, seg_s);

  auto pip = *cohort::kernel_named("geo.point_in_polygon");
  auto seg = *cohort::kernel_named("geo.segment_intersection");
  auto through = [&](const char* label, cohort::options opts) {
    opts.audit_path = "/tmp/cohort-bench-geo-audit.log";
    auto rt = cohort::runtime::start(opts);
    std::vector<double> a_s, b_s;
    std::string device;
    for (int r = 0; r < rounds + 1; ++r) { // the first round warms up
      cohort::work item;
      item.id = uint64_t(2 * r + 1);
      item.kernel = pip;
      item.inputs = pip_inputs(w);
      auto t0 = clock_type::now();
      auto o = rt.run(item);
      auto s = seconds_since(t0);
      if (!o.ok()) {
        std::fprintf(stderr, "bench_geo: %s\n", o.message().c_str());
        std::exit(1);
      }
      device = o->device;
      if (r > 0)
        a_s.push_back(s);
      item.id = uint64_t(2 * r + 2);
      item.kernel = seg;
      item.inputs = {cohort::buffer{w.a}, cohort::buffer{w.b}};
      t0 = clock_type::now();
      o = rt.run(item);
      s = seconds_since(t0);
      if (!o.ok()) {
        std::fprintf(stderr, "bench_geo: %s\n", o.message().c_str());
        std::exit(1);
      }
      if (r > 0)
        b_s.push_back(s);
    }
    rt.stop();
    auto path = std::string{label} + ", " + device;
    row("point_in_polygon", path.c_str(), pairs, a_s);
    row("segment_intersection", path.c_str(), pairs, b_s);
  };
  cohort::options cpu;
  cpu.cpu_workers = 1;
  cpu.gpus = false;
  through("runtime", cpu);
  cohort::options gpu;
  gpu.cpu_workers = 0;
  gpu.gpus = true;
  bool have_gpu = false;
  {
    cohort::options probe = gpu;
    probe.audit_path = "/tmp/cohort-bench-geo-audit.log";
    try {
      auto rt = cohort::runtime::start(probe);
      for (auto& d : rt.devices())
        have_gpu = have_gpu || d.kind == "cuda" || d.kind == "hip";
      rt.stop();
    } catch (const cohort::error&) {
    }
  }
  if (have_gpu)
    through("runtime", gpu);
  else
    std::printf("%-22s %-18s no CUDA or HIP GPU here: not measured\n", "both",
                "runtime, gpu");
  std::printf("answers (point in polygon, first round): invalid %llu, "
              "exterior %llu, interior %llu, boundary %llu\n",
              (unsigned long long)kinds[0], (unsigned long long)kinds[1],
              (unsigned long long)kinds[2], (unsigned long long)kinds[3]);
  return 0;
}
