// cohort watch's frames (tools/watch_command.hpp) from looks made up here:
// rates and busy shares come from two looks, alerts say for how long.
#include <catch2/catch.hpp>

#include "tests/temp_dir.hpp"
#include "tools/watch_command.hpp"

using namespace cohort;
using namespace std::chrono_literals;

namespace {

using test::has;

tools::watch_snapshot look(double at, uint64_t completed, double busy) {
  tools::watch_snapshot s;
  s.at = std::chrono::steady_clock::time_point{} +
         std::chrono::duration_cast<std::chrono::steady_clock::duration>(
             std::chrono::duration<double>(at));
  s.wall = std::chrono::system_clock::time_point{} + 1'000'000s +
           std::chrono::duration_cast<std::chrono::system_clock::duration>(
               std::chrono::duration<double>(at));
  s.stats.set_admitted(completed + 4);
  s.stats.set_completed(completed);
  s.stats.set_outstanding(4);
  auto* d = s.devices.add_devices();
  d->set_name("cuda0");
  d->set_kind("cuda");
  d->set_location("host process");
  d->set_status("available");
  d->set_circuit("closed");
  d->set_streams(2);
  d->set_completed(completed);
  d->set_busy_seconds(busy);
  d->set_memory_used_bytes(uint64_t{3} << 30);
  d->set_memory_capacity_bytes(uint64_t{80} << 30);
  d->set_xid_errors(2);
  d->set_last_xid(79);
  auto* t = s.tenants.add_tenants();
  t->set_tenant("search");
  t->set_inflight(4);
  t->set_max_inflight(8);
  t->set_waiting(12);
  return s;
}

} // namespace

TEST_CASE("a watch frame gives rates and busy shares from two looks",
          "[tools][watch]") {
  auto first = look(10, 100, 5.0);
  auto frame = tools::watch_frame("http://n:9470", first, nullptr, 2.0);
  INFO(frame);
  CHECK(has(frame, "cohort watch  http://n:9470  1970-01-12 13:46:50 UTC"));
  CHECK(has(frame, "items: 104 admitted, 100 completed, 0 failed"));
  CHECK_FALSE(has(frame, "/s)"));
  CHECK(has(frame, "3.0 GiB / 80.0 GiB"));
  CHECK(has(frame, "2 (79)"));
  CHECK(has(frame, "4/8"));
  CHECK(has(frame, "ALERTS: none firing"));
  // 2 s later: 50 more done (25/s), 3 s of device time on 2 streams (75%).
  auto second = look(12, 150, 8.0);
  auto* a = second.stats.add_alerts();
  a->set_name("device_unavailable");
  a->set_subject("cuda0");
  a->set_severity("critical");
  a->set_since_ns(std::chrono::duration_cast<std::chrono::nanoseconds>(
                      (second.wall - 30s).time_since_epoch())
                      .count());
  a->set_detail("Xid 79: fell off the bus");
  frame = tools::watch_frame("http://n:9470", second, &first, 2.0);
  INFO(frame);
  CHECK(has(frame, "150 completed (+25.0/s)"));
  CHECK(has(frame, "25.0"));
  CHECK(has(frame, "75%"));
  CHECK(has(frame, "ALERTS (1 firing)"));
  CHECK(has(frame, "device_unavailable"));
  CHECK(has(frame, "for 30s"));
  CHECK(has(frame, "Xid 79: fell off the bus"));
}

TEST_CASE("a watch frame of a node it cannot reach says why",
          "[tools][watch]") {
  tools::watch_snapshot s;
  s.error = "cannot reach http://n:9470: Connection";
  auto frame = tools::watch_frame("http://n:9470", s, nullptr, 5.0);
  CHECK(has(frame, "cannot reach http://n:9470: Connection"));
  CHECK(has(frame, "looking again every 5.0s"));
  CHECK_FALSE(has(frame, "DEVICE"));
}
