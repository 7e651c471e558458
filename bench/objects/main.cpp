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
// With --share it times instead what another process of the node pays to
// read an object (docs/objects.md, "Sharing across processes"): attaching
// through the share socket (connect, token check, the memfd passed and
// mapped, one element read, detach) against copying the object to the
// host (`get`), the path without sharing. In this process, so on
// simulated GPUs (memfd); CUDA IPC opens only in another process, which
// the GPU test times.
//
//   build/bench/bench_objects [--batches B] [--elements N] [--rounds R]
//                             [--sims S] [--gpus] [--share]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include <cohort/client.hpp>
#include <cohort/cohort.hpp>

namespace {

using clock_type = std::chrono::steady_clock;

struct settings {
  uint32_t batches = 64;
  uint64_t elements = uint64_t{1} << 20;
  uint32_t rounds = 3;
  uint32_t sims = 4;
  bool gpus = false;
  bool share = false;
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

// p50, p99 and min of `us`, sorted here.
void spread(const char* what, std::vector<double>& us) {
  std::sort(us.begin(), us.end());
  auto at = [&](double q) { return us[size_t(q * double(us.size() - 1))]; };
  std::printf("%-28s %10.1f %10.1f %10.1f\n", what, at(0.5), at(0.99),
              us.front());
}

int share_figures(cohort::runtime& rt, const settings& s) {
  std::vector<float> x(s.elements), zero(s.elements, 0.0f);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = float(i % 97);
  // An item's output kept on its device: no host copy, so `get` copies
  // it from the device (a `put` object's get would hand out its host copy).
  auto kept = rt.run(item(cohort::kernel::axpy, 1.0f,
                          {cohort::buffer{x}, cohort::buffer{zero}}, true));
  if (!kept.ok() || !kept->object) {
    std::fprintf(stderr, "bench_objects: the kept item failed\n");
    return 1;
  }
  auto obj = kept->object;
  auto token = rt.share(obj);
  auto mib = double(s.elements * sizeof(float)) / double(1 << 20);
  std::printf("attach vs copy of a %.1f MiB object on %s, %u times each, "
              "alternating (microseconds)\n",
              mib, rt.objects().front().devices.front().c_str(),
              s.batches * 10);
  std::printf("%-28s %10s %10s %10s\n", "", "p50", "p99", "min");
  std::vector<double> attach, copy;
  double check = 0;
  for (uint32_t i = 0; i < s.batches * 10; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    {
      auto a = cohort::client::attachment::attach(rt.share_socket(), token);
      auto v = a.view<float>();
      check += v[v.size() - 1];
    }
    auto t1 = std::chrono::steady_clock::now();
    auto b = rt.get(obj);
    check += b.view<float>()[b.size() - 1];
    auto t2 = std::chrono::steady_clock::now();
    attach.push_back(
        std::chrono::duration<double, std::micro>(t1 - t0).count());
    copy.push_back(std::chrono::duration<double, std::micro>(t2 - t1).count());
  }
  spread("attach, read, detach", attach);
  spread("get (copy to the host)", copy);
  auto expect = double(x.back()) * 2 * s.batches * 10;
  if (check != expect) {
    std::fprintf(stderr, "bench_objects: read %f, expected %f\n", check,
                 expect);
    return 1;
  }
  return 0;
}

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
    else if (arg == "--share")
      s.share = true;
    else {
      std::fprintf(stderr, "usage: bench_objects [--batches B] [--elements N] "
                           "[--rounds R] [--sims S] [--gpus] [--share]\n");
      return 2;
    }
  }
  cohort::options opts;
  opts.cpu_workers = 0;
  opts.simulated_gpus = s.gpus ? 0 : s.sims;
  opts.gpus = s.gpus;
  opts.audit_path = "/tmp/cohort-bench-objects-audit.log";
  if (s.share) {
    if (s.gpus) {
      std::printf("bench_objects --share: CUDA and HIP IPC handles open only "
                  "in another process; the GPU test times that\n");
      return 0;
    }
    opts.share_socket =
        "/tmp/cohort-bench-objects-" + std::to_string(::getpid()) + ".sock";
  }
  auto rt = cohort::runtime::start(opts);
  if (s.share)
    return share_figures(rt, s);
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
