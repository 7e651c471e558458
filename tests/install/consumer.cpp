// An outside program built against an installed Cohort (pkg-config, meson
// dependency('cohort') or CMake find_package(cohort)): scripts/install-check.sh.
#include <cohort/cohort.hpp>

#include <cstdio>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  cohort::options opts;
  opts.cpu_workers = 1;
  opts.gpus = false;
  opts.audit_path = argc > 1 ? argv[1] : "consumer-audit.log";
  try {
    auto rt = cohort::runtime::start(opts);
    cohort::work w;
    w.id = 1;
    w.kernel = cohort::kernel::gemm;
    w.args.m = 2;
    w.args.n = 2;
    w.args.k = 3;
    w.inputs = {cohort::buffer{std::vector<float>{1, 2, 3, 4, 5, 6}},
                cohort::buffer{std::vector<float>{1, 0, 0, 1, 1, 1}}};
    auto r = rt.submit(std::move(w)).get();
    auto v = r.values.to_vector<float>();
    bool ok = v == std::vector<float>{4, 5, 10, 11};
    std::printf("cohort %s: gemm on %s: %g %g %g %g (%s)\n", cohort::version(),
                r.device.c_str(), v[0], v[1], v[2], v[3],
                ok ? "right" : "WRONG");
    return ok ? 0 : 1;
  } catch (const cohort::error& e) {
    std::fprintf(stderr, "consumer: %s (%s)\n", e.what(),
                 cohort::to_string(e.code()).c_str());
    return 1;
  }
}
