// libFuzzer target: a runtime config (`--config FILE`) in protobuf text
// format, read as `cohort devices --config FILE` reads it (a pipeline spec's
// or an allocation plan's runtime, else a runtime config) and checked as
// runtime::start checks it.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz/config_check.hpp"
#include "messages/convert.hpp"
#include "tools/pipeline.hpp"

using namespace cohort;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text{reinterpret_cast<const char*>(data), size};
  const std::string name = "fuzz.textproto";
  pb::PipelineSpec spec;
  pb::AllocationPlan plan;
  pb::RuntimeConfig cfg;
  if (!parse_text(text, name, spec, errc::malformed_config))
    cfg = tools::config_for(spec);
  else if (!parse_text(text, name, plan, errc::malformed_config) &&
           plan.has_runtime())
    cfg = plan.runtime();
  else if (parse_text(text, name, cfg, errc::malformed_config))
    return 0;
  (void)fuzz::check_config(cfg);
  return 0;
}
