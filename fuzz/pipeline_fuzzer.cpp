// libFuzzer target: a pipeline spec (`cohort run PIPELINE`) in protobuf text
// format: parsed, checked, its stages planned and its runtime config checked.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz/config_check.hpp"
#include "messages/convert.hpp"
#include "tools/pipeline.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text{reinterpret_cast<const char*>(data), size};
  cohort::pb::PipelineSpec spec;
  if (cohort::parse_text(text, "fuzz.textproto", spec,
                         cohort::errc::malformed_pipeline))
    return 0;
  if (cohort::check_pipeline(spec, "fuzz.textproto"))
    return 0;
  if (cohort::tools::check_stages(spec))
    return 0;
  if (spec.has_runtime())
    (void)cohort::fuzz::check_config(spec.runtime());
  return 0;
}
