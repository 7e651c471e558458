// The command line's numbers: the whole text, in range, finite; never a
// wrapped or saturated value.
#include <catch2/catch.hpp>

#include "tools/strict_numbers.hpp"

using namespace cohort;

TEST_CASE("counts are whole decimal numbers within their range",
          "[tools][numbers]") {
  CHECK(*tools::parse_count("--n", "0", 10) == 0);
  CHECK(*tools::parse_count("--n", "4294967295", UINT32_MAX) == UINT32_MAX);
  CHECK(*tools::parse_count("--n", "18446744073709551615", UINT64_MAX) ==
        UINT64_MAX);
  for (auto bad : {"", "4294967296", "-1", "+1", "1.5", "1e3", " 1", "1 ",
                   "0x10", "8K", "99999999999999999999999"})
    CHECK_FALSE(tools::parse_count("--n", bad, UINT32_MAX));
  CHECK_FALSE(tools::parse_count("--n", "18446744073709551616", UINT64_MAX));
  auto err = tools::parse_count("--max-inflight", "4294967296", UINT32_MAX);
  REQUIRE_FALSE(err);
  CHECK_THAT(describe(err.error()), Catch::Contains("--max-inflight"));
}

TEST_CASE("byte counts take units and stay within their range",
          "[tools][numbers]") {
  CHECK(*tools::parse_bytes("--b", "512", INT64_MAX) == 512);
  CHECK(*tools::parse_bytes("--b", "512M", INT64_MAX) == 512u << 20);
  CHECK(*tools::parse_bytes("--b", "1.5GiB", INT64_MAX) == 3ull << 29);
  CHECK(*tools::parse_bytes("--b", "2T", INT64_MAX) == 2ull << 40);
  CHECK(*tools::parse_bytes("--b", "1K", 1024) == 1024);
  for (auto bad : {"", "1e30", "-5", "inf", "nan", "1.5X", ".5M", "5.", "K",
                   "1 M", "99999999999T", "2G"})
    CHECK_FALSE(tools::parse_bytes("--b", bad, 1024 * 1024 * 1024));
}

TEST_CASE("real numbers are finite and within their range",
          "[tools][numbers]") {
  CHECK(*tools::parse_real("--for", "0.25", 0, 10) == 0.25);
  CHECK(*tools::parse_real("--for", "1e1", 0, 10) == 10);
  for (auto bad :
       {"", "inf", "-inf", "nan", "1e300", "-1", "10.5", "1x", " 1", "1e-400"})
    CHECK_FALSE(tools::parse_real("--for", bad, 0, 10));
}
