// libFuzzer target: a chaos scenario (`cohort chaos SCENARIO`) in protobuf
// text format: parsed, checked, its fault timeline expanded and its runtime
// config checked (nothing runs).
#include <cstddef>
#include <cstdint>
#include <string>

#include "chaos/harness.hpp"
#include "fuzz/config_check.hpp"
#include "messages/convert.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text{reinterpret_cast<const char*>(data), size};
  cohort::pb::ChaosScenario s;
  if (cohort::parse_text(text, "fuzz.textproto", s,
                         cohort::errc::malformed_config))
    return 0;
  if (cohort::chaos::check_scenario(s))
    return 0;
  (void)cohort::chaos::expand_timeline(s, s.seed(), 1.0);
  (void)cohort::fuzz::check_config(s.runtime());
  return 0;
}
