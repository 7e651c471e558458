// libFuzzer target: a kernel bundle's manifest (manifest.textproto) and its
// rules, as a node reads them once a signature has verified: parsed and
// checked; every rule of a manifest that passes is evaluated. The input is
// also tried as one rule, the smaller grammar fuzzed on its own.
#include <cstddef>
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "kernels/bundle/bundle.hpp"
#include "kernels/bundle/rule.hpp"

namespace {

using namespace cohort::kernels;

void eval_all(const bundle::rule& r, size_t size) {
  std::vector<uint64_t> lens{size, size / 2, 0, uint64_t{1} << 62};
  kernel_args a;
  a.m = size;
  a.n = size * 3;
  a.k = 0;
  a.top_k = 7;
  std::string why;
  auto v = r.eval(a, input_lengths{lens}, why);
  if (!v && why.empty())
    __builtin_trap(); // a failure always says why
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text{reinterpret_cast<const char*>(data), size};
  const std::vector<std::string> names{"x", "y", "z", "w"};
  std::string why;
  if (auto r = bundle::rule::parse(text, names, why))
    eval_all(*r, size);
  else if (why.empty())
    __builtin_trap();
  auto m = bundle::parse_manifest(text);
  if (auto* no = std::get_if<bundle::refused>(&m)) {
    if (no->detail.empty())
      __builtin_trap();
    return 0;
  }
  for (auto& k : std::get<cohort::pb::KernelBundle>(m).kernel()) {
    std::vector<std::string> inputs;
    for (auto& in : k.input())
      inputs.push_back(in.name());
    // parse_manifest checked every rule: each must parse again.
    auto out = bundle::rule::parse(k.output_size(), inputs, why);
    if (!out)
      __builtin_trap();
    eval_all(*out, size);
    for (auto& req : k.require()) {
      auto r = bundle::rule::parse(req, inputs, why);
      if (!r)
        __builtin_trap();
      eval_all(*r, size);
    }
  }
  return 0;
}
