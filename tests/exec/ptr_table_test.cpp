// The shim's table of allocations (exec/ptr_table.hpp): what it records
// matches a std::unordered_map through random puts and takes, with keys
// that collide, a record at address 0, growth, and deletion that shifts
// the rest of a run back.
#include <catch2/catch.hpp>

#include <cstdint>
#include <random>
#include <unordered_map>

#include "exec/ptr_table.hpp"

using cohort::exec::ptr_table;

TEST_CASE("the allocation table records, replaces and forgets", "[exec]") {
  ptr_table t;
  bool ok = false;
  CHECK(t.take(0x1000) == 0); // empty, nothing allocated yet
  CHECK(t.put(0x1000, 64, ok) == 0);
  CHECK(ok);
  CHECK(t.put(0x2000, 32, ok) == 0);
  CHECK(t.size() == 2);
  CHECK(t.capacity() == 1024);
  // A record replaced returns what it held (memory freed behind the shim).
  CHECK(t.put(0x1000, 128, ok) == 64);
  CHECK(t.size() == 2);
  CHECK(t.take(0x1000) == 128);
  CHECK(t.take(0x1000) == 0);
  CHECK(t.take(0x3000) == 0);
  // Address 0 is kept outside the array (0 marks a free slot).
  CHECK(t.put(0, 16, ok) == 0);
  CHECK(t.size() == 2);
  CHECK(t.take(0) == 16);
  CHECK(t.take(0) == 0);
  CHECK(t.take(0x2000) == 32);
  CHECK(t.size() == 0);
}

TEST_CASE("the allocation table grows and keeps every record", "[exec]") {
  ptr_table t;
  bool ok = false;
  // 2 MiB-aligned addresses: the low bits all alike.
  for (uint64_t i = 1; i <= 5000; ++i) {
    CHECK(t.put(i << 21, i, ok) == 0);
    REQUIRE(ok);
  }
  CHECK(t.size() == 5000);
  CHECK(t.capacity() == 8192); // 70 % at most taken
  for (uint64_t i = 1; i <= 5000; i += 2)
    CHECK(t.take(i << 21) == i);
  for (uint64_t i = 2; i <= 5000; i += 2)
    CHECK(t.take(i << 21) == i);
  CHECK(t.size() == 0);
}

TEST_CASE("the allocation table agrees with a map through random use",
          "[exec]") {
  std::mt19937_64 rng{22};
  for (uint64_t spread : {uint64_t{64}, uint64_t{4096}, uint64_t{1} << 20}) {
    ptr_table t;
    std::unordered_map<uint64_t, uint64_t> want;
    bool ok = false;
    for (int step = 0; step < 200000; ++step) {
      // Few distinct keys in a narrow range: long runs of collisions, and
      // many deletions in the middle of a run.
      uint64_t key = (rng() % spread) * 256;
      if (rng() % 3 != 0) {
        uint64_t n = rng() % 1000 + 1;
        auto i = want.find(key);
        uint64_t stale = i != want.end() ? i->second : 0;
        REQUIRE(t.put(key, n, ok) == stale);
        REQUIRE(ok);
        want[key] = n;
      } else {
        auto i = want.find(key);
        uint64_t had = i != want.end() ? i->second : 0;
        REQUIRE(t.take(key) == had);
        want.erase(key);
      }
      REQUIRE(t.size() == want.size());
    }
    for (auto& [key, n] : want)
      REQUIRE(t.take(key) == n);
    CHECK(t.size() == 0);
  }
}
