// The device-memory pool: a randomized run with its invariants checked on
// real memory, bad input, class caches, reservations, the release threshold,
// reuse in stream order, a reset, and the poison of free memory under ASan.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>

#include "devices/memory/asan_poison.hpp"
#include "devices/memory/host_slab_resource.hpp"
#include "devices/memory/pool_resource.hpp"
#include "devices/memory/virtual_resource.hpp"
#include "messages/errc.hpp"
#include "tests/sizes.hpp"

using namespace cohort;
using namespace cohort::devices::memory;

namespace {

using test::MiB;

owner_tag owner(std::string tenant = "t", uint64_t id = 0) {
  return {std::move(tenant), id, "test"};
}

// Fences that stay pending until the test says a stream has passed them;
// records every wait and zero fill.
class manual_streams final : public stream_ordering {
public:
  explicit manual_streams(uint32_t n) : passed_(n, 0), recorded_(n, 0) {}

  uint32_t streams() const override { return uint32_t(passed_.size()); }
  caf::expected<uint64_t> record(stream_ref s) override {
    return ++recorded_[s.index];
  }
  uint64_t recorded(stream_ref s) const override { return recorded_[s.index]; }
  bool reached(stream_ref s, uint64_t seq) override {
    return seq <= passed_[s.index];
  }
  caf::error wait(stream_ref waiter, stream_ref s, uint64_t seq) override {
    waits.push_back({waiter.index, s.index, seq});
    return caf::none;
  }
  caf::error zero(void*, size_t bytes, stream_ref) override {
    if (fail_zero)
      return make_error(errc::device_lost, "zero fill failed (test)");
    zeroed += bytes;
    return caf::none;
  }
  void reset() override {}

  /// Stream `s` has run everything recorded on it so far.
  void pass(uint32_t s) { passed_[s] = recorded_[s]; }

  struct wait_call {
    uint32_t waiter, stream;
    uint64_t seq;
  };
  std::vector<wait_call> waits;
  uint64_t zeroed = 0;
  bool fail_zero = false;

private:
  std::vector<uint64_t> passed_;
  std::vector<uint64_t> recorded_;
};

bool all_zero(const void* p, size_t n) {
  static const std::vector<unsigned char> zeros(64 * 1024, 0);
  auto* b = static_cast<const unsigned char*>(p);
  for (size_t at = 0; at < n; at += zeros.size())
    if (std::memcmp(b + at, zeros.data(), std::min(zeros.size(), n - at)) != 0)
      return false;
  return true;
}

} // namespace

TEST_CASE("a randomized pool keeps its invariants on real memory",
          "[devices][memory]") {
  host_slab_resource upstream{"host", 512 * MiB};
  host_stream_ordering streams{4, true};
  pool_options opts;
  opts.slab_bytes = 16 * MiB;
  opts.class_cache_bytes = 2 * MiB;
  pool_resource pool{upstream, streams, opts};
  std::mt19937_64 rng{GENERATE(1u, 2u, 3u)};
  struct block {
    void* p;
    size_t bytes;
    unsigned char fill;
  };
  std::vector<block> live;
  uint64_t requested = 0;
  auto random_size = [&]() -> size_t {
    switch (rng() % 4) {
    case 0:
      return 1 + rng() % 1024; // tiny
    case 1:
      return 1 + rng() % MiB; // small classes
    case 2:
      return MiB + rng() % (4 * MiB); // large
    default:
      return 1 + rng() % (64 * 1024);
    }
  };
  for (int op = 0; op < 4000; ++op) {
    bool alloc = live.empty() || rng() % 100 < 55;
    if (alloc) {
      auto bytes = random_size();
      stream_ref s{uint32_t(rng() % 4)};
      auto p = pool.allocate(bytes, s, owner("t", uint64_t(op)));
      if (!p) {
        // Only a full device may refuse.
        REQUIRE(code_of(p.error()) == errc::out_of_memory);
        continue;
      }
      REQUIRE(reinterpret_cast<uintptr_t>(*p) % block_alignment == 0);
      // Freed memory was zeroed before it came back.
      REQUIRE(all_zero(*p, bytes));
      auto fill = static_cast<unsigned char>(1 + op % 250);
      std::memset(*p, fill, bytes);
      live.push_back({*p, bytes, fill});
      requested += bytes;
    } else {
      auto i = size_t(rng() % live.size());
      auto b = live[i];
      // Nobody else wrote into it: blocks never overlap.
      auto* bytes = static_cast<unsigned char*>(b.p);
      REQUIRE(bytes[0] == b.fill);
      REQUIRE(bytes[b.bytes - 1] == b.fill);
      REQUIRE(bytes[b.bytes / 2] == b.fill);
      REQUIRE_FALSE(
          pool.deallocate(b.p, b.bytes, stream_ref{uint32_t(rng() % 4)}));
      live[i] = live.back();
      live.pop_back();
      requested -= b.bytes;
    }
    if (op % 97 == 0) {
      INFO("after operation " << op);
      REQUIRE(pool.check_invariants() == "");
      auto st = pool.stats();
      REQUIRE(st.live_blocks == live.size());
      REQUIRE(st.requested_bytes == requested);
      REQUIRE(st.held_bytes == upstream.used());
      REQUIRE(st.peak_live_bytes >= st.live_bytes);
    }
  }
  for (auto& b : live)
    REQUIRE_FALSE(pool.deallocate(b.p, b.bytes, stream_ref{0}));
  REQUIRE(pool.check_invariants() == "");
  // Everything freed and the caches flushed: each slab is one free block.
  pool.defragment();
  auto st = pool.stats();
  CHECK(st.live_bytes == 0);
  CHECK(st.cached_bytes == 0);
  CHECK(st.free_blocks == st.slabs);
  CHECK(st.allocations == st.deallocations);
  CHECK(pool.check_invariants() == "");
}

TEST_CASE("bad input to the pool gets clear errors and changes nothing",
          "[devices][memory]") {
  host_slab_resource upstream{"host", 64 * MiB};
  host_stream_ordering streams{2, true};
  pool_resource pool{upstream, streams, {}};
  auto p = pool.allocate(1000, stream_ref{0}, owner());
  REQUIRE(p);
  auto before = pool.stats();
  auto unchanged = [&] {
    auto now = pool.stats();
    CHECK(now.live_blocks == before.live_blocks);
    CHECK(now.requested_bytes == before.requested_bytes);
    CHECK(pool.check_invariants() == "");
  };
  SECTION("zero bytes") {
    auto z = pool.allocate(0, stream_ref{0}, owner());
    REQUIRE_FALSE(z);
    CHECK(code_of(z.error()) == errc::invalid_arguments);
    CHECK_THAT(describe(z.error()), Catch::Contains("0 bytes"));
  }
  SECTION("huge sizes") {
    for (uint64_t huge : {uint64_t{1} << 40, uint64_t{1} << 62, UINT64_MAX}) {
      auto h = pool.allocate(huge, stream_ref{0}, owner());
      REQUIRE_FALSE(h);
      CHECK(code_of(h.error()) == errc::out_of_memory);
      CHECK_THAT(describe(h.error()), Catch::Contains("bytes requested"));
    }
  }
  SECTION("a stream the device does not have") {
    auto s = pool.allocate(64, stream_ref{7}, owner());
    REQUIRE_FALSE(s);
    CHECK(code_of(s.error()) == errc::invalid_arguments);
  }
  SECTION("double free") {
    REQUIRE_FALSE(pool.deallocate(*p, 1000, stream_ref{0}));
    before = pool.stats();
    auto err = pool.deallocate(*p, 1000, stream_ref{0});
    CHECK(code_of(err) == errc::invalid_free);
    CHECK_THAT(describe(err), Catch::Contains("double free"));
  }
  SECTION("foreign pointers") {
    int on_stack = 0;
    CHECK(code_of(pool.deallocate(&on_stack, 4, stream_ref{0})) ==
          errc::invalid_free);
    // Inside a live block, but not its start.
    CHECK(code_of(pool.deallocate(static_cast<char*>(*p) + 256, 256,
                                  stream_ref{0})) == errc::invalid_free);
  }
  SECTION("the wrong size") {
    auto err = pool.deallocate(*p, 999, stream_ref{0});
    CHECK(code_of(err) == errc::invalid_free);
    CHECK_THAT(describe(err), Catch::Contains("returned as 999"));
  }
  unchanged();
}

TEST_CASE("small blocks are reused from their class cache",
          "[devices][memory]") {
  virtual_resource upstream{"virtual", 1ull << 30};
  host_stream_ordering streams{1, false};
  pool_options opts;
  opts.class_cache_bytes = 4096;
  pool_resource pool{upstream, streams, opts};
  CHECK(pool.rounded_size(1) == 256);
  CHECK(pool.rounded_size(1025) == 1280);
  CHECK(pool.rounded_size(MiB) == MiB);
  CHECK(pool.rounded_size(MiB + 1) == MiB + 256);
  auto a = pool.allocate(1000, stream_ref{0}, owner());
  REQUIRE(a);
  REQUIRE_FALSE(pool.deallocate(*a, 1000, stream_ref{0}));
  auto b = pool.allocate(900, stream_ref{0}, owner());
  REQUIRE(b);
  CHECK(*b == *a); // same class (1024), straight from the cache
  CHECK(pool.stats().cache_hits == 1);
  // The cache holds at most 4 KiB; the rest coalesces at once.
  std::vector<void*> many;
  for (int i = 0; i < 8; ++i)
    many.push_back(*pool.allocate(1024, stream_ref{0}, owner()));
  for (auto* p : many)
    REQUIRE_FALSE(pool.deallocate(p, 1024, stream_ref{0}));
  CHECK(pool.stats().cached_bytes == 4096);
  CHECK(pool.check_invariants() == "");
}

TEST_CASE("a reservation keeps its bytes for its tenant", "[devices][memory]") {
  virtual_resource upstream{"virtual", 64 * MiB};
  host_stream_ordering streams{1, false};
  pool_options opts;
  opts.slab_bytes = 16 * MiB;
  pool_resource pool{upstream, streams, opts};
  REQUIRE_FALSE(pool.reserve("a", 40 * MiB));
  CHECK(pool.stats().held_bytes >= 40 * MiB);
  CHECK(pool.stats().reserved_bytes == 40 * MiB);
  // b may use what is left of the device, not a's 40 MiB.
  auto b = pool.allocate(20 * MiB, stream_ref{0}, owner("b"));
  REQUIRE(b);
  auto b2 = pool.allocate(8 * MiB, stream_ref{0}, owner("b"));
  REQUIRE_FALSE(b2);
  CHECK(code_of(b2.error()) == errc::out_of_memory);
  CHECK_THAT(describe(b2.error()), Catch::Contains("reserved for other"));
  // a draws on its reservation.
  auto a = pool.allocate(30 * MiB, stream_ref{0}, owner("a"));
  REQUIRE(a);
  CHECK(pool.stats().reserved_bytes == 10 * MiB);
  REQUIRE_FALSE(pool.deallocate(*a, 30 * MiB, stream_ref{0}));
  CHECK(pool.stats().reserved_bytes == 40 * MiB);
  // A reservation the device cannot meet fails and leaves the old one.
  CHECK(code_of(pool.reserve("a", 60 * MiB)) == errc::out_of_memory);
  CHECK(pool.reservation("a") == 40 * MiB);
  REQUIRE_FALSE(pool.reserve("a", 0));
  CHECK(pool.stats().reserved_bytes == 0);
  CHECK(pool.allocate(8 * MiB, stream_ref{0}, owner("b")));
  CHECK(pool.check_invariants() == "");
}

TEST_CASE("trimming keeps only the release threshold of free slabs",
          "[devices][memory]") {
  virtual_resource upstream{"virtual", 1ull << 30};
  host_stream_ordering streams{1, false};
  pool_options opts;
  opts.slab_bytes = 8 * MiB;
  opts.release_threshold = 16 * MiB;
  pool_resource pool{upstream, streams, opts};
  std::vector<void*> blocks;
  for (int i = 0; i < 6; ++i)
    blocks.push_back(*pool.allocate(8 * MiB, stream_ref{0}, owner()));
  CHECK(pool.stats().slabs == 6);
  for (auto* p : blocks)
    REQUIRE_FALSE(pool.deallocate(p, 8 * MiB, stream_ref{0}));
  CHECK(pool.trim() == 32 * MiB);
  CHECK(pool.stats().held_bytes == 16 * MiB);
  CHECK(upstream.used() == 16 * MiB);
  CHECK(pool.stats().slab_releases == 4);
  CHECK(pool.check_invariants() == "");
}

TEST_CASE("freed memory is reused in stream order", "[devices][memory]") {
  virtual_resource upstream{"virtual", 1ull << 30};
  manual_streams streams{2};
  pool_options opts;
  opts.slab_bytes = 8 * MiB;
  opts.release_threshold = 0;
  pool_resource pool{upstream, streams, opts};
  auto p = pool.allocate(2 * MiB, stream_ref{0}, owner());
  REQUIRE(p);
  REQUIRE_FALSE(pool.deallocate(*p, 2 * MiB, stream_ref{0}));
  // Zeroed on the stream it was freed on.
  CHECK(streams.zeroed == 2 * MiB);
  SECTION("the same stream reuses it without waiting") {
    auto q = pool.allocate(2 * MiB, stream_ref{0}, owner());
    REQUIRE(q);
    CHECK(*q == *p);
    CHECK(streams.waits.empty());
  }
  SECTION("another stream waits for the fence, on the device") {
    auto q = pool.allocate(2 * MiB, stream_ref{1}, owner());
    REQUIRE(q);
    CHECK(*q == *p);
    REQUIRE(streams.waits.size() == 1);
    CHECK(streams.waits[0].waiter == 1);
    CHECK(streams.waits[0].stream == 0);
    CHECK(pool.stats().cross_stream_waits == 1);
  }
  SECTION("once the stream passed the fence, nobody waits") {
    auto q = pool.allocate(2 * MiB, stream_ref{1}, owner()); // records it
    REQUIRE_FALSE(pool.deallocate(*q, 2 * MiB, stream_ref{1}));
    streams.pass(0);
    streams.pass(1);
    streams.waits.clear();
    // Fence of stream 1 not recorded yet: trimming records it and waits.
    CHECK(pool.trim() == 0);
    streams.pass(1);
    CHECK(pool.trim() == 8 * MiB);
    CHECK(streams.waits.empty());
  }
  CHECK(pool.check_invariants() == "");
}

TEST_CASE("a pool made on a used device continues its fence numbers",
          "[devices][memory]") {
  virtual_resource upstream{"virtual", 1ull << 30};
  manual_streams streams{2};
  for (int i = 0; i < 5; ++i)
    REQUIRE(streams.record(stream_ref{0}));
  pool_resource pool{upstream, streams, {}};
  auto p = pool.allocate(MiB, stream_ref{0}, owner());
  REQUIRE(p);
  REQUIRE_FALSE(pool.deallocate(*p, MiB, stream_ref{0}));
  REQUIRE(pool.allocate(MiB, stream_ref{1}, owner()));
  // Fences 1 to 5 were passed long ago; the wait is for the 6th.
  REQUIRE(streams.waits.size() == 1);
  CHECK(streams.waits[0].seq == 6);
}

TEST_CASE("an upstream's own error is passed on, not called out of memory",
          "[devices][memory]") {
  struct lost_upstream final : memory_resource {
    caf::expected<void*> do_allocate(size_t, stream_ref,
                                     const owner_tag&) override {
      ++calls;
      return make_error(errc::device_lost, "the context is gone (test)");
    }
    caf::error do_deallocate(void*, size_t, stream_ref) override {
      return caf::none;
    }
    int calls = 0;
  } upstream;
  host_stream_ordering streams{1, false};
  pool_resource pool{upstream, streams, {}};
  auto p = pool.allocate(4096, stream_ref{0}, owner());
  REQUIRE_FALSE(p);
  CHECK(code_of(p.error()) == errc::device_lost);
  // No second try at another size for a device that is gone.
  CHECK(upstream.calls == 1);
}

TEST_CASE("a block whose zero fill failed is never handed out again",
          "[devices][memory]") {
  virtual_resource upstream{"virtual", 1ull << 30};
  manual_streams streams{1};
  pool_resource pool{upstream, streams, {}};
  auto p = pool.allocate(8192, stream_ref{0}, owner("a"));
  REQUIRE(p);
  streams.fail_zero = true;
  auto err = pool.deallocate(*p, 8192, stream_ref{0});
  CHECK(code_of(err) == errc::device_lost);
  streams.fail_zero = false;
  CHECK(pool.stats().quarantined_bytes == 8192);
  CHECK(pool.stats().live_blocks == 0);
  CHECK(pool.check_invariants() == "");
  // The same class again: not the unzeroed block.
  auto q = pool.allocate(8192, stream_ref{0}, owner("b"));
  REQUIRE(q);
  CHECK(*q != *p);
  CHECK(pool.reset(false) == 1);
  CHECK(pool.stats().quarantined_bytes == 0);
}

TEST_CASE("a reset forgets every block", "[devices][memory]") {
  virtual_resource upstream{"virtual", 1ull << 30};
  host_stream_ordering streams{1, false};
  pool_resource pool{upstream, streams, {}};
  for (int i = 0; i < 10; ++i)
    REQUIRE(pool.allocate(3000, stream_ref{0}, owner()));
  SECTION("memory gone with the device context") {
    CHECK(pool.reset(true) == 10);
    CHECK(upstream.used() > 0); // nothing was given back
  }
  SECTION("memory given back") {
    CHECK(pool.reset(false) == 10);
    CHECK(upstream.used() == 0);
  }
  CHECK(pool.stats().held_bytes == 0);
  CHECK(pool.stats().live_blocks == 0);
  CHECK(pool.allocate(3000, stream_ref{0}, owner()));
  CHECK(pool.check_invariants() == "");
}

TEST_CASE("under AddressSanitizer a simulated GPU's free memory is poisoned",
          "[devices][memory]") {
  if (!asan_enabled) {
    WARN("SKIPPED ASan: not an AddressSanitizer build (./dev.sh sanitize)");
    return;
  }
  host_slab_resource upstream{"host", 64 * MiB};
  host_stream_ordering streams{1, true};
  pool_resource pool{upstream, streams, {}};
  auto a = pool.allocate(1000, stream_ref{0}, owner());
  auto b = pool.allocate(1000, stream_ref{0}, owner());
  REQUIRE(a);
  REQUIRE(b);
  auto* pa = static_cast<unsigned char*>(*a);
  auto* pb = static_cast<unsigned char*>(*b);
  // The block itself is usable, its rounding and what lies between the two
  // blocks are not.
  CHECK_FALSE(asan_is_poisoned(pa));
  CHECK_FALSE(asan_is_poisoned(pa + 999));
  CHECK(asan_is_poisoned(pa + 1000));
  auto lo = std::min(pa, pb) + 1000;
  CHECK(asan_is_poisoned(lo));
  CHECK_FALSE(asan_is_poisoned(std::max(pa, pb)));
  // A freed block is poisoned again (after its zero fill), a reused one not.
  REQUIRE_FALSE(pool.deallocate(*a, 1000, stream_ref{0}));
  CHECK(asan_is_poisoned(pa));
  auto c = pool.allocate(500, stream_ref{0}, owner());
  REQUIRE(c);
  CHECK_FALSE(asan_is_poisoned(static_cast<unsigned char*>(*c) + 499));
  CHECK(asan_is_poisoned(static_cast<unsigned char*>(*c) + 500));
  REQUIRE_FALSE(pool.deallocate(*b, 1000, stream_ref{0}));
  REQUIRE_FALSE(pool.deallocate(*c, 500, stream_ref{0}));
  // Given back upstream, the slab carries no poison into a later mapping.
  pool.reset(false);
  CHECK(upstream.used() == 0);
}

TEST_CASE("under AddressSanitizer a write past a simulated GPU's block "
          "is caught",
          "[devices][memory]") {
  if (!asan_enabled) {
    WARN("SKIPPED ASan: not an AddressSanitizer build (./dev.sh sanitize)");
    return;
  }
  std::string cmd = std::string{COHORT_ASAN_OVERFLOW} + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  std::string out;
  char buf[4096];
  while (auto n = std::fread(buf, 1, sizeof buf, p))
    out.append(buf, n);
  int rc = ::pclose(p);
  INFO(out);
  CHECK(rc != 0);
  CHECK(out.find("AddressSanitizer: use-after-poison") != std::string::npos);
  CHECK(out.find("overflow not caught") == std::string::npos);
}
