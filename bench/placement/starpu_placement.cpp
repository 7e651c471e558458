// StarPU's side of the placement benchmark. Each task sleeps for its cost on
// the worker StarPU picked, so StarPU's whole job is placement.
//
// What StarPU 1.3 can be told here:
// - Every CPU worker has the same performance-model arch (type CPU, devid 0,
//   one core: "cpu0"), so a history model pools the run times of fast and slow
//   workers into one mean per footprint and predicts the same length on every
//   worker. With every task submitted up front, dmda has placed them all
//   before any finishes, so it gives each worker the same predicted work and
//   the slowest worker sets the makespan.
// - A STARPU_PER_ARCH (or STARPU_COMMON) cost function gets that shared arch,
//   never the worker, so it cannot express per-worker speed either; nor can
//   starpu_perfmodel_set_per_devices_cost_function, as all CPUs are devid 0.
// - It can be told per-worker costs indirectly: a codelet may have up to
//   STARPU_MAXIMPLEMENTATIONS implementations, models are kept per
//   implementation, and can_execute can tie implementation i to worker i. The
//   "exact" model does that; it is the best StarPU can be told, not a way
//   users would normally describe a CPU. Spikes are noise and stay untold.
// - Debian's StarPU 1.3 is built with STARPU_MAXCPUS = 4: it starts at most 4
//   CPU workers whatever ncpus says. More workers than cores is fine.
#include "bench/placement/starpu_placement.hpp"

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <thread>

#include <starpu.h>

namespace cohort::bench {

namespace {

using clock = std::chrono::steady_clock;

/// What the callbacks of one StarPU run need, indexed by StarPU worker id.
struct pass_state {
  std::vector<double> speed_of_worker;
  /// The "exact" model: implementation i runs only on worker_of_impl[i].
  std::vector<int> worker_of_impl;
  double spike_factor = 1;
};

/// A task's cl_arg.
struct task_arg {
  const placement_task* task;
  const pass_state* state;
};

const task_arg& arg_of(const starpu_task* t) {
  return *static_cast<const task_arg*>(t->cl_arg);
}

void sleep_cpu(void* /*buffers*/[], void* cl_arg) {
  const auto& arg = *static_cast<const task_arg*>(cl_arg);
  double ns = arg.task->work_ns /
              arg.state->speed_of_worker[size_t(starpu_worker_get_id())];
  if (arg.task->spike)
    ns *= arg.state->spike_factor;
  std::this_thread::sleep_for(std::chrono::nanoseconds(int64_t(ns)));
}

uint32_t kind_footprint(starpu_task* t) {
  return arg_of(t).task->kind;
}

// Spikes are injected noise: no model is told about them.
double exact_cost_us(starpu_task* t, starpu_perfmodel_arch* /*arch*/,
                     unsigned nimpl) {
  const auto& arg = arg_of(t);
  auto worker = size_t(arg.state->worker_of_impl[nimpl]);
  return arg.task->work_ns / 1e3 / arg.state->speed_of_worker[worker];
}

// The arch names no worker, so speed 1.0 is as good a guess as any.
double arch_cost_us(starpu_task* t, starpu_perfmodel_arch* /*arch*/,
                    unsigned /*nimpl*/) {
  return arg_of(t).task->work_ns / 1e3;
}

int impl_matches_worker(unsigned workerid, starpu_task* t, unsigned nimpl) {
  return arg_of(t).state->worker_of_impl[nimpl] == int(workerid);
}

/// Sets an environment variable for its lifetime, then restores it.
class scoped_env {
public:
  scoped_env(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name))
      old_ = old;
    ::setenv(name, value.c_str(), 1);
  }
  ~scoped_env() {
    if (old_)
      ::setenv(name_, old_->c_str(), 1);
    else
      ::unsetenv(name_);
  }
  scoped_env(const scoped_env&) = delete;
  scoped_env& operator=(const scoped_env&) = delete;

private:
  const char* name_;
  std::optional<std::string> old_;
};

/// A fresh directory, removed with everything in it at scope exit. Empty
/// path() when it could not be made.
class temp_dir {
public:
  temp_dir() {
    std::error_code ec;
    auto base = std::filesystem::temp_directory_path(ec);
    std::string pattern =
        (ec ? std::string("/tmp") : base.string()) + "/cohort-starpu-XXXXXX";
    if (::mkdtemp(pattern.data()))
      path_ = pattern;
  }
  ~temp_dir() {
    std::error_code ec;
    if (!path_.empty())
      std::filesystem::remove_all(path_, ec);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  const std::string& path() const { return path_; }

private:
  std::string path_;
};

struct pass_result {
  double makespan_s = 0;
  std::string error;
};

/// One starpu_init .. starpu_shutdown around submitting every task and
/// waiting for all of them. Models are saved at shutdown, so a later pass
/// with the same symbol starts from this one's history.
pass_result run_pass(const std::vector<placement_task>& tasks,
                     const std::vector<double>& speeds, double spike_factor,
                     const std::string& model, bool calibrate) {
  pass_result out;
  // Everything StarPU may call back into must outlive starpu_shutdown().
  pass_state state;
  state.spike_factor = spike_factor;
  std::vector<task_arg> args;
  args.reserve(tasks.size());
  starpu_perfmodel perf{};
  starpu_codelet cl;
  starpu_codelet_init(&cl);
  cl.name = "cohort_placement";
  cl.nbuffers = 0;
  cl.model = &perf;
  perf.symbol = "cohort_placement";
  if (model == "history") {
    perf.type = STARPU_HISTORY_BASED;
    perf.footprint = kind_footprint;
    cl.cpu_funcs[0] = sleep_cpu;
  } else if (model == "exact") {
    perf.type = STARPU_PER_ARCH;
    perf.arch_cost_function = exact_cost_us;
    for (size_t i = 0; i < speeds.size(); ++i)
      cl.cpu_funcs[i] = sleep_cpu;
    cl.can_execute = impl_matches_worker;
  } else {
    perf.type = STARPU_PER_ARCH;
    perf.arch_cost_function = arch_cost_us;
    cl.cpu_funcs[0] = sleep_cpu;
  }

  starpu_conf conf;
  starpu_conf_init(&conf);
  conf.precedence_over_environment_variables = 1;
  conf.ncpus = int(speeds.size());
  conf.ncuda = 0;
  conf.nopencl = 0;
  conf.nmic = 0;
  conf.nmpi_ms = 0;
  conf.sched_policy_name = "dmda";
  conf.calibrate = calibrate ? 1 : 0;
  if (starpu_init(&conf) != 0) {
    out.error = "starpu_init failed";
    return out;
  }
  std::vector<int> ids(STARPU_NMAXWORKERS);
  unsigned n = starpu_worker_get_ids_by_type(STARPU_CPU_WORKER, ids.data(),
                                             unsigned(ids.size()));
  if (n != speeds.size()) {
    starpu_shutdown();
    out.error = "starpu started " + std::to_string(n) + " CPU workers, not " +
                std::to_string(speeds.size());
    return out;
  }
  state.speed_of_worker.assign(starpu_worker_get_count(), 0.0);
  for (unsigned i = 0; i < n; ++i) {
    state.speed_of_worker[size_t(ids[i])] = speeds[i];
    state.worker_of_impl.push_back(ids[i]);
  }

  auto start = clock::now();
  for (const auto& t : tasks) {
    args.push_back(task_arg{&t, &state});
    starpu_task* task = starpu_task_create();
    task->cl = &cl;
    task->cl_arg = &args.back();
    task->cl_arg_size = sizeof(task_arg);
    if (int rc = starpu_task_submit(task); rc != 0) {
      starpu_task_destroy(task);
      out.error = "starpu_task_submit: " + std::to_string(rc);
      break;
    }
  }
  starpu_task_wait_for_all();
  if (out.error.empty())
    out.makespan_s =
        std::chrono::duration<double>(clock::now() - start).count();
  starpu_shutdown();
  return out;
}

} // namespace

placement_figures run_starpu_placement(const std::vector<placement_task>& tasks,
                                       const std::vector<double>& speeds,
                                       double spike_factor,
                                       const std::string& model) {
  placement_figures out;
  out.system = "starpu dmda (" + model + " model)";
  if (model != "history" && model != "exact" && model != "arch") {
    out.error = "unknown model '" + model + "' (history, exact or arch)";
    return out;
  }
  if (speeds.empty() || speeds.size() > size_t(STARPU_MAXCPUS)) {
    out.error = "StarPU here runs 1 to " + std::to_string(STARPU_MAXCPUS) +
                " CPU workers (STARPU_MAXCPUS), not " +
                std::to_string(speeds.size());
    return out;
  }
  if (model == "exact" && speeds.size() > size_t(STARPU_MAXIMPLEMENTATIONS)) {
    out.error = "the exact model needs one implementation per worker, and "
                "StarPU allows " +
                std::to_string(STARPU_MAXIMPLEMENTATIONS);
    return out;
  }
  for (double s : speeds)
    if (!(s > 0) || !std::isfinite(s)) {
      out.error = "speeds must be positive";
      return out;
    }
  if (!(spike_factor > 0)) {
    out.error = "spike_factor must be positive";
    return out;
  }

  // StarPU keeps models and bus calibration under STARPU_HOME; a private one
  // means each call starts uncalibrated and leaves nothing behind.
  temp_dir home;
  if (home.path().empty()) {
    out.error = "could not make a temp dir for STARPU_HOME";
    return out;
  }
  scoped_env env_home("STARPU_HOME", home.path());
  scoped_env env_models("STARPU_PERF_MODEL_DIR", home.path() + "/sampling");
  scoped_env env_silent("STARPU_SILENT", "1");
  // Workers sleep, so pinning gains nothing; with more workers than cores it
  // would pin two workers to one core and warn about it.
  scoped_env env_nobind("STARPU_WORKERS_NOBIND", "1");

  if (model == "history") {
    // The calibration run users do with STARPU_CALIBRATE=1 before measuring.
    auto calibration = run_pass(tasks, speeds, spike_factor, model, true);
    if (!calibration.error.empty()) {
      out.error = "calibration pass: " + calibration.error;
      return out;
    }
  }
  auto measured = run_pass(tasks, speeds, spike_factor, model, false);
  out.error = measured.error;
  out.makespan_s = measured.makespan_s;
  return out;
}

} // namespace cohort::bench
