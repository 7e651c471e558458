// bench/kernels: per kernel and backend, throughput by a direct call and
// through the runtime, and their ratio. On a GPU also the kernel alone on
// device-resident data, against the hardware limit.
//
//   direct   CPU: kernels::run_cpu on one thread. GPU: the bare vendor calls a
//            hand-rolled program makes (copy in, launch, copy out, wait) with
//            pinned host buffers, no actors.
//   runtime  the same item submitted to a Cohort runtime whose only device is
//            that backend (4 items in flight), results back as messages.
//   kernel   GPU only: launches on inputs already on the device.
//   faults/item  minor page faults per item through the runtime: host memory
//            touched for the first time (fresh buffers, pinning) per item.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <sys/resource.h>

#include <caf/all.hpp>

#include "actors/runtime.hpp"
#include "devices/gpu/discover.hpp"
#include "kernels/random_data.hpp"
#include "messages/errc.hpp"
#include "messages/system_config.hpp"

using namespace cohort;
using kernels::kernel_id;
using clock_type = std::chrono::steady_clock;

namespace {

struct bench_case {
  std::string label;
  kernel_id id;
  kernels::kernel_args args;
  std::vector<host_buffer> inputs;
};

std::vector<bench_case> make_cases(bool small) {
  uint64_t n = small ? uint64_t{1} << 20 : uint64_t{1} << 24;
  uint64_t mv = small ? 1024 : 4096;
  uint64_t mm = small ? 256 : 1024;
  auto data = [](uint64_t seed, uint64_t len) {
    return host_buffer{kernels::random_floats(seed, len)};
  };
  auto x = data(1, n);
  auto y = data(2, n);
  std::vector<bench_case> out;
  kernels::kernel_args a;
  a.alpha = 0.5f;
  auto vec = std::to_string(n >> 20) + "M";
  out.push_back({"axpy " + vec, kernel_id::axpy, a, {x, y}});
  out.push_back({"dot " + vec, kernel_id::dot, {}, {x, y}});
  out.push_back({"nrm2 " + vec, kernel_id::nrm2, {}, {x}});
  out.push_back({"reduce_sum " + vec, kernel_id::reduce_sum, {}, {x}});
  out.push_back({"inclusive_scan " + vec, kernel_id::inclusive_scan, {}, {x}});
  kernels::kernel_args g;
  g.m = mv;
  g.n = mv;
  out.push_back({"gemv " + std::to_string(mv) + "^2",
                 kernel_id::gemv,
                 g,
                 {data(3, mv * mv), data(4, mv)}});
  kernels::kernel_args mmk;
  mmk.m = mmk.n = mmk.k = mm;
  out.push_back({"gemm " + std::to_string(mm) + "^3",
                 kernel_id::gemm,
                 mmk,
                 {data(5, mm * mm), data(6, mm * mm)}});
  kernels::kernel_args t;
  t.m = small ? 8192 : 65536;
  t.n = 128;
  t.top_k = 10;
  out.push_back({"topk_cosine " + std::to_string(t.m) + "x128 q8",
                 kernel_id::topk_cosine,
                 t,
                 {data(7, t.m * 128), data(8, 8 * 128)}});
  return out;
}

// GB/s for memory-bound kernels, GFLOP/s for the others.
bool flop_bound(kernel_id id) {
  return id == kernel_id::gemm || id == kernel_id::topk_cosine;
}

double rate(const bench_case& c, double seconds_per_call) {
  std::vector<std::span<const float>> views;
  for (auto& in : c.inputs)
    views.push_back(in.span());
  auto cost = kernels::cost(c.id, c.args, views);
  return (flop_bound(c.id) ? cost.flops : cost.bytes) / seconds_per_call / 1e9;
}

double seconds_since(clock_type::time_point start) {
  return std::chrono::duration<double>(clock_type::now() - start).count();
}

// Page faults of this process so far: memory the host touches for the
// first time (fresh allocations, pinning) shows up here.
long minor_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

struct runtime_timing {
  double seconds = 0; // per item
  double faults = 0;  // minor page faults per item
};

// Per item through a runtime, `window` items in flight.
runtime_timing through_runtime(caf::actor_system& sys, actors::runtime& rt,
                               const bench_case& c, int repeat, int window) {
  caf::scoped_actor self{sys};
  auto sink = caf::actor_cast<actors::client_sink>(self);
  auto submit = [&](uint64_t id) {
    work_item item;
    item.id = id;
    item.tenant = "bench";
    item.kernel = c.id;
    item.args = c.args;
    item.inputs = c.inputs;
    self->send(rt.entry(), submit_atom::value, std::move(item), sink);
  };
  // One warm-up item: the balancer learns the device's speed.
  submit(0);
  self->receive([](result_atom, work_result&) {},
                [](failed_atom, uint64_t, caf::error& err) {
                  std::fprintf(stderr, "bench: %s\n", describe(err).c_str());
                  std::exit(1);
                });
  auto faults = minor_faults();
  auto start = clock_type::now();
  int sent = 0;
  int done = 0;
  for (; sent < std::min(window, repeat); ++sent)
    submit(uint64_t(sent) + 1);
  while (done < repeat) {
    self->receive([&](result_atom, work_result&) { ++done; },
                  [&](failed_atom, uint64_t, caf::error& err) {
                    std::fprintf(stderr, "bench: %s\n", describe(err).c_str());
                    std::exit(1);
                  });
    if (sent < repeat)
      submit(uint64_t(++sent));
  }
  runtime_timing t;
  t.seconds = seconds_since(start) / repeat;
  t.faults = double(minor_faults() - faults) / repeat;
  return t;
}

pb::RuntimeConfig config(bool cpu, const std::string& audit) {
  pb::RuntimeConfig cfg;
  cfg.mutable_devices()->set_cpu_workers(cpu ? 1 : 0);
  cfg.mutable_devices()->set_gpus(!cpu);
  // Kernels on a GPU of the bench's own process: a device host process
  // would add the crossing of every input (bench/hosts measures that).
  cfg.mutable_devices()->set_gpu_host_processes(false);
  auto* t = cfg.add_tenant();
  t->set_tenant("bench");
  t->add_kernels("*");
  t->add_devices("*");
  cfg.set_audit_path(audit);
  return cfg;
}

// The HBM limit of the GPUs the project targets; 0 when unknown.
double peak_gbytes(const std::string& model) {
  if (model.find("H100") != std::string::npos)
    return model.find("PCIe") != std::string::npos ? 2000 : 3350;
  if (model.find("H200") != std::string::npos)
    return 4800;
  return 0;
}

struct gpu_timing {
  double direct = 0;
  double kernel = 0;
};

// The bare vendor calls, without the runtime: what a hand-rolled program
// does per call, and the kernel alone on resident data.
gpu_timing bare_gpu(devices::gpu::api& rt, int ordinal, const bench_case& c,
                    int repeat) {
  using namespace devices::gpu;
  auto check = [&](result rc, const char* what) {
    if (rc.failed()) {
      std::fprintf(stderr, "bench: %s: %s\n", what,
                   rt.describe(rc.raw).c_str());
      std::exit(1);
    }
  };
  check(rt.set_device(ordinal), "set_device");
  stream_t s = nullptr;
  check(rt.stream_create(s), "stream_create");
  kernels::gpu::launch_args la;
  la.id = c.id;
  la.args = c.args;
  std::vector<void*> blocks;
  std::vector<float*> pinned;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    la.in_len[i] = c.inputs[i].size();
    void* d = nullptr;
    check(rt.malloc_device(d, c.inputs[i].bytes()), "malloc");
    blocks.push_back(d);
    la.in[i] = static_cast<float*>(d);
    auto* h = static_cast<float*>(
        std::aligned_alloc(4096, (c.inputs[i].bytes() + 4095) / 4096 * 4096));
    std::memcpy(h, c.inputs[i].span().data(), c.inputs[i].bytes());
    check(rt.host_register(h, c.inputs[i].bytes()), "host_register");
    pinned.push_back(h);
  }
  auto outs = kernels::gpu::output_values(la);
  void* out = nullptr;
  check(rt.malloc_device(out, outs * sizeof(float) + 1), "malloc");
  la.out = static_cast<float*>(out);
  void* idx = nullptr;
  if (c.id == kernel_id::topk_cosine) {
    check(rt.malloc_device(idx, outs * sizeof(int64_t)), "malloc");
    la.out_indices = static_cast<int64_t*>(idx);
  }
  size_t scratch = 0;
  check(rt.scratch_bytes(la, scratch), "scratch_bytes");
  void* scr = nullptr;
  if (scratch > 0)
    check(rt.malloc_device(scr, scratch), "malloc");
  la.scratch = scr;
  la.scratch_bytes = scratch;
  auto* host_out = static_cast<float*>(
      std::aligned_alloc(4096, (outs * 8 + 4095) / 4096 * 4096 + 4096));
  check(rt.host_register(host_out, outs * sizeof(float) + 1), "host_register");
  gpu_timing t;
  auto start = clock_type::now();
  for (int r = 0; r < repeat; ++r) {
    for (size_t i = 0; i < c.inputs.size(); ++i)
      check(rt.copy_to_device(blocks[i], pinned[i], c.inputs[i].bytes(), s),
            "copy");
    check(rt.launch(la, s), "launch");
    check(rt.copy_to_host(host_out, out, outs * sizeof(float), s), "copy");
    check(rt.stream_synchronize(s), "synchronize");
  }
  t.direct = seconds_since(start) / repeat;
  start = clock_type::now();
  for (int r = 0; r < repeat; ++r)
    check(rt.launch(la, s), "launch");
  check(rt.stream_synchronize(s), "synchronize");
  t.kernel = seconds_since(start) / repeat;
  rt.host_unregister(host_out);
  std::free(host_out);
  for (auto* h : pinned) {
    rt.host_unregister(h);
    std::free(h);
  }
  for (auto* b : blocks)
    rt.free_device(b);
  for (auto* p : {out, idx, scr})
    if (p != nullptr)
      rt.free_device(p);
  rt.stream_destroy(s);
  return t;
}

} // namespace

int main(int argc, char** argv) {
  bool small = false;
  int repeat = 20;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--small") == 0)
      small = true;
    else if (std::strcmp(argv[i], "--repeat") == 0 && i + 1 < argc)
      repeat = std::max(1, std::atoi(argv[++i]));
    else {
      std::fprintf(stderr, "usage: bench_kernels [--small] [--repeat N]\n");
      return 2;
    }
  }
  kernels::use_single_threaded_blas();
  auto cases = make_cases(small);
  system_config cfg;
  caf::actor_system sys{cfg};
  char audit_tmpl[] = "/tmp/cohort-bench-kernels-XXXXXX";
  std::string audit_dir = ::mkdtemp(audit_tmpl);

  std::printf("bench/kernels: %d calls per figure; GB/s for vector kernels "
              "and gemv, GFLOP/s for gemm and topk_cosine\n\n",
              repeat);
  std::printf("%-28s %-8s %10s %10s %8s %10s %8s %12s\n", "kernel", "backend",
              "direct", "runtime", "rt/dir", "kernel", "% peak", "faults/item");
  // CPU: one worker, single-threaded BLAS, the same as a direct call.
  {
    auto rt = actors::runtime::start(sys, config(true, audit_dir + "/cpu.log"));
    if (!rt) {
      std::fprintf(stderr, "bench: %s\n", describe(rt.error()).c_str());
      return 1;
    }
    for (auto& c : cases) {
      std::vector<std::span<const float>> views;
      for (auto& in : c.inputs)
        views.push_back(in.span());
      kernels::run_cpu(c.id, c.args, views); // warm-up
      auto start = clock_type::now();
      for (int r = 0; r < repeat; ++r)
        kernels::run_cpu(c.id, c.args, views);
      double direct = seconds_since(start) / repeat;
      auto through = through_runtime(sys, **rt, c, repeat, 4);
      std::printf("%-28s %-8s %10.2f %10.2f %7.3fx %10s %8s %12.0f\n",
                  c.label.c_str(), "cpu", rate(c, direct),
                  rate(c, through.seconds), direct / through.seconds, "-", "-",
                  through.faults);
      std::fflush(stdout);
    }
    (*rt)->stop();
  }
  // GPUs of every built backend.
  auto found = devices::gpu::discover({});
  for (auto& b : found.backends)
    if (b.count == 0)
      std::printf("%-28s %-8s skipped: %s\n", "all kernels", b.vendor.c_str(),
                  b.note.c_str());
  if (!found.devices.empty()) {
    // Copied out: the discovered devices are released before the runtime
    // opens the GPU again.
    auto info = found.devices.front()->info();
    auto rtapi = info.kind == device_kind::cuda_gpu
                     ? devices::gpu::cuda_runtime()
                     : devices::gpu::hip_runtime();
    auto peak = peak_gbytes(info.model);
    found.devices.clear();
    auto rt =
        actors::runtime::start(sys, config(false, audit_dir + "/gpu.log"));
    if (!rt) {
      std::fprintf(stderr, "bench: %s\n", describe(rt.error()).c_str());
      return 1;
    }
    for (auto& c : cases) {
      bare_gpu(*rtapi, 0, c, 2); // warm-up (cuBLAS, module loading)
      auto t = bare_gpu(*rtapi, 0, c, repeat);
      auto through = through_runtime(sys, **rt, c, repeat, 4);
      double kern = rate(c, t.kernel);
      std::string pct = "-";
      if (!flop_bound(c.id) && peak > 0) {
        char buf[32];
        std::snprintf(buf, sizeof(buf), "%.1f%%", 100 * kern / peak);
        pct = buf;
      }
      std::printf("%-28s %-8s %10.2f %10.2f %7.3fx %10.2f %8s %12.0f\n",
                  c.label.c_str(), to_string(info.kind), rate(c, t.direct),
                  rate(c, through.seconds), t.direct / through.seconds, kern,
                  pct.c_str(), through.faults);
      std::fflush(stdout);
    }
    std::printf("\nGPU: %s (%s); %% peak: kernel GB/s against %.0f GB/s HBM\n",
                info.model.c_str(), info.name.c_str(), peak);
    (*rt)->stop();
  }
  std::string cmd = "rm -rf " + audit_dir;
  if (std::system(cmd.c_str()) != 0)
    std::fprintf(stderr, "bench: could not remove %s\n", audit_dir.c_str());
  return 0;
}
