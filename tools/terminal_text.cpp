#include "tools/terminal_text.hpp"

#include <cstdint>
#include <cstdio>

#include "messages/json.hpp"

namespace cohort::tools {

namespace {

void hex_byte(std::string& out, unsigned char c) {
  char buf[5];
  std::snprintf(buf, sizeof buf, "\\x%02x", c);
  out += buf;
}

/// The code point of the UTF-8 sequence of `n` bytes at `s[i]`.
uint32_t code_point(std::string_view s, size_t i, size_t n) {
  uint32_t cp = static_cast<unsigned char>(s[i]) & (0x7f >> n);
  for (size_t k = 1; k < n; ++k)
    cp = cp << 6 | (static_cast<unsigned char>(s[i + k]) & 0x3f);
  return cp;
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
    auto n = utf8_length(s, i);
    auto cp = n == 0 ? 0 : code_point(s, i, n);
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
