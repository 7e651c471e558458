// Element types of kernel buffers. C++17 (hipcc includes it, like
// kernel_args.hpp); values match the public cohort::dtype.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace cohort::kernels {

/// The element type of a buffer a kernel takes or produces.
enum class dtype : uint8_t { f32, f64, i32, i64, u8 };

/// One past the largest dtype value.
inline constexpr unsigned dtype_limit = 5;

/// Bytes per element.
constexpr size_t element_size(dtype t) {
  switch (t) {
  case dtype::f64:
  case dtype::i64:
    return 8;
  case dtype::u8:
    return 1;
  default:
    return 4;
  }
}

/// "f32", "f64", "i32", "i64" or "u8".
constexpr std::string_view name(dtype t) {
  switch (t) {
  case dtype::f32:
    return "f32";
  case dtype::f64:
    return "f64";
  case dtype::i32:
    return "i32";
  case dtype::i64:
    return "i64";
  case dtype::u8:
    return "u8";
  }
  return "unknown";
}

/// Parses "f32", "f64", "i32", "i64" or "u8".
constexpr std::optional<dtype> parse_dtype(std::string_view s) {
  for (unsigned i = 0; i < dtype_limit; ++i)
    if (name(static_cast<dtype>(i)) == s)
      return static_cast<dtype>(i);
  return std::nullopt;
}

/// The dtype of a C++ element type.
template <class T> struct dtype_of;
template <> struct dtype_of<float> {
  static constexpr dtype value = dtype::f32;
};
template <> struct dtype_of<double> {
  static constexpr dtype value = dtype::f64;
};
template <> struct dtype_of<int32_t> {
  static constexpr dtype value = dtype::i32;
};
template <> struct dtype_of<int64_t> {
  static constexpr dtype value = dtype::i64;
};
template <> struct dtype_of<uint8_t> {
  static constexpr dtype value = dtype::u8;
};

} // namespace cohort::kernels
