// Byte counts as people read them, for the command line's tables.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace cohort::tools {

/// "512 B", "3.0 KiB", "1.5 MiB", "16.0 GiB".
inline std::string human_bytes(uint64_t b) {
  char buf[32];
  if (b < 1024)
    std::snprintf(buf, sizeof(buf), "%llu B", (unsigned long long)b);
  else if (b < (uint64_t{1} << 20))
    std::snprintf(buf, sizeof(buf), "%.1f KiB", double(b) / 1024.0);
  else if (b < (uint64_t{1} << 30))
    std::snprintf(buf, sizeof(buf), "%.1f MiB", double(b) / double(1 << 20));
  else
    std::snprintf(buf, sizeof(buf), "%.1f GiB", double(b) / double(1 << 30));
  return buf;
}

} // namespace cohort::tools
