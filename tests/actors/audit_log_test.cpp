// The hash-chained audit log: append, reopen, verify, tamper, truncate.
#include <catch2/catch.hpp>

#include <fstream>

#include "actors/audit_log.hpp"
#include "messages/errc.hpp"
#include "tests/runtime_fixture.hpp"

using namespace cohort;
using namespace cohort::actors;

namespace {

void write_events(const std::string& path, int n, uint32_t batch = 8) {
  auto log = audit_log::open(path, batch);
  REQUIRE(log);
  for (int i = 0; i < n; ++i)
    REQUIRE_FALSE((*log)->append(
        {audit_kind::admitted, "t", uint64_t(i), "", "axpy", "detail", 0}));
  REQUIRE_FALSE((*log)->flush(true));
}

std::string slurp(const std::string& path) {
  std::ifstream in{path, std::ios::binary};
  return {std::istreambuf_iterator<char>{in}, {}};
}

void spit(const std::string& path, const std::string& bytes) {
  std::ofstream out{path, std::ios::binary | std::ios::trunc};
  out << bytes;
}

} // namespace

TEST_CASE("a written log verifies and reopening continues the chain",
          "[actors][audit]") {
  test::temp_dir dir;
  auto path = dir.file("a.log");
  write_events(path, 100);
  auto v = audit_log::verify(path);
  CHECK(v.ok);
  CHECK(v.good_records == 100);
  write_events(path, 5);
  v = audit_log::verify(path);
  CHECK(v.ok);
  CHECK(v.good_records == 105);
}

TEST_CASE("flipping one byte breaks the chain at that record",
          "[actors][audit]") {
  test::temp_dir dir;
  auto path = dir.file("a.log");
  write_events(path, 50);
  auto bytes = slurp(path);
  // Records are the same size here: flip a byte inside record 31's detail.
  auto pos = bytes.find("detail");
  auto record_size = bytes.find("detail", pos + 1) - pos;
  bytes[pos + 30 * record_size] ^= 0x01;
  spit(path, bytes);
  auto v = audit_log::verify(path);
  CHECK_FALSE(v.ok);
  CHECK(v.first_bad == 31);
  CHECK(v.good_records == 30);
  auto reopened = audit_log::open(path, 8);
  REQUIRE_FALSE(reopened);
  CHECK(code_of(reopened.error()) == errc::audit_chain_broken);
}

TEST_CASE("a truncated tail is reported, not ignored", "[actors][audit]") {
  test::temp_dir dir;
  auto path = dir.file("a.log");
  write_events(path, 10);
  auto bytes = slurp(path);
  spit(path, bytes.substr(0, bytes.size() - 3));
  auto v = audit_log::verify(path);
  CHECK_FALSE(v.ok);
  CHECK(v.first_bad == 10);
  CHECK_THAT(v.reason, Catch::Contains("truncated"));
}

TEST_CASE("removing a record breaks the chain", "[actors][audit]") {
  test::temp_dir dir;
  auto path = dir.file("a.log");
  write_events(path, 10);
  auto bytes = slurp(path);
  auto first = bytes.find("detail");
  auto size = bytes.find("detail", first + 1) - first;
  spit(path, bytes.substr(0, size) + bytes.substr(2 * size));
  auto v = audit_log::verify(path);
  CHECK_FALSE(v.ok);
  CHECK(v.first_bad == 2);
}

TEST_CASE("an unwritable audit path is a clear error", "[actors][audit]") {
  auto log = audit_log::open("/nonexistent-dir/x.log", 8);
  REQUIRE_FALSE(log);
  CHECK(code_of(log.error()) == errc::io_error);
  CHECK_THAT(describe(log.error()), Catch::Contains("/nonexistent-dir/x.log"));
}
