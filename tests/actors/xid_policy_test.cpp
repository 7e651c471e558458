// The Xid policy (supervision { xid }): per code, ignore, degrade, reset or
// isolate a GPU; its defaults, the config's checks, and each action on
// simulated GPUs of a running node.
#include <catch2/catch.hpp>

#include "config/supervision.hpp"
#include "tests/runtime_fixture.hpp"

using namespace cohort;
using namespace cohort::actors;
using namespace std::chrono_literals;

namespace {

using devices::xid_action;
using test::gemv_items;
using test::wait_status;

void add_rule(pb::RuntimeConfig& cfg, std::vector<uint32_t> codes,
              pb::XidAction action) {
  auto* rule = cfg.mutable_supervision()->add_xid();
  for (auto c : codes)
    rule->add_codes(c);
  rule->set_action(action);
}

// What supervision_of says of the config's Xid rules ("" when it takes them).
std::string refusal(const pb::RuntimeConfig& cfg) {
  auto s = config::supervision_of(cfg);
  if (s)
    return "";
  CHECK(code_of(s.error()) == errc::malformed_config);
  return describe(s.error());
}

} // namespace

TEST_CASE("the Xid policy: device-level codes reset, the others degrade, "
          "rules override",
          "[actors][xid]") {
  devices::xid_policy p;
  for (uint32_t code : {48u, 63u, 64u, 74u, 79u, 92u, 94u, 95u})
    CHECK(p.action(code) == xid_action::reset);
  for (uint32_t code : {13u, 31u, 43u, 45u, 119u})
    CHECK(p.action(code) == xid_action::degrade);
  CHECK(p.describe() == "defaults");
  p.set(13, xid_action::isolate);
  p.set(48, xid_action::degrade);
  p.set(43, xid_action::ignore);
  CHECK(p.action(13) == xid_action::isolate);
  CHECK(p.action(48) == xid_action::degrade);
  CHECK(p.action(43) == xid_action::ignore);
  CHECK(p.action(79) == xid_action::reset);
  CHECK(p.describe() == "Xid 13: isolate, Xid 43: ignore, Xid 48: degrade");
}

TEST_CASE("the config's Xid rules are checked", "[actors][xid]") {
  test::temp_dir dir;
  auto base = test::make_config(dir, 0, {{"sim0", 1}});
  {
    auto cfg = base;
    add_rule(cfg, {13, 31}, pb::XID_ISOLATE);
    add_rule(cfg, {48}, pb::XID_DEGRADE);
    auto s = config::supervision_of(cfg);
    REQUIRE(s);
    CHECK(s->second.xid_policy.action(31) == xid_action::isolate);
    CHECK(s->second.xid_policy.action(48) == xid_action::degrade);
    CHECK(s->second.xid_policy.action(79) == xid_action::reset);
  }
  auto with = [&](std::vector<uint32_t> codes, pb::XidAction action) {
    auto cfg = base;
    add_rule(cfg, std::move(codes), action);
    return cfg;
  };
  CHECK_THAT(refusal(with({13}, pb::XID_ACTION_UNSPECIFIED)),
             Catch::Contains("a rule has no action"));
  CHECK_THAT(refusal(with({}, pb::XID_RESET)),
             Catch::Contains("a rule reset has no codes"));
  CHECK_THAT(refusal(with({0}, pb::XID_RESET)),
             Catch::Contains("Xid codes are 1 to 65535, not 0"));
  CHECK_THAT(refusal(with({70000}, pb::XID_RESET)),
             Catch::Contains("not 70000"));
  auto twice = with({13}, pb::XID_RESET);
  add_rule(twice, {31, 13}, pb::XID_IGNORE);
  CHECK_THAT(refusal(twice), Catch::Contains("Xid 13 is in two rules"));
  std::vector<uint32_t> many;
  for (uint32_t c = 1; c <= 1025; ++c)
    many.push_back(c);
  CHECK_THAT(refusal(with(many, pb::XID_IGNORE)),
             Catch::Contains("at most 1024 codes in all"));
  // An action the proto does not name (a later version's config).
  CHECK_THAT(refusal(with({13}, pb::XidAction(9))),
             Catch::Contains("a rule has no action"));
}

TEST_CASE_METHOD(test::actor_fixture,
                 "each Xid action on a running node: ignore, degrade, reset "
                 "and isolate; every item ends once",
                 "[actors][xid]") {
  auto cfg = test::make_config(
      dir, 0, {{"sim0", 1}, {"sim1", 1}, {"sim2", 1}, {"sim3", 1}});
  cfg.mutable_supervision()->set_degraded_quiet_ms(60'000);
  add_rule(cfg, {43}, pb::XID_IGNORE);
  add_rule(cfg, {48}, pb::XID_DEGRADE);
  add_rule(cfg, {31}, pb::XID_RESET);
  add_rule(cfg, {13}, pb::XID_ISOLATE);
  auto rt = runtime::start(sys, cfg);
  REQUIRE(rt);
  auto& r = **rt;
  CHECK(r.xid_policy().action(13) == xid_action::isolate);
  for (size_t i = 0; i < 4; ++i)
    REQUIRE(wait_status(r, i, device_status::available) ==
            device_status::available);
  // Each device's Xid comes while items run there.
  for (auto name : {"sim0", "sim1", "sim2", "sim3"})
    r.sim_device(name)->slow_down(200);
  auto items = gemv_items(80);
  auto e = test::submit_all(sys, r, items, [&] {
    std::this_thread::sleep_for(20ms);
    r.sim_device("sim0")->raise_xid(43);
    r.sim_device("sim1")->raise_xid(48);
    r.sim_device("sim2")->raise_xid(31);
    r.sim_device("sim3")->raise_xid(13);
  });
  test::check_exactly_once(items, e);
  CHECK(e.errors.empty());
  // Isolated: out of service, not restarted.
  CHECK(wait_status(r, 3, device_status::offline) == device_status::offline);
  // Reset: lost, restarted, back.
  CHECK(wait_status(r, 2, device_status::available) ==
        device_status::available);
  // Degraded for a device-level code the rule keeps from a reset.
  CHECK(wait_status(r, 1, device_status::degraded) == device_status::degraded);
  auto stats = r.placement_stats();
  REQUIRE(stats);
  INFO(test::audit_text(r));
  // Ignored: counted, nothing more.
  CHECK(stats->devices[0].status == device_status::available);
  CHECK(stats->devices[0].losses == 0);
  CHECK(stats->devices[1].losses == 0);
  CHECK(stats->devices[2].losses == 1);
  CHECK(stats->devices[2].restarts == 1);
  // An isolation is a loss of the device (its items moved), not restarted.
  CHECK(stats->devices[3].losses == 1);
  CHECK(stats->devices[3].restarts == 0);
  auto xids = r.xid_errors();
  for (size_t i = 0; i < 4; ++i)
    CHECK(xids[i].first == 1);
  CHECK(xids[0].second == 43);
  CHECK(xids[3].second == 13);
  auto audit = test::audit_text(r);
  CHECK_THAT(audit, Catch::Contains("isolated by the Xid policy"));
  CHECK_THAT(audit, Catch::Contains("warning: Xid 48"));
  CHECK_THAT(audit, !Catch::Contains("warning: Xid 43"));
  // An operator brings the isolated device back; it runs work again.
  REQUIRE_FALSE(r.set_online("sim3"));
  CHECK(wait_status(r, 3, device_status::available) ==
        device_status::available);
  for (auto name : {"sim0", "sim1", "sim2"})
    REQUIRE_FALSE(r.set_offline(name));
  r.sim_device("sim3")->slow_down(1);
  auto more = gemv_items(10, 1000);
  auto e2 = test::submit_all(sys, r, more, [] {});
  test::check_exactly_once(more, e2);
  CHECK(e2.errors.empty());
  for (auto& [id, res] : e2.results)
    CHECK(res.device == "sim3");
}

TEST_CASE_METHOD(test::actor_fixture,
                 "an Xid that isolates, raised while its device is being "
                 "reset, gives the device up instead of restarting it",
                 "[actors][xid]") {
  auto cfg = test::make_config(dir, 0, {{"sim0", 1}, {"sim1", 1}});
  cfg.mutable_supervision()->set_restart_delay_ms(300);
  cfg.mutable_supervision()->set_max_restart_delay_ms(300);
  add_rule(cfg, {13}, pb::XID_ISOLATE);
  auto rt = runtime::start(sys, cfg);
  REQUIRE(rt);
  auto& r = **rt;
  REQUIRE(wait_status(r, 0, device_status::available) ==
          device_status::available);
  // Xid 79 resets it (by default); the isolating Xid comes during the
  // 300 ms before the restart.
  r.sim_device("sim0")->raise_xid(79);
  REQUIRE(wait_status(r, 0, device_status::resetting) ==
          device_status::resetting);
  r.sim_device("sim0")->raise_xid(13);
  CHECK(wait_status(r, 0, device_status::offline) == device_status::offline);
  std::this_thread::sleep_for(400ms);
  auto stats = r.placement_stats();
  REQUIRE(stats);
  CHECK(stats->devices[0].status == device_status::offline);
  CHECK(stats->devices[0].restarts == 0);
  CHECK_THAT(test::audit_text(r),
             Catch::Contains("isolated by the Xid policy"));
  // The operator's online ends the isolation.
  REQUIRE_FALSE(r.set_online("sim0"));
  CHECK(wait_status(r, 0, device_status::available) ==
        device_status::available);
}
