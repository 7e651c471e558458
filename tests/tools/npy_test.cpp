// The .npy reader and writer of pipelines over files: round trips, and
// every way a hostile or broken file is refused before its data is read.
#include <catch2/catch.hpp>

#include <fstream>
#include <sys/stat.h>

#include "messages/errc.hpp"
#include "tests/runtime_fixture.hpp"
#include "tools/npy.hpp"

using namespace cohort;
using namespace std::string_literals;
namespace npy = cohort::tools::npy;

namespace {

// A .npy image as numpy lays it out: magic, version, header length, the
// dictionary padded with spaces to 64 bytes and a newline, then `data`.
std::string image(const std::string& dict, const std::string& data,
                  int major = 1) {
  std::string head = dict;
  size_t prefix = major == 1 ? 10 : 12;
  while ((prefix + head.size() + 1) % 64 != 0)
    head += ' ';
  head += '\n';
  std::string out = "\x93NUMPY";
  out += char(major);
  out += char(0);
  auto n = head.size();
  out += char(n & 0xff);
  out += char((n >> 8) & 0xff);
  if (major != 1) {
    out += char((n >> 16) & 0xff);
    out += char((n >> 24) & 0xff);
  }
  return out + head + data;
}

std::string dict(const std::string& descr, const std::string& shape,
                 const std::string& fortran = "False") {
  return "{'descr': '" + descr + "', 'fortran_order': " + fortran +
         ", 'shape': " + shape + ", }";
}

std::string save(const test::temp_dir& dir, const std::string& name,
                 const std::string& bytes) {
  auto path = dir.file(name);
  std::ofstream{path, std::ios::binary} << bytes;
  return path;
}

std::string refusal(const std::string& bytes) {
  auto parsed = npy::parse(reinterpret_cast<const uint8_t*>(bytes.data()),
                           bytes.size(), "x.npy");
  REQUIRE(!parsed);
  return describe(parsed.error());
}

} // namespace

TEST_CASE("npy: a file numpy's layout describes is read, row by row",
          "[tools][npy]") {
  test::temp_dir dir;
  std::vector<double> values;
  for (int i = 0; i < 12; ++i)
    values.push_back(i * 0.5);
  std::string data(reinterpret_cast<const char*>(values.data()),
                   values.size() * sizeof(double));
  for (int major : {1, 2, 3}) {
    auto path = save(dir, "a.npy", image(dict("<f8", "(6, 2)"), data, major));
    auto r = npy::reader::open(path);
    REQUIRE(r);
    CHECK(r->info().type == kernels::dtype::f64);
    CHECK(r->info().shape == std::vector<uint64_t>{6, 2});
    CHECK(r->info().rows == 6);
    CHECK(r->info().row_elements == 2);
    CHECK(npy::describe(r->info()) == "float64 (6, 2)");
    auto rows = r->rows(2, 3);
    REQUIRE(rows);
    REQUIRE(rows->size() == 6);
    CHECK(rows->type() == kernels::dtype::f64);
    auto got = rows->view().as<double>();
    CHECK(std::vector<double>(got.begin(), got.end()) ==
          std::vector<double>(values.begin() + 4, values.begin() + 10));
    CHECK(!r->rows(5, 2));
  }
  // One-dimensional arrays, every element type, a 0-d array.
  auto u8 = save(dir, "u.npy", image(dict("|u1", "(3,)"), "abc"));
  REQUIRE(npy::reader::open(u8));
  CHECK(npy::reader::open(u8)->info().type == kernels::dtype::u8);
  auto scalar = save(dir, "s.npy", image(dict("<i4", "()"), "\x07\0\0\0"s));
  auto s = npy::reader::open(scalar);
  REQUIRE(s);
  CHECK(s->info().rows == 1);
  CHECK(s->info().elements == 1);
  CHECK(npy::descr(kernels::dtype::i64) == "<i8");
}

TEST_CASE("npy: a broken or hostile file is refused before its data is read",
          "[tools][npy]") {
  std::string eight(8, '\0');
  CHECK_THAT(refusal("garbage"), Catch::Contains("not a NumPy .npy file"));
  CHECK_THAT(refusal(""), Catch::Contains("not a NumPy .npy file"));
  auto v9 = image(dict("<f8", "(1,)"), eight);
  v9[6] = 9;
  CHECK_THAT(refusal(v9),
             Catch::Contains("unsupported .npy format version 9.0"));
  // A header length past the file, and one past any sane header.
  auto past = image(dict("<f8", "(1,)"), eight);
  past[8] = char(0xff);
  past[9] = char(0x7f);
  CHECK_THAT(refusal(past), Catch::Contains("ends inside its header"));
  auto huge = image(dict("<f8", "(1,)"), eight, 2);
  huge[11] = char(0x7f);
  CHECK_THAT(refusal(huge), Catch::Contains("at most 65536"));
  // A file cut inside its header, an empty or unbraced dictionary.
  CHECK_THAT(refusal("\x93NUMPY\x01"),
             Catch::Contains("ends inside its header"));
  CHECK_THAT(refusal("\x93NUMPY\x01\x00\x00\x00"s),
             Catch::Contains("does not end with a newline"));
  CHECK_THAT(refusal("\x93NUMPY\x01\x00\x01\x00\n"s),
             Catch::Contains("not a dictionary"));
  // A descr long enough to exhaust a recursive regex, and a shape key
  // written with a space in it: both refused before xtensor parses them.
  CHECK_THAT(refusal(image(dict("<" + std::string(60000, '8'), "(1,)"), eight)),
             Catch::Contains("not a NumPy type string"));
  CHECK_THAT(refusal(image("{'descr': '<f8', 'fortran_order': False, "
                           "'sha pe': (abc,), }",
                           eight)),
             Catch::Contains("not a tuple of sizes"));
  // Shapes whose data would not fill the file exactly.
  CHECK_THAT(refusal(image(dict("<f8", "(2,)"), eight)),
             Catch::Contains("16 bytes of data, but the file holds 8"));
  CHECK_THAT(refusal(image(dict("<f8", "(1,)"), eight + "x")),
             Catch::Contains("but the file holds 9"));
  CHECK_THAT(refusal(image(dict("<f8", "(4294967296, 4294967296, 8)"), eight)),
             Catch::Contains("too large"));
  CHECK_THAT(refusal(image(dict("<f8", "(-1,)"), eight)),
             Catch::Contains("not a tuple of sizes"));
  CHECK_THAT(refusal(image(dict("<f8", "(abc,)"), eight)),
             Catch::Contains("not a tuple of sizes"));
  // Element types pipelines do not read, and Fortran order.
  CHECK_THAT(refusal(image(dict(">f8", "(1,)"), eight)),
             Catch::Contains("'>f8' elements"));
  CHECK_THAT(refusal(image(dict("<c16", "(1,)"), eight + eight)),
             Catch::Contains("'<c16' elements"));
  CHECK_THAT(refusal(image(dict("|O", "(1,)"), eight)),
             Catch::Contains("not a .npy header"));
  CHECK_THAT(refusal(image(dict("<f8", "(2, 1)", "True"), eight + eight)),
             Catch::Contains("Fortran order"));
  CHECK_THAT(refusal(image("{'descr': '<f8'}", eight)),
             Catch::Contains("has no 'shape'"));
  CHECK_THAT(refusal(image("{'descr': '<f8', 'shape': (1,), }", eight)),
             Catch::Contains("not a .npy header"));
  CHECK_THAT(refusal(image("not a dict", eight)),
             Catch::Contains("not a dictionary"));
}

TEST_CASE("npy: what is not a regular file is not opened for reading",
          "[tools][npy]") {
  test::temp_dir dir;
  auto missing = npy::reader::open(dir.file("none.npy"));
  REQUIRE(!missing);
  CHECK_THAT(describe(missing.error()), Catch::Contains("cannot open it"));
  auto device = npy::reader::open("/dev/zero");
  REQUIRE(!device);
  CHECK_THAT(describe(device.error()), Catch::Contains("not a regular file"));
  // A FIFO: opening it must not wait for a writer.
  auto fifo = dir.file("fifo.npy");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  auto pipe = npy::reader::open(fifo);
  REQUIRE(!pipe);
  CHECK_THAT(describe(pipe.error()), Catch::Contains("not a regular file"));
  REQUIRE(!npy::reader::open(dir.path.string()));
}

TEST_CASE("npy: the writer fills a file in any order and keeps it only on "
          "commit",
          "[tools][npy]") {
  test::temp_dir dir;
  auto path = dir.file("out.npy");
  {
    auto w = npy::writer::create(path, kernels::dtype::i32, {3, 2});
    REQUIRE(w);
    std::vector<int32_t> tail{4, 5}, head{0, 1, 2, 3};
    CHECK(!w->write(4, {tail.data(), tail.size(), kernels::dtype::i32}));
    CHECK(!w->write(0, {head.data(), head.size(), kernels::dtype::i32}));
    // Past its end, or of another type: refused.
    CHECK(w->write(5, {tail.data(), tail.size(), kernels::dtype::i32}));
    std::vector<float> wrong{1};
    CHECK(w->write(0, kernels::typed_view{wrong}));
    CHECK(std::filesystem::exists(path + ".part"));
    CHECK(!std::filesystem::exists(path));
    REQUIRE(!w->commit());
  }
  CHECK(!std::filesystem::exists(path + ".part"));
  auto r = npy::reader::open(path);
  REQUIRE(r);
  CHECK(npy::describe(r->info()) == "int32 (3, 2)");
  auto all = r->rows(0, 3);
  REQUIRE(all);
  auto got = all->view().as<int32_t>();
  CHECK(std::vector<int32_t>(got.begin(), got.end()) ==
        std::vector<int32_t>{0, 1, 2, 3, 4, 5});
  // Not committed: nothing is left behind.
  auto other = dir.file("dropped.npy");
  {
    auto w = npy::writer::create(other, kernels::dtype::f32, {4});
    REQUIRE(w);
    CHECK(std::filesystem::exists(other + ".part"));
  }
  CHECK(!std::filesystem::exists(other + ".part"));
  CHECK(!std::filesystem::exists(other));
  auto nowhere = npy::writer::create(dir.file("no/such/dir/x.npy"),
                                     kernels::dtype::f32, {1});
  REQUIRE(!nowhere);
  CHECK_THAT(describe(nowhere.error()), Catch::Contains("cannot create it"));
}
