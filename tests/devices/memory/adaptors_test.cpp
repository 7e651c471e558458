// The adaptors over any resource (limiting, tracking, statistics, fault
// injection), the shared tenant ledger, and one device's composed stack.
#include <catch2/catch.hpp>

#include <thread>

#include "devices/memory/device_memory.hpp"
#include "devices/memory/host_slab_resource.hpp"
#include "devices/memory/virtual_resource.hpp"
#include "messages/errc.hpp"
#include "tests/sizes.hpp"

using namespace cohort;
using namespace cohort::devices::memory;

namespace {

using test::MiB;

owner_tag gemv_owner(std::string tenant, uint64_t id = 0) {
  return {std::move(tenant), id, "gemv"};
}

std::unique_ptr<device_memory> make_stack(std::string name, uint64_t capacity,
                                          memory_options opts = {}) {
  auto m = device_memory::make(
      name, true, capacity, std::make_unique<virtual_resource>(name, capacity),
      std::make_unique<host_stream_ordering>(2, false), std::move(opts));
  REQUIRE(m);
  return std::move(*m);
}

} // namespace

TEST_CASE("the limiting adaptor refuses past the device limit and quotas",
          "[devices][memory]") {
  memory_options opts;
  opts.limit = 10 * MiB;
  opts.tenant_limits["small"] = 2 * MiB;
  auto m = make_stack("simL", 64 * MiB, opts);
  auto a = m->allocate(2 * MiB, stream_ref{0}, gemv_owner("small"));
  REQUIRE(a);
  auto b = m->allocate(1, stream_ref{0}, gemv_owner("small"));
  REQUIRE_FALSE(b);
  CHECK(code_of(b.error()) == errc::over_memory_quota);
  CHECK_THAT(describe(b.error()), Catch::Contains("quota on this device"));
  auto big = m->allocate(9 * MiB, stream_ref{0}, gemv_owner("other"));
  REQUIRE_FALSE(big);
  CHECK(code_of(big.error()) == errc::memory_limit);
  CHECK(m->allocate(8 * MiB, stream_ref{0}, gemv_owner("other")));
  auto s = m->snapshot();
  CHECK(s.used == 10 * MiB);
  CHECK(s.used_by_tenant["small"] == 2 * MiB);
  CHECK(s.refused["memory_limit"] == 1);
  CHECK(s.refused["over_memory_quota"] == 1);
  // Freeing makes room again.
  REQUIRE_FALSE(m->deallocate(*a, 2 * MiB, stream_ref{0}));
  CHECK(m->allocate(2 * MiB, stream_ref{1}, gemv_owner("small")));
}

TEST_CASE("a tenant's global quota holds across devices and threads",
          "[devices][memory]") {
  auto ledger = std::make_shared<tenant_ledger>(
      std::map<std::string, uint64_t>{{"t", 10 * MiB}, {"free", 0}});
  memory_options opts;
  opts.ledger = ledger;
  auto d0 = make_stack("sim0", 64 * MiB, opts);
  auto d1 = make_stack("sim1", 64 * MiB, opts);
  // Unknown tenants are refused when a ledger is in place.
  auto who = d0->allocate(1, stream_ref{0}, gemv_owner("mallory"));
  REQUIRE_FALSE(who);
  CHECK(code_of(who.error()) == errc::unknown_tenant);
  // Two devices race on one quota from two threads.
  std::atomic<uint64_t> got{0};
  auto worker = [&](device_memory& m) {
    for (int i = 0; i < 200; ++i)
      if (m.allocate(MiB / 4, stream_ref{0}, gemv_owner("t")))
        got += MiB / 4;
  };
  std::thread t0{worker, std::ref(*d0)}, t1{worker, std::ref(*d1)};
  t0.join();
  t1.join();
  CHECK(got == 10 * MiB);
  CHECK(ledger->used(ledger->slot("t")) == 10 * MiB);
  CHECK(d0->snapshot().used + d1->snapshot().used == 10 * MiB);
  // A reset refunds the ledger.
  d0->reset(false);
  CHECK(ledger->used(ledger->slot("t")) == d1->snapshot().used);
  CHECK(d0->allocate(MiB, stream_ref{0}, gemv_owner("free")));
}

TEST_CASE("tracking names the owners of what is still held",
          "[devices][memory]") {
  auto m = make_stack("simT", 64 * MiB);
  auto a = m->allocate(4096, stream_ref{0}, gemv_owner("alice", 7));
  auto b = m->allocate(8192, stream_ref{1}, gemv_owner("bob", 9));
  REQUIRE(a);
  REQUIRE(b);
  auto live = m->tracking().live();
  REQUIRE(live.size() == 2);
  CHECK(live[0].owner.tenant == "alice");
  CHECK(live[0].owner.work_id == 7);
  CHECK(live[1].bytes == 8192);
  auto report = m->snapshot().leak_report;
  CHECK_THAT(report, Catch::Contains("2 allocation(s), 12288 bytes"));
  CHECK_THAT(report, Catch::Contains("tenant 'bob', work 9 (gemv)"));
  // A double free is stopped by the tracker, before the pool.
  REQUIRE_FALSE(m->deallocate(*a, 4096, stream_ref{0}));
  auto err = m->deallocate(*a, 4096, stream_ref{0});
  CHECK(code_of(err) == errc::invalid_free);
  CHECK(m->snapshot().invalid_frees == 1);
  CHECK(m->pool().check_invariants() == "");
  REQUIRE_FALSE(m->deallocate(*b, 8192, stream_ref{1}));
  CHECK(m->snapshot().leak_report.empty());
  auto s = m->snapshot();
  CHECK(s.allocations == 2);
  CHECK(s.deallocations == 2);
  CHECK(s.used == 0);
  CHECK(s.peak_used == 12288);
}

TEST_CASE("injected allocation faults are hard OOM and reproducible",
          "[devices][memory]") {
  auto m = make_stack("simF", 64 * MiB);
  m->faults().fail_next(2);
  for (int i = 0; i < 2; ++i) {
    auto p = m->allocate(100, stream_ref{0}, gemv_owner("t"));
    REQUIRE_FALSE(p);
    CHECK(code_of(p.error()) == errc::out_of_memory);
    CHECK_THAT(describe(p.error()), Catch::Contains("injected"));
  }
  CHECK(m->allocate(100, stream_ref{0}, gemv_owner("t")));
  m->faults().fail_above(MiB);
  CHECK_FALSE(m->allocate(2 * MiB, stream_ref{0}, gemv_owner("t")));
  CHECK(m->allocate(MiB, stream_ref{0}, gemv_owner("t")));
  m->faults().clear();
  auto pattern = [&](uint64_t seed) {
    m->faults().fail_randomly(0.3, seed);
    std::string out;
    for (int i = 0; i < 64; ++i) {
      auto p = m->allocate(256, stream_ref{0}, gemv_owner("t"));
      out += p ? '.' : 'x';
      if (p)
        REQUIRE_FALSE(m->deallocate(*p, 256, stream_ref{0}));
    }
    return out;
  };
  auto first = pattern(42);
  CHECK(first == pattern(42));
  CHECK(first.find('x') != std::string::npos);
  CHECK(first.find('.') != std::string::npos);
  m->faults().clear();
  CHECK(m->snapshot().injected_failures ==
        3 + uint64_t(std::count(first.begin(), first.end(), 'x')) * 2);
  CHECK(m->snapshot().refused["out_of_memory"] ==
        m->snapshot().injected_failures);
}

TEST_CASE("a device's memory stack fails fast on a reservation it cannot meet",
          "[devices][memory]") {
  memory_options opts;
  opts.reservations["big"] = 128 * MiB;
  auto m = device_memory::make(
      "simR", true, 64 * MiB,
      std::make_unique<virtual_resource>("simR", 64 * MiB),
      std::make_unique<host_stream_ordering>(1, false), opts);
  REQUIRE_FALSE(m);
  CHECK(code_of(m.error()) == errc::out_of_memory);
  CHECK_THAT(describe(m.error()), Catch::Contains("tenant 'big'"));
  memory_options bad;
  bad.pool.slab_bytes = 0;
  auto b = device_memory::make(
      "simB", true, 64 * MiB,
      std::make_unique<virtual_resource>("simB", 64 * MiB),
      std::make_unique<host_stream_ordering>(1, false), bad);
  REQUIRE_FALSE(b);
  CHECK(code_of(b.error()) == errc::invalid_arguments);
}
