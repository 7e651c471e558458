#include "messages/json.hpp"

#include <cstdio>

namespace cohort {

size_t utf8_length(std::string_view s, size_t i) {
  auto c = static_cast<unsigned char>(s[i]);
  size_t n = c < 0x80           ? 1
             : (c >> 5) == 0x6  ? 2
             : (c >> 4) == 0xe  ? 3
             : (c >> 3) == 0x1e ? 4
                                : 0;
  if (n == 0 || i + n > s.size())
    return 0;
  for (size_t k = 1; k < n; ++k)
    if ((static_cast<unsigned char>(s[i + k]) >> 6) != 0x2)
      return 0;
  // Overlong forms and surrogates are not UTF-8 either.
  auto c1 = static_cast<unsigned char>(s[i + (n > 1 ? 1 : 0)]);
  if ((n == 2 && c < 0xc2) || (n == 3 && c == 0xe0 && c1 < 0xa0) ||
      (n == 3 && c == 0xed && c1 >= 0xa0) ||
      (n == 4 &&
       (c > 0xf4 || (c == 0xf0 && c1 < 0x90) || (c == 0xf4 && c1 >= 0x90))))
    return 0;
  return n;
}

std::string json_string(std::string_view s) {
  std::string out = "\"";
  out.reserve(s.size() + 2);
  for (size_t i = 0; i < s.size();) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += char(c);
      ++i;
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
      ++i;
    } else if (auto n = utf8_length(s, i); n > 0) {
      out.append(s.substr(i, n));
      i += n;
    } else {
      out += "\\ufffd";
      ++i;
    }
  }
  return out + "\"";
}

} // namespace cohort
