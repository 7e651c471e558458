// The byte sizes tests write their memory limits in.
#pragma once

#include <cstdint>

namespace cohort::test {

inline constexpr uint64_t KiB = uint64_t{1} << 10;
inline constexpr uint64_t MiB = uint64_t{1} << 20;
inline constexpr uint64_t GiB = uint64_t{1} << 30;

} // namespace cohort::test
