#include "kernels/bundle/rule.hpp"

#include <cctype>
#include <limits>

namespace cohort::kernels::bundle {

namespace {

using op = rule::op;

// Recursive descent over the grammar in rule.hpp, building the tree into
// `nodes`. Precedence, loosest first: ||, &&, comparisons (not chained),
// + -, * / %, unary - !.
class parser {
public:
  parser(std::string_view text, std::span<const std::string> inputs,
         std::vector<rule::node>& nodes)
      : text_(text), inputs_(inputs), nodes_(nodes) {
    // nop
  }

  int32_t parse_all() {
    auto root = logical_or();
    skip_space();
    if (ok() && pos_ < text_.size())
      fail("unexpected '" + std::string{text_.substr(pos_, 1)} + "'");
    return ok() ? root : -1;
  }

  const std::string& error() const { return error_; }

private:
  bool ok() const { return error_.empty(); }

  void fail(std::string why) {
    if (ok())
      error_ = std::move(why) + " at column " + std::to_string(pos_ + 1);
  }

  void skip_space() {
    while (pos_ < text_.size() &&
           std::isspace(static_cast<unsigned char>(text_[pos_])))
      ++pos_;
  }

  bool eat(std::string_view token) {
    skip_space();
    if (text_.substr(pos_, token.size()) != token)
      return false;
    // "<" must not take the first character of "<=", nor "!" of "!=".
    if (token.size() == 1 && pos_ + 1 < text_.size() &&
        text_[pos_ + 1] == '=' &&
        (token == "<" || token == ">" || token == "!"))
      return false;
    pos_ += token.size();
    return true;
  }

  int32_t add(op what, int32_t lhs = -1, int32_t rhs = -1, int64_t v = 0) {
    if (!ok())
      return -1;
    nodes_.push_back({what, v, lhs, rhs});
    return int32_t(nodes_.size() - 1);
  }

  // Guards the recursion: a rule of 1,000 '(' must not exhaust the stack.
  struct depth_guard {
    parser& p;
    explicit depth_guard(parser& p) : p(p) {
      if (++p.depth_ > rule::max_depth)
        p.fail("the rule nests deeper than " + std::to_string(rule::max_depth) +
               " levels");
    }
    ~depth_guard() { --p.depth_; }
  };

  int32_t logical_or() {
    auto lhs = logical_and();
    while (ok() && eat("||"))
      lhs = add(op::logical_or, lhs, logical_and());
    return lhs;
  }

  int32_t logical_and() {
    auto lhs = comparison();
    while (ok() && eat("&&"))
      lhs = add(op::logical_and, lhs, comparison());
    return lhs;
  }

  int32_t comparison() {
    auto lhs = sum();
    static constexpr std::pair<std::string_view, op> ops[] = {
        {"==", op::eq}, {"!=", op::ne}, {"<=", op::le},
        {">=", op::ge}, {"<", op::lt},  {">", op::gt},
    };
    for (auto& [token, what] : ops)
      if (ok() && eat(token))
        return add(what, lhs, sum());
    return lhs;
  }

  int32_t sum() {
    auto lhs = product();
    while (ok()) {
      if (eat("+"))
        lhs = add(op::add, lhs, product());
      else if (eat("-"))
        lhs = add(op::sub, lhs, product());
      else
        break;
    }
    return lhs;
  }

  int32_t product() {
    auto lhs = unary();
    while (ok()) {
      if (eat("*"))
        lhs = add(op::mul, lhs, unary());
      else if (eat("/"))
        lhs = add(op::div, lhs, unary());
      else if (eat("%"))
        lhs = add(op::mod, lhs, unary());
      else
        break;
    }
    return lhs;
  }

  int32_t unary() {
    depth_guard guard{*this};
    if (!ok())
      return -1;
    if (eat("-"))
      return add(op::neg, unary());
    if (eat("!"))
      return add(op::logical_not, unary());
    return primary();
  }

  int32_t primary() {
    skip_space();
    if (pos_ >= text_.size()) {
      fail("the rule ends early");
      return -1;
    }
    char c = text_[pos_];
    if (c == '(') {
      ++pos_;
      auto inner = logical_or();
      if (ok() && !eat(")"))
        fail("expected ')'");
      return inner;
    }
    if (std::isdigit(static_cast<unsigned char>(c)))
      return number();
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_')
      return name();
    fail("unexpected '" + std::string(1, c) + "'");
    return -1;
  }

  int32_t number() {
    int64_t v = 0;
    while (pos_ < text_.size() &&
           std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
      if (__builtin_mul_overflow(v, 10, &v) ||
          __builtin_add_overflow(v, text_[pos_] - '0', &v)) {
        fail("the number is larger than 2^63 - 1");
        return -1;
      }
      ++pos_;
    }
    return add(op::constant, -1, -1, v);
  }

  int32_t name() {
    auto start = pos_;
    while (pos_ < text_.size() &&
           (std::isalnum(static_cast<unsigned char>(text_[pos_])) ||
            text_[pos_] == '_'))
      ++pos_;
    auto id = text_.substr(start, pos_ - start);
    static constexpr std::pair<std::string_view, op> functions[] = {
        {"min", op::min}, {"max", op::max}, {"ceil_div", op::ceil_div}};
    for (auto& [fname, what] : functions) {
      if (id != fname)
        continue;
      if (!eat("(")) {
        fail(std::string{fname} + " takes two arguments in parentheses");
        return -1;
      }
      auto a = logical_or();
      if (ok() && !eat(","))
        fail(std::string{fname} + " takes two arguments");
      auto b = logical_or();
      if (ok() && !eat(")"))
        fail("expected ')' after " + std::string{fname} + "'s arguments");
      return add(what, a, b);
    }
    for (size_t i = 0; i < inputs_.size(); ++i)
      if (inputs_[i] == id)
        return add(op::input, -1, -1, int64_t(i));
    static constexpr std::pair<std::string_view, op> scalars[] = {
        {"m", op::scalar_m},
        {"n", op::scalar_n},
        {"k", op::scalar_k},
        {"top_k", op::scalar_top_k}};
    for (auto& [sname, what] : scalars)
      if (id == sname)
        return add(what);
    pos_ = start;
    fail("unknown name '" + std::string{id} +
         "' (names are the inputs, m, n, k and top_k)");
    return -1;
  }

  std::string_view text_;
  std::span<const std::string> inputs_;
  std::vector<rule::node>& nodes_;
  size_t pos_ = 0;
  unsigned depth_ = 0;
  std::string error_;
};

std::optional<int64_t> unsigned_value(uint64_t v, const char* what,
                                      std::string& why) {
  if (v > uint64_t(std::numeric_limits<int64_t>::max())) {
    why = std::string{what} + " is larger than 2^63 - 1";
    return std::nullopt;
  }
  return int64_t(v);
}

} // namespace

std::optional<rule> rule::parse(std::string_view text,
                                std::span<const std::string> inputs,
                                std::string& why) {
  if (text.size() > max_text) {
    why = "the rule is longer than " + std::to_string(max_text) + " characters";
    return std::nullopt;
  }
  rule r;
  r.text_ = std::string{text};
  parser p{r.text_, inputs, r.nodes_};
  r.root_ = p.parse_all();
  if (r.root_ < 0) {
    why = p.error().empty() ? "the rule is empty" : p.error();
    return std::nullopt;
  }
  return r;
}

std::optional<int64_t> rule::eval(const kernel_args& args, input_lengths inputs,
                                  std::string& why) const {
  return eval_node(root_, args, inputs, why);
}

std::optional<int64_t> rule::eval_node(int32_t i, const kernel_args& args,
                                       input_lengths inputs,
                                       std::string& why) const {
  auto& n = nodes_[size_t(i)];
  switch (n.what) {
  case op::constant:
    return n.value;
  case op::input:
    if (size_t(n.value) >= inputs.size()) {
      why = "input " + std::to_string(n.value) + " is missing";
      return std::nullopt;
    }
    return unsigned_value(inputs[size_t(n.value)], "an input's length", why);
  case op::scalar_m:
    return unsigned_value(args.m, "m", why);
  case op::scalar_n:
    return unsigned_value(args.n, "n", why);
  case op::scalar_k:
    return unsigned_value(args.k, "k", why);
  case op::scalar_top_k:
    return int64_t(args.top_k);
  default:
    break;
  }
  auto a = eval_node(n.lhs, args, inputs, why);
  if (!a)
    return std::nullopt;
  switch (n.what) {
  case op::neg:
    if (*a == std::numeric_limits<int64_t>::min()) {
      why = "overflow in '" + text_ + "'";
      return std::nullopt;
    }
    return -*a;
  case op::logical_not:
    return int64_t(*a == 0);
  case op::logical_and:
    if (*a == 0)
      return 0;
    break;
  case op::logical_or:
    if (*a != 0)
      return 1;
    break;
  default:
    break;
  }
  auto b = eval_node(n.rhs, args, inputs, why);
  if (!b)
    return std::nullopt;
  int64_t out = 0;
  bool overflow = false;
  auto divides = [&] {
    if (*b == 0) {
      why = "division by zero in '" + text_ + "'";
      return false;
    }
    if (*a == std::numeric_limits<int64_t>::min() && *b == -1) {
      why = "overflow in '" + text_ + "'";
      return false;
    }
    return true;
  };
  switch (n.what) {
  case op::add:
    overflow = __builtin_add_overflow(*a, *b, &out);
    break;
  case op::sub:
    overflow = __builtin_sub_overflow(*a, *b, &out);
    break;
  case op::mul:
    overflow = __builtin_mul_overflow(*a, *b, &out);
    break;
  case op::div:
    if (!divides())
      return std::nullopt;
    out = *a / *b;
    break;
  case op::mod:
    if (!divides())
      return std::nullopt;
    out = *a % *b;
    break;
  case op::ceil_div:
    if (!divides())
      return std::nullopt;
    out = *a / *b + ((*a % *b != 0) && ((*a < 0) == (*b < 0)) ? 1 : 0);
    break;
  case op::eq:
    out = *a == *b;
    break;
  case op::ne:
    out = *a != *b;
    break;
  case op::lt:
    out = *a < *b;
    break;
  case op::le:
    out = *a <= *b;
    break;
  case op::gt:
    out = *a > *b;
    break;
  case op::ge:
    out = *a >= *b;
    break;
  case op::logical_and:
  case op::logical_or:
    out = *b != 0;
    break;
  case op::min:
    out = std::min(*a, *b);
    break;
  case op::max:
    out = std::max(*a, *b);
    break;
  default:
    why = "a rule node of unknown kind";
    return std::nullopt;
  }
  if (overflow) {
    why = "overflow in '" + text_ + "'";
    return std::nullopt;
  }
  return out;
}

} // namespace cohort::kernels::bundle
