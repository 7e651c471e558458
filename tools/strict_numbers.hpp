// Numbers from the command line, read strictly: the whole text is the
// number, in range, finite. A value that would wrap, saturate or silently
// mean "no limit" (4294967296 for a 32-bit count, 1e30 bytes, inf seconds)
// is an error that names the option, never a different number.
#pragma once

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <caf/expected.hpp>

#include "messages/errc.hpp"

namespace cohort::tools {

/// A count in decimal digits only (no sign, no fraction, no exponent), at
/// most `max`.
inline caf::expected<uint64_t>
parse_count(const std::string& option, const std::string& text, uint64_t max) {
  auto bad = [&](const std::string& why) {
    return make_error(errc::invalid_arguments,
                      option + " takes " + why + ", got '" + text + "'");
  };
  if (text.empty() || text.size() > 20)
    return bad("a whole number from 0 to " + std::to_string(max));
  uint64_t n = 0;
  for (char c : text) {
    if (c < '0' || c > '9')
      return bad("a whole number from 0 to " + std::to_string(max));
    auto digit = uint64_t(c - '0');
    if (n > (max - digit) / 10)
      return bad("at most " + std::to_string(max));
    n = n * 10 + digit;
  }
  return n;
}

/// A number that names something (a job, a client): decimal digits, from 1
/// to the largest uint64_t.
inline caf::expected<uint64_t> parse_id(const std::string& what,
                                        const std::string& text) {
  auto n = parse_count(what, text, UINT64_MAX);
  if (n && *n == 0)
    return make_error(errc::invalid_arguments,
                      what + " takes a number from 1, got '" + text + "'");
  return n;
}

/// A byte count: digits with an optional fraction and an optional unit (K,
/// M, G, T or KiB, MiB, GiB, TiB, powers of 1024), at most `max` bytes.
inline caf::expected<uint64_t>
parse_bytes(const std::string& option, const std::string& text, uint64_t max) {
  auto bad = [&](const std::string& why) {
    return make_error(errc::invalid_arguments,
                      option + " takes " + why + ", got '" + text + "'");
  };
  auto what = "a byte count (digits, optionally followed by K, M, G or T)";
  size_t i = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9')
    ++i;
  size_t digits = i;
  if (i < text.size() && text[i] == '.') {
    ++i;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9')
      ++i;
  }
  if (digits == 0 || i == digits + 1)
    return bad(what);
  auto unit = text.substr(i);
  long double scale = unit.empty()                   ? 1.0L
                      : unit == "K" || unit == "KiB" ? 1024.0L
                      : unit == "M" || unit == "MiB" ? 1048576.0L
                      : unit == "G" || unit == "GiB" ? 1073741824.0L
                      : unit == "T" || unit == "TiB" ? 1099511627776.0L
                                                     : -1.0L;
  if (scale < 0)
    return bad(what);
  auto x = std::strtold(text.substr(0, i).c_str(), nullptr) * scale;
  if (!std::isfinite(x) || x > (long double)max)
    return bad("at most " + std::to_string(max) + " bytes");
  return uint64_t(x);
}

/// A real number in [lo, hi]: finite, the whole text.
inline caf::expected<double> parse_real(const std::string& option,
                                        const std::string& text, double lo,
                                        double hi) {
  auto range = [&] {
    char buf[96];
    std::snprintf(buf, sizeof buf, "a number from %g to %g", lo, hi);
    return std::string{buf};
  };
  char* end = nullptr;
  errno = 0;
  double x = text.empty() ? NAN : std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || errno == ERANGE || !std::isfinite(x) ||
      x < lo || x > hi || std::isspace((unsigned char)text.front()))
    return make_error(errc::invalid_arguments,
                      option + " takes " + range() + ", got '" + text + "'");
  return x;
}

} // namespace cohort::tools
