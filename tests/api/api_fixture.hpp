// Helpers of the public API's tests (tests/api/): standard C++ and
// <cohort/cohort.hpp> only, as an embedding program sees it.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "cohort/cohort.hpp"

namespace cohort::test {

/// The code of the cohort::error `f` throws; errc::none when it returns.
inline cohort::errc code_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const cohort::error& e) {
    return e.code();
  }
  return cohort::errc::none;
}

/// `n` floats 0, 1, ..., 999, 0, 1, ... times `scale`.
inline std::vector<float> ramp(size_t n, float scale = 1.0f) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = float(i % 1000) * scale;
  return v;
}

} // namespace cohort::test
