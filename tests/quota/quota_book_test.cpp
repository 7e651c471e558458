// The quota model on its own: device-memory checks (per-device and global
// quotas, device limits, reservations), in-flight caps and rate limits with
// explicit clocks, items that can never fit, and headroom.
#include <catch2/catch.hpp>

#include "messages/errc.hpp"
#include "quota/quota_book.hpp"
#include "tests/sizes.hpp"

using namespace cohort;
using namespace cohort::quota;
using namespace std::chrono_literals;

namespace {

using test::MiB;

// cpu0, sim0 (100 MiB, whole), sim1 (100 MiB, limit 80 MiB).
quota_lease make_lease() {
  quota_lease l;
  l.devices = {{"cpu0", false, 0, 0},
               {"sim0", true, 100 * MiB, 100 * MiB},
               {"sim1", true, 100 * MiB, 80 * MiB}};
  tenant_policy a;
  a.tenant = "a";
  a.kernels.all = true;
  a.device_mask = 0b111;
  a.memory_quota = 120 * MiB;
  a.device_quota = {0, 60 * MiB, 0};
  a.device_reserve = {0, 0, 0};
  tenant_policy b = a;
  b.tenant.assign(1, 'b');
  b.memory_quota = 0;
  b.device_quota = {0, 0, 0};
  b.device_reserve = {0, 30 * MiB, 0};
  b.max_inflight = 2;
  l.policies = {a, b};
  return l;
}

} // namespace

TEST_CASE("the quota book checks device memory against every limit",
          "[actors][quota]") {
  quota_book book{make_lease()};
  auto a = book.tenant_index("a");
  auto b = book.tenant_index("b");
  REQUIRE(a == 0);
  REQUIRE(b == 1);
  CHECK(book.tenant_index("mallory") == -1);
  // CPU workers are not metered.
  CHECK_FALSE(book.check_place(a, 0, 1ull << 40));
  // a's quota on sim0 is 60 MiB.
  CHECK_FALSE(book.check_place(a, 1, 60 * MiB));
  auto q = book.check_place(a, 1, 61 * MiB);
  CHECK(code_of(q) == errc::over_memory_quota);
  CHECK_THAT(describe(q), Catch::Contains("its quota there is"));
  // b reserved 30 MiB of sim0: a may not take them. 100 - 30 = 70 left.
  book.charge(a, 1, 50 * MiB);
  auto full = book.check_place(b, 1, 51 * MiB);
  CHECK(code_of(full) == errc::out_of_memory); // the device's whole memory
  CHECK_FALSE(book.check_place(b, 1, 50 * MiB));
  auto res = book.check_place(a, 1, 10 * MiB + 1);
  CHECK(code_of(res) == errc::over_memory_quota); // its 60 MiB first
  book.charge(b, 1, 20 * MiB);
  // b drew 20 of its 30: a still may not pass 100 - 50 - 20 - 10 = 20.
  CHECK(code_of(book.check_place(a, 1, 10 * MiB + 1)) ==
        errc::over_memory_quota);
  // sim1's limit is 80 MiB of its 100 (a configured limit: soft).
  auto lim = book.check_place(b, 2, 81 * MiB);
  CHECK(code_of(lim) == errc::memory_limit);
  CHECK_THAT(describe(lim), Catch::Contains("would pass its limit"));
  // a's global quota is 120 MiB: 50 on sim0 leaves 70.
  CHECK_FALSE(book.check_place(a, 2, 70 * MiB));
  CHECK(code_of(book.check_place(a, 2, 70 * MiB + 1)) ==
        errc::over_memory_quota);
  // Refunds restore exactly.
  book.refund(a, 1, 50 * MiB);
  book.refund(b, 1, 20 * MiB);
  CHECK(book.placed(1) == 0);
  CHECK_FALSE(book.check_place(b, 1, 100 * MiB));
  CHECK(code_of(book.check_place(a, 1, 60 * MiB + 1)) ==
        errc::over_memory_quota);
}

TEST_CASE("memory held outside the runtime counts against a tenant's quota",
          "[actors][quota]") {
  quota_book book{make_lease()};
  auto a = book.tenant_index("a");
  auto b = book.tenant_index("b");
  // a's quota across devices is 120 MiB: programs of cohort exec hold 100.
  CHECK_FALSE(book.charge_outside(a, 100 * MiB));
  CHECK(book.outside(a) == 100 * MiB);
  CHECK(book.memory(a) == 100 * MiB);
  auto over = book.charge_outside(a, 21 * MiB);
  CHECK(code_of(over) == errc::over_memory_quota);
  CHECK_THAT(describe(over), Catch::Contains("its quota is 125829120 bytes"));
  CHECK(code_of(book.charge_outside(a, UINT64_MAX)) == errc::over_memory_quota);
  // Items see what is left: 20 MiB.
  CHECK_FALSE(book.check_place(a, 1, 20 * MiB));
  CHECK(code_of(book.check_place(a, 1, 20 * MiB + 1)) ==
        errc::over_memory_quota);
  // No quota, no limit; on no device.
  CHECK_FALSE(book.charge_outside(b, uint64_t{1} << 40));
  CHECK(book.placed(1) == 0);
  // It carries over a new lease (usage copied), and refunds restore it.
  quota_book next{make_lease()};
  next.set_usage(book.usage());
  CHECK(next.outside(a) == 100 * MiB);
  next.refund_outside(a, 100 * MiB);
  CHECK(next.memory(a) == 0);
  CHECK(next.outside(a) == 0);
  // More refunded than held is held to what was held.
  next.refund_outside(a, MiB);
  CHECK(next.memory(a) == 0);
}

TEST_CASE("the quota book says when an item can never fit", "[actors][quota]") {
  auto lease = make_lease();
  lease.policies[0].max_item_bytes = 10 * MiB;
  quota_book book{lease};
  auto per_item = book.check_ever(0, 11 * MiB, 0b110);
  CHECK(code_of(per_item) == errc::over_memory_quota);
  CHECK_THAT(describe(per_item), Catch::Contains("per item"));
  // b: sim0 idle holds 100 MiB, sim1 80 MiB; 101 MiB fits neither.
  auto never = book.check_ever(1, 101 * MiB, 0b110);
  CHECK(code_of(never) == errc::over_memory_quota);
  CHECK_THAT(describe(never), Catch::Contains("can ever hold"));
  // With a CPU worker in the mask it could still run there, but only for a
  // tenant whose policy falls back to the CPU.
  CHECK(book.check_ever(1, 101 * MiB, 0b111));
  lease.policies[1].on_limit = limit_policy::cpu_fallback;
  quota_book fallback{lease};
  CHECK_FALSE(fallback.check_ever(1, 101 * MiB, 0b111));
  // A grant without device memory takes any size.
  CHECK_FALSE(book.check_ever(1, 1ull << 40, 0b001));
}

TEST_CASE("the quota book caps items in flight and paces a rate",
          "[actors][quota]") {
  auto lease = make_lease();
  lease.max_inflight = 3;
  lease.policies[0].rate = 10;
  lease.policies[0].burst = 2;
  quota_book book{lease};
  auto t0 = quota_book::clock::time_point{} + 1h;
  // b: at most 2 in flight.
  book.admit(1, t0);
  book.admit(1, t0);
  auto cap = book.check_admit(1, t0);
  CHECK(code_of(cap) == errc::over_inflight_quota);
  CHECK_THAT(describe(cap), Catch::Contains("its limit is 2"));
  // a: a burst of 2, then one every 100 ms; the runtime holds 3 at most.
  CHECK_FALSE(book.check_admit(0, t0));
  book.admit(0, t0);
  auto total = book.check_admit(0, t0);
  CHECK(code_of(total) == errc::over_inflight_quota);
  CHECK_THAT(describe(total), Catch::Contains("the runtime has 3"));
  book.end(1);
  book.end(1);
  CHECK_FALSE(book.check_admit(0, t0));
  book.admit(0, t0);
  auto rate = book.check_admit(0, t0);
  CHECK(code_of(rate) == errc::over_rate_limit);
  CHECK(book.next_token(0, t0) - t0 > 90ms);
  CHECK(book.next_token(0, t0) - t0 <= 100ms);
  CHECK(code_of(book.check_admit(0, t0 + 50ms)) == errc::over_rate_limit);
  CHECK_FALSE(book.check_admit(0, t0 + 101ms));
}

TEST_CASE("headroom is what a tenant could still place, now and idle",
          "[actors][quota]") {
  quota_book book{make_lease()};
  book.charge(0, 1, 40 * MiB);
  book.charge(1, 2, 50 * MiB);
  auto h = book.headroom(0);
  CHECK(h.tenant == "a");
  CHECK(h.memory == 40 * MiB);
  CHECK(h.memory_quota == 120 * MiB);
  CHECK(h.cpu_workers == 1);
  REQUIRE(h.devices.size() == 2);
  CHECK(h.devices[0].device == "sim0");
  // min(quota 60 - 40, device 100 - 40 - b's 30 reserved, global 80).
  CHECK(h.devices[0].headroom == 20 * MiB);
  CHECK(h.devices[0].ceiling == 60 * MiB);
  // sim1: limit 80 - 50 in use = 30, global 120 - 40 = 80.
  CHECK(h.devices[1].headroom == 30 * MiB);
  CHECK(h.devices[1].ceiling == 80 * MiB);
  // The usage survives a copy: headroom and dry runs work on one.
  quota_book copy{make_lease()};
  copy.set_usage(book.usage());
  CHECK(copy.headroom(0).devices[0].headroom == 20 * MiB);
  CHECK(copy.placed(2) == 50 * MiB);
}

TEST_CASE("a device added to the book keeps everything in use",
          "[actors][quota]") {
  auto lease = make_lease();
  lease.policies[0].rate = 10;
  lease.policies[0].burst = 1;
  quota_book book{lease};
  auto t0 = quota_book::clock::time_point{} + 1h;
  book.charge(0, 1, 40 * MiB);
  book.admit(0, t0);
  book.admit(1, t0);
  // The lease for the fleet with sim2: a grants it (a "*" or "sim" grant),
  // with a quota there; b (a grant by names) does not.
  auto next = make_lease();
  next.devices.push_back({"sim2", true, 50 * MiB, 50 * MiB});
  next.policies[0].device_mask = 0b1111;
  next.policies[0].device_quota.push_back(10 * MiB);
  next.policies[0].device_reserve.push_back(0);
  next.policies[1].device_quota.push_back(0);
  next.policies[1].device_reserve.push_back(0);
  // Refused: two devices more, a grant that changed, other tenants.
  auto two = next;
  two.devices.push_back({"sim3", true, 50 * MiB, 50 * MiB});
  CHECK(code_of(book.add_device(two)) == errc::invalid_arguments);
  auto changed = next;
  changed.policies[1].device_mask = 0b001;
  CHECK(code_of(book.add_device(changed)) == errc::invalid_arguments);
  auto others = next;
  others.policies[1].tenant = "c";
  CHECK(code_of(book.add_device(others)) == errc::invalid_arguments);
  REQUIRE(book.devices().size() == 3);

  REQUIRE_FALSE(book.add_device(next));
  REQUIRE(book.devices().size() == 4);
  CHECK(book.devices()[3].name == "sim2");
  CHECK(book.policy(0).device_mask == 0b1111);
  CHECK(book.policy(1).device_mask == 0b111);
  // What was in use, in flight and the rate tokens stay.
  CHECK(book.memory(0) == 40 * MiB);
  CHECK(book.placed(1) == 40 * MiB);
  CHECK(code_of(book.check_admit(0, t0)) == errc::over_rate_limit);
  // The new device: a's quota there holds.
  CHECK_FALSE(book.check_place(0, 3, 10 * MiB));
  CHECK(code_of(book.check_place(0, 3, 11 * MiB)) == errc::over_memory_quota);
  book.charge(0, 3, 10 * MiB);
  CHECK(book.placed(3) == 10 * MiB);
  CHECK(book.memory(0) == 50 * MiB);
  auto h = book.headroom(0);
  REQUIRE(h.devices.size() == 3);
  CHECK(h.devices[2].device == "sim2");
  CHECK(book.headroom(1).devices.size() == 2);
  CHECK(book.usage().tenants.size() == 2);
}
