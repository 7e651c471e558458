// A bundle's size and launch rules (kernels/bundle/rule.hpp).
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "kernels/bundle/rule.hpp"

using namespace cohort::kernels;
using namespace cohort::kernels::bundle;

namespace {

const std::vector<std::string> names{"x", "y", "points"};

// The value of `text` for inputs of lengths `lens` and `args`; fails the
// test when it does not parse or evaluate.
int64_t value(const std::string& text, std::vector<uint64_t> lens,
              kernel_args args = {}) {
  std::string why;
  auto r = rule::parse(text, names, why);
  INFO(text << ": " << why);
  REQUIRE(r);
  auto v = r->eval(args, input_lengths{lens}, why);
  INFO(why);
  REQUIRE(v);
  return *v;
}

std::string parse_error(const std::string& text) {
  std::string why;
  auto r = rule::parse(text, names, why);
  CHECK_FALSE(r);
  return why;
}

std::string eval_error(const std::string& text, std::vector<uint64_t> lens,
                       kernel_args args = {}) {
  std::string why;
  auto r = rule::parse(text, names, why);
  REQUIRE(r);
  auto v = r->eval(args, input_lengths{lens}, why);
  CHECK_FALSE(v);
  return why;
}

} // namespace

TEST_CASE("rules read inputs' lengths and scalars with C precedence",
          "[kernels][bundle]") {
  kernel_args a;
  a.m = 3;
  a.n = 5;
  a.k = 7;
  a.top_k = 2;
  CHECK(value("x", {10, 20, 30}) == 10);
  CHECK(value("points", {10, 20, 30}) == 30);
  CHECK(value("m * n + k", {1, 1, 1}, a) == 22);
  CHECK(value("m + n * k", {1, 1, 1}, a) == 38);
  CHECK(value("(m + n) * k", {1, 1, 1}, a) == 56);
  CHECK(value("x - y - 1", {10, 3, 0}) == 6);
  CHECK(value("x / 4 % 3", {40, 0, 0}) == 1);
  CHECK(value("-x + 12", {10, 0, 0}) == 2);
  CHECK(value("ceil_div(x, 4)", {10, 0, 0}) == 3);
  CHECK(value("ceil_div(x, 5)", {10, 0, 0}) == 2);
  CHECK(value("min(x, y) + max(x, y)", {4, 9, 0}) == 13);
  CHECK(value("top_k * 2", {0, 0, 0}, a) == 4);
}

TEST_CASE("comparisons and logic give 0 or 1 and short-circuit",
          "[kernels][bundle]") {
  CHECK(value("x == y", {4, 4, 0}) == 1);
  CHECK(value("x != y", {4, 4, 0}) == 0);
  CHECK(value("x <= y && y < 5", {4, 4, 0}) == 1);
  CHECK(value("x > y || y >= 5", {4, 4, 0}) == 0);
  CHECK(value("!x", {0, 0, 0}) == 1);
  CHECK(value("!(x == 1)", {1, 0, 0}) == 0);
  // The right side would divide by zero; the left decides first.
  CHECK(value("y > 0 && x / y == 2", {8, 0, 0}) == 0);
  CHECK(value("y == 0 || x / y == 2", {8, 0, 0}) == 1);
}

TEST_CASE("a rule that cannot parse says where and why", "[kernels][bundle]") {
  CHECK_THAT(parse_error(""), Catch::Contains("ends early"));
  CHECK_THAT(parse_error("x +"), Catch::Contains("ends early"));
  CHECK_THAT(parse_error("x + z"), Catch::Contains("unknown name 'z'"));
  CHECK_THAT(parse_error("x + z"), Catch::Contains("column 5"));
  CHECK_THAT(parse_error("(x"), Catch::Contains("expected ')'"));
  CHECK_THAT(parse_error("x = y"), Catch::Contains("unexpected '='"));
  CHECK_THAT(parse_error("min(x)"), Catch::Contains("two arguments"));
  CHECK_THAT(parse_error("max x"), Catch::Contains("parentheses"));
  CHECK_THAT(parse_error("99999999999999999999"),
             Catch::Contains("larger than 2^63 - 1"));
  CHECK_THAT(parse_error("x $ y"), Catch::Contains("unexpected '$'"));
  CHECK_THAT(parse_error(std::string(40, '(') + "x" + std::string(40, ')')),
             Catch::Contains("deeper than"));
  CHECK_THAT(parse_error(std::string(rule::max_text + 1, ' ') + "x"),
             Catch::Contains("longer than"));
  // Deep nesting through unary operators too.
  CHECK_THAT(parse_error(std::string(100, '-') + "x"),
             Catch::Contains("deeper than"));
}

TEST_CASE("a rule that cannot be evaluated says why, never wraps",
          "[kernels][bundle]") {
  CHECK_THAT(eval_error("x / y", {4, 0, 0}),
             Catch::Contains("division by zero"));
  CHECK_THAT(eval_error("x % y", {4, 0, 0}),
             Catch::Contains("division by zero"));
  CHECK_THAT(eval_error("ceil_div(x, y)", {4, 0, 0}),
             Catch::Contains("division by zero"));
  kernel_args a;
  a.m = uint64_t{1} << 40;
  a.n = uint64_t{1} << 40;
  CHECK_THAT(eval_error("m * n", {0, 0, 0}, a), Catch::Contains("overflow"));
  a.m = ~uint64_t{0};
  CHECK_THAT(eval_error("m", {0, 0, 0}, a), Catch::Contains("larger than"));
  CHECK_THAT(eval_error("9223372036854775807 + x", {1, 0, 0}),
             Catch::Contains("overflow"));
  // A rule naming an input the call lacks.
  CHECK_THAT(eval_error("points", {1}), Catch::Contains("missing"));
}
