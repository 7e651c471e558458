// libFuzzer target: an allocation plan (`cohort simulate PLAN`) in protobuf
// text format: parsed, checked and run as a dry run against its runtime
// config (or the CLI's default), as `cohort simulate` does.
#include <cstddef>
#include <cstdint>
#include <string>

#include "config/quotas.hpp"
#include "quota/simulation.hpp"
#include "fuzz/config_check.hpp"
#include "messages/convert.hpp"
#include "tools/pipeline.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cohort;
  std::string text{reinterpret_cast<const char*>(data), size};
  pb::AllocationPlan plan;
  if (parse_text(text, "fuzz.textproto", plan, errc::malformed_config))
    return 0;
  if (check_plan(plan, "fuzz.textproto"))
    return 0;
  auto cfg = plan.has_runtime() ? plan.runtime()
                                : tools::config_for(pb::PipelineSpec{});
  auto lease = fuzz::check_config(cfg);
  if (!lease)
    return 0;
  auto rep = quota::simulate(quota::quota_book{*lease}, from_proto(plan),
                              config::pool_options_for(cfg, *lease));
  if (rep.steps.size() != size_t(plan.step_size()))
    __builtin_trap(); // one outcome per step, as `cohort simulate` prints
  return 0;
}
