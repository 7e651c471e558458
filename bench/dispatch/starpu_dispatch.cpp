// StarPU's side of the dispatch benchmark: the same sums as StarPU tasks on
// CPU workers, all reading one registered vector (as Cohort's items share one
// host buffer), each writing its sum to its own slot.
#include <chrono>
#include <cstdlib>
#include <vector>

#include <starpu.h>

#include "bench/dispatch/dispatch.hpp"

namespace cohort::bench {

namespace {

void sum_cpu(void* buffers[], void* cl_arg) {
  auto* x = reinterpret_cast<const float*>(STARPU_VECTOR_GET_PTR(buffers[0]));
  auto n = STARPU_VECTOR_GET_NX(buffers[0]);
  float* out = nullptr;
  starpu_codelet_unpack_args(cl_arg, &out);
  double s = 0;
  for (unsigned i = 0; i < n; ++i)
    s += x[i];
  *out = float(s);
}

using clock = std::chrono::steady_clock;

} // namespace

dispatch_figures run_starpu(const std::string& policy, int tasks, int workers,
                            int latency_samples) {
  dispatch_figures out;
  out.system = "starpu " + policy;
  ::setenv("STARPU_SILENT", "1", 1);
  starpu_conf conf;
  starpu_conf_init(&conf);
  conf.ncpus = workers;
  conf.ncuda = 0;
  conf.nopencl = 0;
  conf.sched_policy_name = policy.c_str();
  if (starpu_init(&conf) != 0) {
    out.error = "starpu_init failed";
    return out;
  }
  starpu_codelet cl;
  starpu_codelet_init(&cl);
  cl.cpu_funcs[0] = sum_cpu;
  cl.nbuffers = 1;
  cl.modes[0] = STARPU_R;
  cl.name = "sum1024";
  std::vector<float> data(1024, 1.0f);
  starpu_data_handle_t handle;
  starpu_vector_data_register(&handle, STARPU_MAIN_RAM,
                              reinterpret_cast<uintptr_t>(data.data()),
                              data.size(), sizeof(float));
  std::vector<float> results(size_t(tasks) + size_t(latency_samples), 0.0f);
  auto start = clock::now();
  for (int i = 0; i < tasks; ++i) {
    float* slot = &results[size_t(i)];
    starpu_task_insert(&cl, STARPU_R, handle, STARPU_VALUE, &slot, sizeof(slot),
                       0);
  }
  starpu_task_wait_for_all();
  double secs = std::chrono::duration<double>(clock::now() - start).count();
  out.tasks_per_s = tasks / secs;
  std::vector<double> lat;
  for (int i = 0; i < latency_samples; ++i) {
    float* slot = &results[size_t(tasks + i)];
    auto t0 = clock::now();
    starpu_task_insert(&cl, STARPU_R, handle, STARPU_VALUE, &slot, sizeof(slot),
                       0);
    starpu_task_wait_for_all();
    lat.push_back(
        std::chrono::duration<double, std::micro>(clock::now() - t0).count());
  }
  out.p50_us = percentile(lat, 50);
  out.p99_us = percentile(lat, 99);
  starpu_data_unregister(handle);
  starpu_shutdown();
  for (float r : results)
    if (r != 1024.0f) {
      out.error = "wrong results";
      break;
    }
  return out;
}

} // namespace cohort::bench
