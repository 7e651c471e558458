#include "tools/npy.hpp"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sstream>
#include <stdexcept>
#include <sys/stat.h>
#include <unistd.h>

#include <xtensor/xnpy.hpp>

#include "messages/errc.hpp"

namespace cohort::tools::npy {

namespace {

constexpr char magic[] = "\x93NUMPY";
constexpr size_t magic_length = 6;

caf::error bad(const std::string& name, const std::string& what) {
  return make_error(errc::malformed_pipeline, name + ": " + what);
}

// Each element type's descr and NumPy name, in dtype order.
struct type_names {
  const char* descr;
  const char* numpy;
};
constexpr type_names names[kernels::dtype_limit] = {
    {"<f4", "float32"}, {"<f8", "float64"}, {"<i4", "int32"},
    {"<i8", "int64"},   {"|u1", "uint8"},
};

// Reads exactly `n` bytes at `offset`; false on a short read or an error.
bool read_at(int fd, void* out, size_t n, uint64_t offset) {
  auto* p = static_cast<char*>(out);
  while (n > 0) {
    auto got = ::pread(fd, p, n, off_t(offset));
    if (got < 0 && errno == EINTR)
      continue;
    if (got <= 0)
      return false;
    p += got;
    n -= size_t(got);
    offset += uint64_t(got);
  }
  return true;
}

bool write_at(int fd, const void* in, size_t n, uint64_t offset) {
  auto* p = static_cast<const char*>(in);
  while (n > 0) {
    auto put = ::pwrite(fd, p, n, off_t(offset));
    if (put < 0 && errno == EINTR)
      continue;
    if (put <= 0)
      return false;
    p += put;
    n -= size_t(put);
    offset += uint64_t(put);
  }
  return true;
}

// The header's length field: where the dictionary starts and how long it is.
struct framing {
  uint64_t dict_offset = 0;
  uint64_t dict_length = 0;
};

caf::expected<framing> frame(const uint8_t* head, size_t have,
                             uint64_t file_size, const std::string& name) {
  auto have_magic = std::min<size_t>(have, magic_length);
  if (std::memcmp(head, magic, have_magic) != 0 || have == 0)
    return bad(name, "not a NumPy .npy file (no \\x93NUMPY magic)");
  if (file_size < magic_length + 4 || have < magic_length + 4)
    return bad(name, "the file ends inside its header");
  unsigned major = head[6], minor = head[7];
  framing f;
  if (major == 1 && minor == 0) {
    f.dict_offset = 10;
    f.dict_length = uint64_t(head[8]) | uint64_t(head[9]) << 8;
  } else if ((major == 2 || major == 3) && minor == 0) {
    if (have < 12)
      return bad(name, "the file ends inside its header");
    f.dict_offset = 12;
    f.dict_length = uint64_t(head[8]) | uint64_t(head[9]) << 8 |
                    uint64_t(head[10]) << 16 | uint64_t(head[11]) << 24;
  } else {
    return bad(name, "unsupported .npy format version " +
                         std::to_string(major) + "." + std::to_string(minor) +
                         " (1.0, 2.0 and 3.0 are read)");
  }
  if (f.dict_length > max_header_bytes)
    return bad(name, "its header claims " + std::to_string(f.dict_length) +
                         " bytes, at most " + std::to_string(max_header_bytes) +
                         " are read");
  if (f.dict_offset + f.dict_length > file_size)
    return bad(name, "the file ends inside its header");
  return f;
}

// What xtensor's parser does not guard against, checked first on the
// dictionary without its spaces (as xtensor reads it): an empty or
// unbraced one, a descr longer than any type string (its regex recurses
// per character), a shape that is not a tuple of sizes (it reads what it
// cannot parse as 0). Empty when fine, else what is wrong.
std::string precheck(const std::string& dict) {
  if (dict.empty() || dict.back() != '\n')
    return "its header does not end with a newline";
  std::string text;
  for (char c : dict)
    if (c != ' ' && c != '\n')
      text += c;
  if (text.size() < 2 || text.front() != '{' || text.back() != '}')
    return "its header is not a dictionary";
  auto descr = text.find("'descr':'");
  if (descr == std::string::npos)
    return "its header has no 'descr' type string";
  auto end = text.find('\'', descr + 9);
  if (end == std::string::npos || end - (descr + 9) > 8)
    return "its header's descr is not a NumPy type string";
  auto shape = text.find("'shape':");
  if (shape == std::string::npos)
    return "its header has no 'shape'";
  auto open = shape + 8;
  auto close = text.find(')', open);
  if (open >= text.size() || text[open] != '(' || close == std::string::npos ||
      text.find_first_not_of("0123456789,", open + 1) < close)
    return "its header's shape is not a tuple of sizes";
  return {};
}

// The dictionary, parsed by xtensor, checked against the file's size.
caf::expected<array_info> read_dict(std::string dict, uint64_t data_offset,
                                    uint64_t file_size,
                                    const std::string& name) {
  if (auto why = precheck(dict); !why.empty())
    return bad(name, why);
  std::string descr;
  bool fortran = false;
  std::vector<size_t> shape;
  try {
    xt::detail::parse_header(std::move(dict), descr, &fortran, shape);
  } catch (const std::exception& e) {
    return bad(name, std::string{"its header is not a .npy header ("} +
                         e.what() + ")");
  }
  array_info a;
  std::optional<kernels::dtype> type;
  for (unsigned i = 0; i < kernels::dtype_limit; ++i)
    if (npy::descr(static_cast<kernels::dtype>(i)) == descr)
      type = static_cast<kernels::dtype>(i);
  if (descr == "<u1")
    type = kernels::dtype::u8;
  if (!type)
    return bad(name, "holds '" + descr +
                         "' elements; pipelines read little-endian float32, "
                         "float64, int32, int64 and uint8 (numpy: "
                         "a.astype('<f8') and the like)");
  a.type = *type;
  if (shape.size() > max_dimensions)
    return bad(name, "has " + std::to_string(shape.size()) +
                         " dimensions, at most " +
                         std::to_string(max_dimensions));
  if (fortran && shape.size() > 1)
    return bad(name, "is in Fortran order; write it in C order "
                     "(numpy.ascontiguousarray)");
  a.shape.assign(shape.begin(), shape.end());
  uint64_t elements = 1;
  auto esize = kernels::element_size(a.type);
  for (auto d : a.shape)
    if (d != 0 && elements > (std::numeric_limits<uint64_t>::max() / esize) / d)
      return bad(name, "its shape is too large for any file");
    else
      elements *= d;
  a.elements = elements;
  a.data_offset = data_offset;
  a.rows = a.shape.empty() ? 1 : a.shape[0];
  a.row_elements = 1;
  for (size_t i = 1; i < a.shape.size(); ++i)
    a.row_elements *= a.shape[i];
  if (a.shape.size() > 1 && a.rows == 0)
    a.row_elements = 0;
  auto want = data_offset + elements * esize;
  if (want != file_size)
    return bad(name, "its header says " + describe(a) + ", " +
                         std::to_string(elements * esize) +
                         " bytes of data, but the file holds " +
                         std::to_string(file_size - data_offset));
  return a;
}

} // namespace

std::string descr(kernels::dtype t) {
  return names[size_t(t)].descr;
}

std::string describe(const array_info& a) {
  std::string s = std::string{names[size_t(a.type)].numpy} + " (";
  for (size_t i = 0; i < a.shape.size(); ++i)
    s += (i ? ", " : "") + std::to_string(a.shape[i]);
  if (a.shape.size() == 1)
    s += ",";
  return s + ")";
}

caf::expected<array_info> parse(const uint8_t* data, size_t size,
                                const std::string& name) {
  auto f = frame(data, size, size, name);
  if (!f)
    return f.error();
  std::string dict(reinterpret_cast<const char*>(data) + f->dict_offset,
                   f->dict_length);
  return read_dict(std::move(dict), f->dict_offset + f->dict_length, size,
                   name);
}

// -- reader -------------------------------------------------------------------

caf::expected<reader> reader::open(const std::string& path) {
  // O_NONBLOCK: a FIFO named here must not block the open.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0)
    return bad(path, std::string{"cannot open it: "} + std::strerror(errno));
  reader r;
  r.fd_ = fd;
  r.path_ = path;
  struct stat sb {};
  if (::fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode))
    return bad(path, "not a regular file");
  auto size = uint64_t(sb.st_size);
  uint8_t head[12] = {};
  auto have = std::min<uint64_t>(size, sizeof head);
  if (!read_at(fd, head, size_t(have), 0))
    return bad(path, "cannot read its header");
  auto f = frame(head, size_t(have), size, path);
  if (!f)
    return f.error();
  std::string dict(size_t(f->dict_length), '\0');
  if (!read_at(fd, dict.data(), dict.size(), f->dict_offset))
    return bad(path, "cannot read its header");
  auto info =
      read_dict(std::move(dict), f->dict_offset + f->dict_length, size, path);
  if (!info)
    return info.error();
  r.info_ = std::move(*info);
  return r;
}

reader::reader(reader&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), path_(std::move(other.path_)),
      info_(std::move(other.info_)) {
  // nop
}

reader& reader::operator=(reader&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0)
      ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    path_ = std::move(other.path_);
    info_ = std::move(other.info_);
  }
  return *this;
}

reader::~reader() {
  if (fd_ >= 0)
    ::close(fd_);
}

caf::expected<host_buffer> reader::rows(uint64_t first, uint64_t count) const {
  if (first > info_.rows || count > info_.rows - first)
    return bad(path_, "rows " + std::to_string(first) + ".." +
                          std::to_string(first + count) + " are past its " +
                          std::to_string(info_.rows));
  auto n = count * info_.row_elements;
  auto esize = kernels::element_size(info_.type);
  auto held = std::make_shared<std::vector<uint8_t>>(n * esize);
  if (!read_at(fd_, held->data(), held->size(),
               info_.data_offset + first * info_.row_elements * esize))
    return bad(path_, "could not read rows " + std::to_string(first) + ".." +
                          std::to_string(first + count) +
                          " (has the file changed since it was opened?)");
  auto* data = held->data();
  return host_buffer{std::shared_ptr<const void>{std::move(held)}, data, n,
                     info_.type};
}

// -- writer -------------------------------------------------------------------

caf::expected<writer> writer::create(const std::string& path,
                                     kernels::dtype type,
                                     std::vector<uint64_t> shape) {
  writer w;
  w.path_ = path;
  w.type_ = type;
  auto part = path + ".part";
  w.fd_ = ::open(part.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (w.fd_ < 0)
    return bad(part, std::string{"cannot create it: "} + std::strerror(errno));
  std::vector<size_t> dims(shape.begin(), shape.end());
  std::ostringstream head;
  xt::detail::write_header(head, descr(type), false, dims);
  auto text = head.str();
  w.data_offset_ = text.size();
  w.elements_ = 1;
  for (auto d : shape)
    w.elements_ *= d;
  if (!write_at(w.fd_, text.data(), text.size(), 0) ||
      ::ftruncate(w.fd_, off_t(w.data_offset_ +
                               w.elements_ * kernels::element_size(type))) != 0)
    return bad(part, std::string{"cannot write it: "} + std::strerror(errno));
  return w;
}

writer::writer(writer&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), path_(std::move(other.path_)),
      type_(other.type_), data_offset_(other.data_offset_),
      elements_(other.elements_) {
  // nop
}

writer& writer::operator=(writer&& other) noexcept {
  if (this != &other) {
    discard();
    fd_ = std::exchange(other.fd_, -1);
    path_ = std::move(other.path_);
    type_ = other.type_;
    data_offset_ = other.data_offset_;
    elements_ = other.elements_;
  }
  return *this;
}

writer::~writer() {
  discard();
}

caf::error writer::write(uint64_t offset, kernels::typed_view values) {
  if (fd_ < 0)
    return bad(path_, "already closed");
  if (values.type != type_ || offset > elements_ ||
      values.size > elements_ - offset)
    return bad(path_, "a batch's output does not fit where it goes (" +
                          std::to_string(values.size) + " elements at " +
                          std::to_string(offset) + " of " +
                          std::to_string(elements_) + ")");
  auto esize = kernels::element_size(type_);
  if (!write_at(fd_, values.data, size_t(values.bytes()),
                data_offset_ + offset * esize))
    return bad(path_ + ".part",
               std::string{"cannot write it: "} + std::strerror(errno));
  return caf::none;
}

caf::error writer::commit() {
  if (fd_ < 0)
    return bad(path_, "already closed");
  auto part = path_ + ".part";
  bool ok = ::fsync(fd_) == 0;
  ok = ::close(std::exchange(fd_, -1)) == 0 && ok;
  if (!ok || ::rename(part.c_str(), path_.c_str()) != 0) {
    auto why = std::string{std::strerror(errno)};
    ::unlink(part.c_str());
    return bad(path_, "cannot write it: " + why);
  }
  return caf::none;
}

void writer::discard() {
  if (fd_ < 0)
    return;
  ::close(std::exchange(fd_, -1));
  ::unlink((path_ + ".part").c_str());
}

} // namespace cohort::tools::npy
