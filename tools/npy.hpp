// NumPy .npy files (format versions 1.0, 2.0 and 3.0) for pipelines over
// real data: a reader that checks a file before it reads any of its data
// and reads rows on demand, and a writer that fills a file batch by batch,
// in any order. The header's dictionary is parsed and written by xtensor
// (xt::detail in <xtensor/xnpy.hpp>); the framing around it, and every
// bound a hostile file could break, are checked here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <caf/expected.hpp>

#include "kernels/catalog.hpp"
#include "kernels/dtype.hpp"
#include "messages/host_buffer.hpp"

namespace cohort::tools::npy {

/// Most dimensions and header bytes a file may have.
inline constexpr size_t max_dimensions = 32;
inline constexpr uint32_t max_header_bytes = 1 << 16;

/// The descr of `t` ("<f4", "<f8", "<i4", "<i8", "|u1").
std::string descr(kernels::dtype t);

/// What a file's header says, checked against its size.
struct array_info {
  kernels::dtype type = kernels::dtype::f32;
  std::vector<uint64_t> shape;
  /// Where the data starts, and its elements.
  uint64_t data_offset = 0;
  uint64_t elements = 0;
  /// The first axis (1 for a 0-d array), and elements per row.
  uint64_t rows = 1;
  uint64_t row_elements = 1;
};

/// "float64 (2000, 2)".
std::string describe(const array_info& a);

/// An open .npy file. Errors (errc::malformed_pipeline) name the file and
/// what is wrong: not a regular file, not a .npy file, an unsupported
/// element type (big-endian, complex, object, structured), Fortran order,
/// a shape whose data does not fill the file exactly.
class reader {
public:
  static caf::expected<reader> open(const std::string& path);

  reader(reader&&) noexcept;
  reader& operator=(reader&&) noexcept;
  reader(const reader&) = delete;
  ~reader();

  const array_info& info() const { return info_; }
  const std::string& path() const { return path_; }

  /// Rows [first, first + count) as a buffer of the file's element type;
  /// an error if the file has changed under it (a short read).
  caf::expected<host_buffer> rows(uint64_t first, uint64_t count) const;

private:
  reader() = default;
  int fd_ = -1;
  std::string path_;
  array_info info_;
};

/// Parses a .npy image held in memory (the header and the data), as
/// `reader::open` checks a file: for the fuzzer and the tests.
caf::expected<array_info> parse(const uint8_t* data, size_t size,
                                const std::string& name);

/// A .npy file written in parts at known places: made whole as
/// `PATH.part`, renamed to PATH by `commit`, removed by `discard` (and by
/// the destructor, when not committed).
class writer {
public:
  static caf::expected<writer> create(const std::string& path,
                                      kernels::dtype type,
                                      std::vector<uint64_t> shape);

  writer(writer&&) noexcept;
  writer& operator=(writer&&) noexcept;
  writer(const writer&) = delete;
  ~writer();

  /// Writes `values` (of the file's type) from element `offset` on.
  caf::error write(uint64_t offset, kernels::typed_view values);
  caf::error commit();
  void discard();

  const std::string& path() const { return path_; }

private:
  writer() = default;
  int fd_ = -1;
  std::string path_;
  kernels::dtype type_ = kernels::dtype::f32;
  uint64_t data_offset_ = 0;
  uint64_t elements_ = 0;
};

} // namespace cohort::tools::npy
