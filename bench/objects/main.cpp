// bench/objects: a 3-stage pipeline with its data kept on the devices
// (docs/objects.md) against the same pipeline copying every input in and
// every output out, the figure issue 20 asks for.
//
// Each batch: h1 = 2 W + x (axpy), h2 = h1 / 2 + W (axpy), r = |h2| (nrm2),
// with W (the "weights") shared by every batch.
//
//   copy     every stage gets its inputs from the host and returns its
//            output: W and the intermediate results cross the bus each time.
//   objects  W is put once; stages 1 and 2 keep their outputs on the device
//            (keep_on_device) and the next stage reads them there.
//
// The devices are simulated GPUs (no CPU workers), whose modeled time counts
// the bytes each launch moves; on a machine with GPUs, --gpus uses them
// instead. The two modes alternate round by round; the table gives every
// round and the median.
//
//   build/bench/bench_objects [--batches B] [--elements N] [--rounds R]
//                             [--sims S] [--gpus]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <cohort/cohort.hpp>

namespace {

using clock_type = std::chrono::steady_clock;

struct settings {
  uint32_t batches = 64;
  uint64_t elements = uint64_t{1} << 20;
  uint32_t rounds = 3;
  uint32_t sims = 4;
  bool gpus = false;
};

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

cohort::work item(cohort::kernel k, float alpha,
                  std::vector<cohort::buffer> inputs, bool keep) {
  cohort::work w;
  w.kernel = k;
  w.args.alpha = alpha;
  w.inputs = std::move(inputs);
  w.keep_on_device = keep;
  return w;
}

// Waits for every future; the results in order (exits on an error: a
// benchmark of failing items measures nothing).
std::vector<cohort::result> wait_all(std::vector<cohort::future>& fs) {
  std::vector<cohort::result> out;
  out.reserve(fs.size());
  for (auto& f : fs) {
    auto o = f.wait();
    if (!o.ok()) {
      std::fprintf(stderr, "bench_objects: an item failed: %s\n",
                   o.message().c_str());
      std::exit(1);
    }
    out.push_back(std::move(o.value()));
  }
  fs.clear();
  return out;
}

// One round of the pipeline over every batch; returns the seconds it took
// and checks the answers against `expect`.
double run_round(cohort::runtime& rt, bool objects,
                 const std::vector<float>& weights,
                 const std::vector<std::vector<float>>& xs,
                 const std::vector<double>& expect) {
  auto t0 = clock_type::now();
  std::vector<cohort::future> fs;
  std::vector<cohort::result> r3;
  if (objects) {
    auto w = rt.put("default", cohort::buffer{weights});
    for (auto& x : xs)
      fs.push_back(
          rt.submit(item(cohort::kernel::axpy, 2.0f,
                         {cohort::buffer{w}, cohort::buffer{x}}, true)));
    auto r1 = wait_all(fs);
    for (auto& r : r1)
      fs.push_back(
          rt.submit(item(cohort::kernel::axpy, 0.5f,
                         {cohort::buffer{r.object}, cohort::buffer{w}}, true)));
    auto r2 = wait_all(fs);
    r1.clear();
    for (auto& r : r2)
      fs.push_back(rt.submit(
          item(cohort::kernel::nrm2, 1.0f, {cohort::buffer{r.object}}, false)));
    r3 = wait_all(fs);
  } else {
    cohort::buffer w{weights};
    for (auto& x : xs)
      fs.push_back(rt.submit(
          item(cohort::kernel::axpy, 2.0f, {w, cohort::buffer{x}}, false)));
    auto r1 = wait_all(fs);
    for (auto& r : r1)
      fs.push_back(
          rt.submit(item(cohort::kernel::axpy, 0.5f, {r.values, w}, false)));
    auto r2 = wait_all(fs);
    r1.clear();
    for (auto& r : r2)
      fs.push_back(
          rt.submit(item(cohort::kernel::nrm2, 1.0f, {r.values}, false)));
    r3 = wait_all(fs);
  }
  auto took = seconds_since(t0);
  for (size_t i = 0; i < r3.size(); ++i) {
    double got = r3[i].values.view<float>()[0];
    if (std::fabs(got - expect[i]) > 1e-3 * std::fabs(expect[i])) {
      std::fprintf(stderr, "bench_objects: batch %zu: %g, expected %g\n", i,
                   got, expect[i]);
      std::exit(1);
    }
  }
  return took;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

} // namespace

int main(int argc, char** argv) {
  settings s;
  for (int i = 1; i < argc; ++i) {
    auto arg = std::string{argv[i]};
    auto value = [&]() -> uint64_t {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bench_objects: %s needs a value\n", argv[i]);
        std::exit(2);
      }
      char* end = nullptr;
      auto v = std::strtoull(argv[++i], &end, 10);
      if (end == argv[i] || *end != '\0' || v == 0) {
        std::fprintf(stderr, "bench_objects: %s: '%s' is not a count\n",
                     arg.c_str(), argv[i]);
        std::exit(2);
      }
      return v;
    };
    if (arg == "--batches")
      s.batches = uint32_t(std::min<uint64_t>(value(), 4096));
    else if (arg == "--elements")
      s.elements = std::min<uint64_t>(value(), uint64_t{1} << 26);
    else if (arg == "--rounds")
      s.rounds = uint32_t(std::min<uint64_t>(value(), 100));
    else if (arg == "--sims")
      s.sims = uint32_t(std::min<uint64_t>(value(), 64));
    else if (arg == "--gpus")
      s.gpus = true;
    else {
      std::fprintf(stderr, "usage: bench_objects [--batches B] [--elements N] "
                           "[--rounds R] [--sims S] [--gpus]\n");
      return 2;
    }
  }
  cohort::options opts;
  opts.cpu_workers = 0;
  opts.simulated_gpus = s.gpus ? 0 : s.sims;
  opts.gpus = s.gpus;
  opts.audit_path = "/tmp/cohort-bench-objects-audit.log";
  auto rt = cohort::runtime::start(opts);
  std::string fleet;
  for (auto& d : rt.devices())
    fleet += (fleet.empty() ? "" : ", ") + d.name;
  if (fleet.empty()) {
    std::printf("bench_objects: no device (--gpus on a machine without "
                "GPUs): SKIPPED\n");
    return 0;
  }
  std::vector<float> weights(s.elements);
  for (size_t i = 0; i < weights.size(); ++i)
    weights[i] = float(i % 97) / 97.0f;
  std::vector<std::vector<float>> xs(s.batches);
  std::vector<double> expect(s.batches);
  for (uint32_t b = 0; b < s.batches; ++b) {
    xs[b].resize(s.elements);
    double sq = 0;
    for (size_t i = 0; i < s.elements; ++i) {
      xs[b][i] = float((i + b) % 13) / 13.0f;
      double h1 = 2.0 * weights[i] + xs[b][i];
      double h2 = 0.5 * h1 + weights[i];
      sq += h2 * h2;
    }
    expect[b] = std::sqrt(sq);
  }
  auto mib = double(s.elements * sizeof(float)) / double(1 << 20);
  std::printf("3-stage pipeline, %u batches of %.1f MiB vectors, on %s\n",
              s.batches, mib, fleet.c_str());
  // A first round of each, not counted: the run-time model learns the
  // devices.
  run_round(rt, false, weights, xs, expect);
  run_round(rt, true, weights, xs, expect);
  std::vector<double> copy, objects;
  std::printf("%-6s %12s %12s %8s\n", "round", "copy b/s", "objects b/s",
              "ratio");
  for (uint32_t r = 0; r < s.rounds; ++r) {
    auto c = run_round(rt, false, weights, xs, expect);
    auto o = run_round(rt, true, weights, xs, expect);
    copy.push_back(double(s.batches) / c);
    objects.push_back(double(s.batches) / o);
    std::printf("%-6u %12.1f %12.1f %7.2fx\n", r + 1, copy.back(),
                objects.back(), objects.back() / copy.back());
  }
  auto mc = median(copy);
  auto mo = median(objects);
  std::printf("%-6s %12.1f %12.1f %7.2fx\n", "median", mc, mo, mo / mc);
  // Handles are released by one-way messages: give them a moment.
  for (int i = 0; i < 200 && !rt.objects().empty(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (!rt.objects().empty()) {
    std::fprintf(stderr, "bench_objects: %zu objects left after the rounds\n",
                 rt.objects().size());
    return 1;
  }
  return 0;
}
