// The object directory as plain code: holders, copies, eviction order, loss.
#include <catch2/catch.hpp>

#include "objects/object_directory.hpp"

using namespace cohort;
using namespace cohort::objects;

namespace {

host_buffer floats(size_t n) {
  return host_buffer{std::vector<float>(n, 1.0f)};
}

uint64_t exact(uint64_t bytes) {
  return bytes;
}

} // namespace

TEST_CASE("an object lives while a handle or a reader holds it", "[objects]") {
  object_directory dir;
  auto id = dir.create("t", kernels::dtype::f32, 10, floats(10), 0);
  CHECK(id != 0);
  auto* e = dir.find(id);
  REQUIRE(e != nullptr);
  CHECK(e->handles == 1);
  CHECK(e->bytes() == 40);
  CHECK(e->has_host);
  dir.retain(id);
  dir.pin(id, 2);
  CHECK_FALSE(dir.release(id));
  CHECK_FALSE(dir.release(id)); // the reader still holds it
  CHECK(dir.find(id)->handles == 0);
  CHECK(dir.unpin(id, 2)); // the last holder: free it now
  CHECK(dir.unreferenced(id));
  dir.erase(id);
  CHECK(dir.find(id) == nullptr);
  // Releasing or unpinning what is gone changes nothing.
  CHECK_FALSE(dir.release(id));
  CHECK_FALSE(dir.unpin(id, 2));
  // Ids are never reused.
  CHECK(dir.create("t", kernels::dtype::f32, 1, std::nullopt, 0) != id);
}

TEST_CASE("an object made from another holds it while it may need it",
          "[objects]") {
  object_directory dir;
  auto from = dir.create("t", kernels::dtype::f32, 8, floats(8), 0);
  dir.depend(from);
  dir.depend(from);
  // Its handle released, it stays for the two objects made from it.
  CHECK_FALSE(dir.release(from));
  CHECK_FALSE(dir.unreferenced(from));
  CHECK(dir.find(from)->dependents == 2);
  CHECK_FALSE(dir.undepend(from));
  CHECK(dir.undepend(from));
  CHECK(dir.unreferenced(from));
  // One more than were taken is ignored.
  CHECK_FALSE(dir.undepend(from));
  CHECK(dir.find(from)->dependents == 0);
}

TEST_CASE("a release beyond the handles held is ignored", "[objects]") {
  object_directory dir;
  auto id = dir.create("t", kernels::dtype::i64, 4, std::nullopt, 0);
  CHECK(dir.find(id)->bytes() == 32);
  CHECK(dir.release(id));
  CHECK_FALSE(dir.release(id));
  CHECK(dir.find(id)->handles == 0);
}

TEST_CASE("placement sees the bytes a device holds", "[objects]") {
  object_directory dir;
  auto a = dir.create("t", kernels::dtype::f32, 100, floats(100), 0);
  auto b = dir.create("t", kernels::dtype::f32, 50, floats(50), 0);
  dir.storing(a, 0);
  CHECK(dir.resident_bytes({a, b}, 0) == 0); // not there until stored
  dir.stored(a, 0);
  dir.stored(b, 0);
  dir.stored(b, 1);
  CHECK(dir.resident_bytes({a, b}, 0) == 600);
  CHECK(dir.resident_bytes({a, b}, 1) == 200);
  CHECK(dir.resident_bytes({a, b}, 2) == 0);
  CHECK(dir.resident_bytes({a, 12345}, 0) == 400);
  dir.unstored(a, 0);
  CHECK(dir.resident_bytes({a}, 0) == 0);
}

TEST_CASE("eviction takes the least recently used copies no item reads",
          "[objects]") {
  object_directory dir;
  auto a = dir.create("t", kernels::dtype::f32, 256, floats(256), 0);
  auto b = dir.create("t", kernels::dtype::f32, 256, std::nullopt, 0);
  auto c = dir.create("t", kernels::dtype::f32, 256, std::nullopt, 0);
  auto d = dir.create("u", kernels::dtype::f32, 256, floats(256), 0);
  for (auto id : {a, b, c, d})
    dir.stored(id, 0);
  dir.stored(c, 1);
  dir.touch(a);  // a is now the most recently used
  dir.pin(b, 0); // b is being read on device 0
  SECTION("everything that may go, oldest first") {
    auto ev = dir.evictable(0, UINT64_MAX, "", exact);
    REQUIRE(ev.size() == 3);
    CHECK(ev[0].id == c);
    CHECK_FALSE(ev[0].spill); // device 1 has another copy
    CHECK(ev[1].id == d);
    CHECK_FALSE(ev[1].spill); // it has a host copy
    CHECK(ev[2].id == a);
  }
  SECTION("only as much as asked") {
    auto ev = dir.evictable(0, 1000, "", exact);
    REQUIRE(ev.size() == 1);
    CHECK(ev[0].bytes == 1024);
  }
  SECTION("only one tenant's") {
    auto ev = dir.evictable(0, UINT64_MAX, "u", exact);
    REQUIRE(ev.size() == 1);
    CHECK(ev[0].id == d);
  }
  SECTION("a copy that is the only one must be spilled") {
    dir.unpin(b, 0); // read last: the most recently used now
    dir.unstored(c, 1);
    auto ev = dir.evictable(0, UINT64_MAX, "t", exact);
    REQUIRE(ev.size() == 3);
    CHECK(ev[0].id == c);
    CHECK(ev[0].spill);
    CHECK(ev[1].id == a);
    CHECK_FALSE(ev[1].spill);
    CHECK(ev[2].id == b);
    CHECK(ev[2].spill);
  }
  SECTION("the block size decides how many go") {
    auto ev =
        dir.evictable(0, 2048, "", [](uint64_t) -> uint64_t { return 4096; });
    CHECK(ev.size() == 1);
  }
}

TEST_CASE("a lost device's objects are kept, re-run or lost", "[objects]") {
  object_directory dir;
  auto with_host = dir.create("t", kernels::dtype::f32, 8, floats(8), 0);
  auto elsewhere = dir.create("t", kernels::dtype::f32, 8, std::nullopt, 0);
  auto rerun = dir.create("t", kernels::dtype::f32, 8, std::nullopt, 0);
  auto lost = dir.create("t", kernels::dtype::f32, 8, std::nullopt, 0);
  auto untouched = dir.create("t", kernels::dtype::f32, 8, std::nullopt, 0);
  for (auto id : {with_host, elsewhere, rerun, lost})
    dir.stored(id, 3);
  dir.stored(elsewhere, 4);
  dir.stored(untouched, 4);
  dir.find(rerun)->producer = 99;
  auto storing = dir.create("t", kernels::dtype::f32, 8, std::nullopt, 0);
  dir.storing(storing, 3);
  auto r = dir.device_lost(3);
  CHECK(r.kept == std::vector<uint64_t>{with_host, elsewhere});
  CHECK(r.rerun == std::vector<uint64_t>{rerun});
  CHECK(r.lost == std::vector<uint64_t>{lost, storing});
  for (auto id : {with_host, elsewhere, rerun, lost, storing})
    CHECK_FALSE(has_device(dir.find(id)->replicas, 3));
  CHECK(dir.find(elsewhere)->replicas == device_bit(4));
  CHECK(dir.find(untouched)->replicas == device_bit(4));
  // A second report for the same device finds nothing left there.
  auto again = dir.device_lost(3);
  CHECK(again.kept.empty());
  CHECK(again.rerun.empty());
  CHECK(again.lost.empty());
}

TEST_CASE("an item's output is made an object under a reserved id",
          "[objects]") {
  object_directory dir;
  auto id = dir.reserve_id();
  CHECK(dir.find(id) == nullptr);
  CHECK(dir.create_as(id, "t", kernels::dtype::f64, 3, std::nullopt, 5));
  CHECK(dir.find(id)->bytes() == 24);
  CHECK(dir.find(id)->created_ns == 5);
  CHECK_FALSE(dir.create_as(id, "t", kernels::dtype::f64, 3, std::nullopt, 5));
  CHECK_FALSE(
      dir.create_as(id + 100, "t", kernels::dtype::f32, 1, std::nullopt, 0));
  CHECK_FALSE(dir.create_as(0, "t", kernels::dtype::f32, 1, std::nullopt, 0));
  CHECK(dir.create("t", kernels::dtype::f32, 1, std::nullopt, 0) > id);
}
