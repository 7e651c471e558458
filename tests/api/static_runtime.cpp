// A program that keeps cohort::runtime in statics, the way applications do,
// and returns from main with them running and items in flight: a global
// started before main, a function-local one started on first use, and one
// moved from. The runtimes stop as the statics are destroyed at exit, and
// every item still ends (each callback counts). tests/api/public_api_test.cpp
// runs it and checks its exit status and what it printed.
//
// COHORT_STATIC_AUDIT_DIR=DIR static_runtime
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "cohort/cohort.hpp"

namespace {

std::atomic<int> ended{0};

// Prints how many of the items in flight at the end of main ended, once the
// runtimes are gone (it is constructed first, so destroyed last).
struct report_at_exit {
  ~report_at_exit() {
    std::printf("static_runtime: %d callbacks ran\n", ended.load());
    std::fflush(stdout);
  }
} report;

cohort::runtime start(const char* name) {
  const char* dir = std::getenv("COHORT_STATIC_AUDIT_DIR");
  cohort::options opts;
  opts.cpu_workers = 1;
  opts.simulated_gpus = 1;
  opts.gpus = false;
  opts.audit_path = std::string{dir != nullptr ? dir : "."} + "/" + name +
                    ".log";
  return cohort::runtime::start(opts);
}

cohort::work axpy(uint64_t id) {
  cohort::work w;
  w.id = id;
  w.kernel = cohort::kernel::axpy;
  w.args.alpha = 2;
  w.inputs = {cohort::buffer{std::vector<float>(4096, 1)},
              cohort::buffer{std::vector<float>(4096, 1)}};
  return w;
}

cohort::runtime global_rt = start("global");

cohort::runtime& local_rt() {
  static cohort::runtime rt = start("local");
  return rt;
}

} // namespace

int main() {
  int ok = 0;
  for (uint64_t i = 1; i <= 8; ++i) {
    ok += global_rt.run(axpy(i)).ok();
    ok += local_rt().run(axpy(i)).ok();
  }
  // A runtime moved into a static: the moved-from one holds nothing.
  static cohort::runtime moved = std::move(local_rt());
  try {
    (void) local_rt().submit(axpy(99));
    std::printf("static_runtime: a moved-from runtime took an item\n");
    return 1;
  } catch (const cohort::error& e) {
    if (e.code() != cohort::errc::invalid_arguments)
      return 1;
  }
  // Items in flight when main returns end as the runtimes stop.
  for (uint64_t i = 100; i < 164; ++i) {
    global_rt.submit(axpy(i), [](cohort::outcome) { ++ended; });
    moved.submit(axpy(i), [](cohort::outcome) { ++ended; });
  }
  std::printf("static_runtime: %d items ran\n", ok);
  std::fflush(stdout);
  return 0;
}
