// Embedding Cohort: start a runtime with defaults (no config file), submit
// typed work as tenant "default", get typed results back and check them.
#include <cstdio>
#include <random>

#include <caf/all.hpp>

#include "actors/runtime.hpp"
#include "messages/errc.hpp"
#include "messages/system_config.hpp"

using namespace cohort;

namespace {

std::vector<float> random_floats(std::mt19937& rng, size_t n) {
  std::uniform_real_distribution<float> d{-1, 1};
  std::vector<float> v(n);
  for (auto& x : v)
    x = d(rng);
  return v;
}

} // namespace

int caf_main(caf::actor_system& sys, const system_config&) {
  auto cfg = actors::default_config(); // CPU workers, tenant "default"
  cfg.set_audit_path("embed-example.audit.log");
  auto rt = actors::runtime::start(sys, cfg);
  if (!rt) {
    std::fprintf(stderr, "cannot start: %s\n", describe(rt.error()).c_str());
    return 1;
  }
  std::mt19937 rng{1};

  // A 64x32 by 32x16 matrix product.
  work_item gemm;
  gemm.id = 1;
  gemm.tenant = "default";
  gemm.kernel = kernel_id::gemm;
  gemm.args.m = 64;
  gemm.args.n = 16;
  gemm.args.k = 32;
  gemm.inputs.emplace_back(random_floats(rng, 64 * 32));
  gemm.inputs.emplace_back(random_floats(rng, 32 * 16));

  // The 5 rows of a 1000x48 matrix closest in angle to each of 2 queries.
  work_item search;
  search.id = 2;
  search.tenant = "default";
  search.kernel = kernel_id::topk_cosine;
  search.args.m = 1000;
  search.args.n = 48;
  search.args.top_k = 5;
  search.inputs.emplace_back(random_floats(rng, 1000 * 48));
  search.inputs.emplace_back(random_floats(rng, 2 * 48));

  int failures = 0;
  for (auto& item : {gemm, search}) {
    auto res = (*rt)->run(item);
    if (!res) {
      std::fprintf(stderr, "item %llu failed: %s\n",
                   (unsigned long long)item.id, describe(res.error()).c_str());
      ++failures;
      continue;
    }
    auto views = item.views();
    auto want = kernels::run_reference(item.kernel, item.args, views);
    auto diff =
        kernels::compare(item.kernel, item.args, views, res->output, want);
    std::printf("%-12s on %-5s: %zu values%s\n",
                std::string{kernels::name(item.kernel)}.c_str(),
                res->device.c_str(), res->output.values.size(),
                diff.empty() ? ", matches the CPU reference" : "");
    if (!diff.empty()) {
      std::fprintf(stderr, "  wrong: %s\n", diff.c_str());
      ++failures;
    }
  }

  // A tenant without a grant is refused with a clear error.
  auto stranger = gemm;
  stranger.tenant = "nobody";
  auto refused = (*rt)->run(stranger);
  if (refused || code_of(refused.error()) != errc::unknown_tenant) {
    std::fprintf(stderr, "expected unknown_tenant\n");
    ++failures;
  } else {
    std::printf("tenant 'nobody' refused: %s\n",
                describe(refused.error()).c_str());
  }
  std::printf("%s\n",
              failures == 0 ? "embed example: OK" : "embed example: FAILED");
  return failures == 0 ? 0 : 1;
}

CAF_MAIN()
