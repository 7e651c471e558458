#include "tools/terminal_text.hpp"

#include <cstdint>
#include <cstdio>

namespace cohort::tools {

namespace {

void hex_byte(std::string& out, unsigned char c) {
  char buf[5];
  std::snprintf(buf, sizeof buf, "\\x%02x", c);
  out += buf;
}

/// The length of the UTF-8 sequence at `s[i]` and its code point, or 0
/// when it is not one (overlong forms and surrogates are not).
size_t utf8_at(std::string_view s, size_t i, uint32_t& cp) {
  auto c = static_cast<unsigned char>(s[i]);
  size_t n = c >= 0xf0 && c <= 0xf4 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 ? 2 : 0;
  if (c >= 0xf5 || n == 0 || i + n > s.size())
    return 0;
  cp = c & (0x7f >> n);
  for (size_t k = 1; k < n; ++k) {
    auto d = static_cast<unsigned char>(s[i + k]);
    if ((d & 0xc0) != 0x80)
      return 0;
    cp = cp << 6 | (d & 0x3f);
  }
  if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || cp > 0x10ffff ||
      (cp >= 0xd800 && cp <= 0xdfff))
    return 0;
  return n;
}

std::string escaped(std::string_view s, bool lines) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f) {
      if (c == '\\' && !lines)
        out += '\\';
      out += char(c);
      ++i;
      continue;
    }
    if (c < 0x80) {
      if (lines && (c == '\n' || c == '\t')) {
        out += char(c);
        ++i;
        continue;
      }
      switch (c) {
      case 0x1b:
        out += "\\e";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        hex_byte(out, c);
      }
      ++i;
      continue;
    }
    uint32_t cp = 0;
    auto n = utf8_at(s, i, cp);
    if (n == 0) {
      hex_byte(out, c);
      ++i;
    } else if (cp < 0xa0) {
      // C1 controls (U+0080..U+009F; CSI is U+009B): their two bytes.
      for (size_t k = 0; k < n; ++k)
        hex_byte(out, static_cast<unsigned char>(s[i + k]));
      i += n;
    } else if ((cp >= 0x202a && cp <= 0x202e) ||
               (cp >= 0x2066 && cp <= 0x2069)) {
      char buf[12];
      std::snprintf(buf, sizeof buf, "\\u{%04x}", unsigned(cp));
      out += buf;
      i += n;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
  return out;
}

} // namespace

std::string terminal_text(std::string_view s) {
  return escaped(s, false);
}

std::string terminal_lines(std::string_view s) {
  return escaped(s, true);
}

} // namespace cohort::tools
