// Accounting alone: charges on placement, refunds on leaving, charges
// stranded on a lost device until it is reset, and new terms that keep
// what is in use. No actors.
#include <catch2/catch.hpp>

#include <vector>

#include "actors/balancer/accounting.hpp"
#include "messages/errc.hpp"
#include "tests/sizes.hpp"

using namespace cohort;
using namespace cohort::actors::balancer;

namespace {

using test::MiB;

// cpu0 (not metered), sim0 and sim1 (100 MiB each); tenant a may take 60
// MiB of sim0, b has no quota.
quota_lease accounting_lease() {
  quota_lease l;
  l.devices = {{"cpu0", false, 0, 0},
               {"sim0", true, 100 * MiB, 100 * MiB},
               {"sim1", true, 100 * MiB, 100 * MiB}};
  tenant_policy a;
  a.tenant = "a";
  a.kernels.all = true;
  a.device_mask = 0b111;
  a.device_quota = {0, 60 * MiB, 0};
  a.device_reserve = {0, 0, 0};
  tenant_policy b = a;
  b.tenant = "b";
  b.device_quota = {0, 0, 0};
  l.policies = {a, b};
  return l;
}

std::vector<charge> one(int t, uint64_t bytes) {
  return {charge{t, bytes}};
}

} // namespace

TEST_CASE("placing charges the device and leaving refunds it",
          "[actors][balancer][accounting]") {
  accounting acct{accounting_lease()};
  CHECK_FALSE(acct.metered(0));
  CHECK(acct.metered(1));
  CHECK_FALSE(acct.metered(7));
  CHECK(acct.metered_mask() == 0b110);
  CHECK_FALSE(acct.check(one(0, 60 * MiB), 1));
  acct.charge_to(one(0, 40 * MiB), 1);
  CHECK(acct.book().placed(1) == 40 * MiB);
  CHECK(acct.book().memory(0) == 40 * MiB);
  // a's quota on sim0 is 60 MiB: 40 + 30 is over it.
  CHECK(code_of(acct.check(one(0, 30 * MiB), 1)) == errc::over_memory_quota);
  // Another device is a separate matter.
  CHECK_FALSE(acct.check(one(0, 30 * MiB), 2));
  acct.refund(one(0, 40 * MiB), 1);
  CHECK(acct.book().placed(1) == 0);
  CHECK_FALSE(acct.check(one(0, 60 * MiB), 1));
}

TEST_CASE("a merged launch is checked and charged member by member",
          "[actors][balancer][accounting]") {
  accounting acct{accounting_lease()};
  std::vector<charge> merged{{0, 20 * MiB}, {1, 50 * MiB}, {0, 20 * MiB}};
  CHECK_FALSE(acct.check(merged, 1));
  acct.charge_to(merged, 1);
  CHECK(acct.book().memory(0) == 40 * MiB);
  CHECK(acct.book().memory(1) == 50 * MiB);
  // One more member of a's over its quota refuses the whole launch.
  merged.push_back({0, 21 * MiB});
  acct.refund(std::span(merged).first(3), 1);
  CHECK(code_of(acct.check(merged, 1)) == errc::over_memory_quota);
  // The device's whole memory: b alone may not take more than 100 MiB.
  CHECK(code_of(acct.check(one(1, 101 * MiB), 2)) == errc::out_of_memory);
}

TEST_CASE("charges stranded on a lost device stay until it is released",
          "[actors][balancer][accounting]") {
  accounting acct{accounting_lease()};
  std::vector<charge> held{{0, 30 * MiB}, {1, 0}};
  // The items move on: their charge leaves the device they were placed on,
  // but its pool keeps their blocks until a reset.
  acct.charge_to(held, 1);
  acct.refund(held, 1);
  acct.strand(held, 1);
  CHECK(acct.stranded(1) == 30 * MiB);
  CHECK(acct.book().placed(1) == 30 * MiB);
  // a may take only what its quota leaves beside the stranded blocks.
  CHECK(code_of(acct.check(one(0, 31 * MiB), 1)) == errc::over_memory_quota);
  // CPU workers hold no device memory: nothing strands there.
  acct.strand(held, 0);
  CHECK(acct.stranded(0) == 0);
  acct.release(1);
  CHECK(acct.stranded(1) == 0);
  CHECK(acct.book().placed(1) == 0);
  CHECK_FALSE(acct.check(one(0, 60 * MiB), 1));
  // Releasing twice, or a device that does not exist, changes nothing.
  acct.release(1);
  acct.release(9);
  CHECK(acct.book().placed(1) == 0);
}

TEST_CASE("new terms keep what is in use and what is stranded",
          "[actors][balancer][accounting]") {
  accounting acct{accounting_lease()};
  acct.charge_to(one(0, 20 * MiB), 1);
  acct.strand(one(0, 10 * MiB), 2);
  auto tighter = accounting_lease();
  tighter.policies[0].device_quota = {0, 25 * MiB, 0};
  REQUIRE(acct.renew(tighter));
  CHECK(acct.lease().policies[0].device_quota[1] == 25 * MiB);
  CHECK(acct.metered_mask() == 0b110);
  CHECK(acct.book().placed(1) == 20 * MiB);
  CHECK(acct.stranded(2) == 10 * MiB);
  CHECK(code_of(acct.check(one(0, 6 * MiB), 1)) == errc::over_memory_quota);
  acct.release(2);
  CHECK(acct.book().placed(2) == 0);
  // Other tenants or another fleet: refused, nothing changes.
  auto renamed = accounting_lease();
  renamed.policies[1].tenant = "c";
  CHECK_FALSE(acct.renew(renamed));
  auto smaller = accounting_lease();
  smaller.devices.pop_back();
  CHECK_FALSE(acct.renew(smaller));
  CHECK(acct.book().tenant_index("b") == 1);
  CHECK(acct.lease().policies[0].device_quota[1] == 25 * MiB);
}

TEST_CASE("a device added keeps what is in use and stranded; a lease that "
          "does not fit changes nothing",
          "[actors][balancer][accounting]") {
  accounting acct{accounting_lease()};
  acct.charge_to(one(0, 40 * MiB), 1);
  acct.strand(one(1, 10 * MiB), 2);
  auto next = accounting_lease();
  next.devices.push_back({"sim2", true, 50 * MiB, 50 * MiB});
  next.policies[0].device_mask = 0b1111;
  next.policies[0].device_quota.push_back(20 * MiB);
  next.policies[0].device_reserve.push_back(0);
  // b's grant does not name the new device.
  next.policies[1].device_quota.push_back(0);
  next.policies[1].device_reserve.push_back(0);
  // Another tenant order is refused, and nothing changes.
  auto swapped = next;
  std::swap(swapped.policies[0], swapped.policies[1]);
  CHECK(acct.add_device(swapped));
  CHECK(acct.lease().devices.size() == 3);
  CHECK(acct.metered_mask() == 0b110);
  REQUIRE_FALSE(acct.add_device(next));
  CHECK(acct.lease().devices.size() == 4);
  CHECK(acct.metered_mask() == 0b1110);
  // Use so far and what is stranded carry over; the new device is empty.
  CHECK(acct.book().placed(1) == 40 * MiB);
  CHECK(acct.book().memory(0) == 40 * MiB);
  CHECK(acct.stranded(2) == 10 * MiB);
  CHECK(acct.stranded(3) == 0);
  // a may use 20 MiB of it, b none of it.
  CHECK_FALSE(acct.check(one(0, 20 * MiB), 3));
  CHECK(code_of(acct.check(one(0, 21 * MiB), 3)) == errc::over_memory_quota);
  CHECK((acct.book().policy(1).device_mask >> 3 & 1) == 0);
  acct.charge_to(one(0, 20 * MiB), 3);
  CHECK(acct.book().placed(3) == 20 * MiB);
  acct.release(2);
  CHECK(acct.stranded(2) == 0);
}
