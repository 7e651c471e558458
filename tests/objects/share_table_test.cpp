// The books of shared objects (objects/share_table): tokens, what a grant
// lets a process do, attachments counted against their export, and the
// sealed snapshots of host copies.
#include <catch2/catch.hpp>

#include <cerrno>
#include <set>
#include <sys/mman.h>
#include <unistd.h>

#include "messages/errc.hpp"
#include "objects/share_table.hpp"

using namespace cohort;
using cohort::objects::share_table;

namespace {

share_peer peer(int32_t pid, uint32_t uid) {
  return share_peer{pid, uid, uid};
}

} // namespace

TEST_CASE("share tokens are 128 random bits in hex, never repeated",
          "[objects][share]") {
  std::set<std::string> seen;
  for (int i = 0; i < 1000; ++i) {
    auto t = objects::random_token();
    REQUIRE(t.size() == 32);
    CHECK(t.find_first_not_of("0123456789abcdef") == std::string::npos);
    CHECK(seen.insert(t).second);
  }
}

TEST_CASE("an export lets in only what its grant names", "[objects][share]") {
  share_table t;
  share_grant ro;
  auto token = t.add_export(7, "a", ro);
  auto me = peer(100, 1000);
  SECTION("the runtime's own user, read-only") {
    auto ok = t.check(token, me, false, 1000);
    REQUIRE(ok);
    CHECK((*ok)->object == 7);
    CHECK((*ok)->tenant == "a");
  }
  SECTION("an unknown token, and one revoked, say the same") {
    auto bad = t.check(token + "0", me, false, 1000);
    REQUIRE_FALSE(bad);
    CHECK(code_of(bad.error()) == errc::not_granted);
    CHECK(t.revoke(token, ""));
    auto gone = t.check(token, me, false, 1000);
    REQUIRE_FALSE(gone);
    CHECK(describe(gone.error()) == describe(bad.error()));
    CHECK_FALSE(t.revoke(token, ""));
  }
  SECTION("another user") {
    auto other = t.check(token, peer(100, 1001), false, 1000);
    REQUIRE_FALSE(other);
    CHECK(code_of(other.error()) == errc::not_granted);
  }
  SECTION("write under a read-only grant") {
    auto w = t.check(token, me, true, 1000);
    REQUIRE_FALSE(w);
    CHECK(code_of(w.error()) == errc::not_granted);
  }
  SECTION("a revoke by another tenant is refused") {
    CHECK_FALSE(t.revoke(token, "b"));
    CHECK(t.revoke(token, "a"));
  }
}

TEST_CASE("an export names another user and limits its attachments",
          "[objects][share]") {
  share_table t;
  share_grant g;
  g.write = true;
  g.uid = 1234;
  g.max_attached = 2;
  auto token = t.add_export(9, "a", g);
  // The runtime's own user is not the grantee.
  CHECK_FALSE(t.check(token, peer(1, 1000), false, 1000));
  auto them = peer(2, 1234);
  REQUIRE(t.check(token, them, true, 1000));
  auto a1 = t.attach(token, 9, them, true, 0);
  auto a2 = t.attach(token, 9, them, false, 1);
  CHECK(a1 != a2);
  CHECK(t.attached_to(9) == 2);
  CHECK(t.find_export(token)->attached == 2);
  auto full = t.check(token, them, false, 1000);
  REQUIRE_FALSE(full);
  CHECK(code_of(full.error()) == errc::not_granted);
  auto gone = t.detach(a1);
  REQUIRE(gone);
  CHECK(gone->object == 9);
  CHECK(gone->write);
  CHECK(gone->peer.pid == 2);
  CHECK(gone->device == 0);
  CHECK_FALSE(t.detach(a1));
  CHECK(t.check(token, them, false, 1000));
  CHECK(t.attachments_of(9).size() == 1);
}

TEST_CASE("attachments outlive their export; exports go with their object",
          "[objects][share]") {
  share_table t;
  auto k1 = t.add_export(5, "a", {});
  auto k2 = t.add_export(5, "a", {});
  auto k3 = t.add_export(6, "a", {});
  CHECK(k1 != k2);
  CHECK(t.exports_of(5) == 2);
  auto id = t.attach(k1, 5, peer(1, 0), false, -1);
  CHECK(t.revoke(k1, ""));
  CHECK(t.attached_to(5) == 1);
  CHECK(t.object_gone(5) == 1);
  CHECK(t.exports_of(5) == 0);
  CHECK(t.find_export(k3) != nullptr);
  auto a = t.detach(id);
  REQUIRE(a);
  CHECK(a->device == -1);
  CHECK(t.attachments() == 0);
}

TEST_CASE("a snapshot of a host copy is sealed against writes",
          "[objects][share]") {
  std::vector<float> x{1, 2, 3, 4, 5};
  auto fd =
      objects::sealed_snapshot(x.data(), x.size() * sizeof(float), "test");
  REQUIRE(fd);
  auto bytes = x.size() * sizeof(float);
  auto* ro = static_cast<const float*>(
      ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, *fd, 0));
  REQUIRE(ro != MAP_FAILED);
  CHECK(ro[4] == 5.0f);
  ::munmap(const_cast<float*>(ro), bytes);
  // Neither a writable shared mapping nor write(2) gets through.
  errno = 0;
  CHECK(::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, *fd, 0) ==
        MAP_FAILED);
  CHECK(errno == EPERM);
  float y = 9;
  CHECK(::pwrite(*fd, &y, sizeof y, 0) < 0);
  CHECK(::ftruncate(*fd, 0) < 0);
  ::close(*fd);
}
