// A bundle's size and launch rules: small integer expressions over a call's
// input lengths and scalars ("x", "m * n", "ceil_div(points, 4)", "a == b &&
// k > 0"), parsed once when the bundle loads and evaluated per call.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/catalog.hpp"

namespace cohort::kernels::bundle {

/// A parsed rule. Values are 64-bit signed integers; comparisons, `&&`,
/// `||` and `!` give 0 or 1; `&&` and `||` skip their right side when the
/// left decides. Immutable once parsed: evaluated from any thread.
class rule {
public:
  /// Longest rule text, and deepest nesting, a bundle may use.
  static constexpr size_t max_text = 1024;
  static constexpr unsigned max_depth = 32;

  /// Parses `text`. Names are `inputs` (each stands for that input's
  /// length in elements) and the scalars m, n, k, top_k; functions are
  /// min(a, b), max(a, b) and ceil_div(a, b). On a syntax error, an
  /// unknown name or a rule too long or deep: empty, with `why` set.
  static std::optional<rule> parse(std::string_view text,
                                   std::span<const std::string> inputs,
                                   std::string& why);

  /// The rule's value for a call; empty, with `why` set, on division by
  /// zero or overflow.
  std::optional<int64_t> eval(const kernel_args& args, input_lengths inputs,
                              std::string& why) const;

  /// The text it was parsed from.
  const std::string& text() const { return text_; }

  // The parsed tree; public for the parser and evaluator in rule.cpp.
  enum class op : uint8_t {
    constant,
    input,
    scalar_m,
    scalar_n,
    scalar_k,
    scalar_top_k,
    neg,
    logical_not,
    add,
    sub,
    mul,
    div,
    mod,
    eq,
    ne,
    lt,
    le,
    gt,
    ge,
    logical_and,
    logical_or,
    min,
    max,
    ceil_div,
  };
  struct node {
    op what = op::constant;
    int64_t value = 0; // constant value, or input index
    int32_t lhs = -1;
    int32_t rhs = -1;
  };

private:
  std::optional<int64_t> eval_node(int32_t i, const kernel_args& args,
                                   input_lengths inputs,
                                   std::string& why) const;

  std::string text_;
  std::vector<node> nodes_;
  int32_t root_ = -1;
};

} // namespace cohort::kernels::bundle
