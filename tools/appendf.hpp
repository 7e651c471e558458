// printf-style text appended to a string, for the command line's reports
// (cohort watch, cohort health).
#pragma once

#include <cstdarg>
#include <cstdio>
#include <string>

namespace cohort::tools {

/// Appends printf-style text to `out` (a line of at most 511 characters).
__attribute__((format(printf, 2, 3))) inline void
appendf(std::string& out, const char* fmt, ...) {
  char line[512];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(line, sizeof line, fmt, args);
  va_end(args);
  out += line;
}

} // namespace cohort::tools
