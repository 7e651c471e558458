// Text from outside (a URL, a config, an argument, an audit record, a
// node's answer) made safe to print on a terminal.
#pragma once

#include <string>
#include <string_view>

namespace cohort::tools {

/// `s` with every byte a terminal could act on written as an escape, so
/// that what is printed is what was sent and nothing more: control
/// characters (C0, DEL and C1, ESC among them) become `\e`, `\n`, `\t`,
/// `\r` or `\xHH`; bytes that are not UTF-8 become `\xHH`; the
/// bidirectional controls (U+202A..U+202E, U+2066..U+2069) become
/// `\u{HHHH}`; a backslash becomes `\\`, so that an escape cannot be faked.
/// Printable ASCII and the rest of UTF-8 pass unchanged.
std::string terminal_text(std::string_view s);

/// terminal_text for text of many lines (an HTTP answer's body, JSON):
/// newlines, tabs and backslashes pass, the rest is escaped as there.
std::string terminal_lines(std::string_view s);

} // namespace cohort::tools
