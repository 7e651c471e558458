// The placement policy alone: picks from candidates, no actors.
#include <catch2/catch.hpp>

#include "actors/balancer/placement_policy.hpp"

using namespace cohort::actors;
using namespace cohort::actors::balancer;

namespace {

placement_rules rules(placement_policy p = placement_policy::earliest_completion,
                      bool strict = false) {
  return {p, strict, false, 4};
}

} // namespace

TEST_CASE("earliest completion: the soonest device with room, or one that "
          "beats the drain horizon",
          "[actors][balancer][placement_policy]") {
  uint32_t turn = 0;
  int asked = 0;
  auto horizon = [&](double h) {
    return [&asked, h] {
      ++asked;
      return h;
    };
  };
  // Device 1 finishes soonest but is full; device 2 has room.
  std::vector<placement_candidate> fit{
      {0, 50, true}, {1, 10, false}, {2, 30, true}};
  // Strict: someone finishes sooner, so it waits.
  CHECK(pick_device(fit, rules(placement_policy::earliest_completion, true),
                    turn, horizon(1e9)) == no_pick);
  CHECK(asked == 0);
  // Not strict: the fleet has more work than it finishes by 40 ns, so the
  // device with room done by then takes it; by 20 ns none is.
  CHECK(pick_device(fit, rules(), turn, horizon(40)) == 2);
  CHECK(asked == 1);
  CHECK(pick_device(fit, rules(), turn, horizon(20)) == no_pick);
  // The soonest with room takes it without asking for the horizon.
  fit[1].room = true;
  asked = 0;
  CHECK(pick_device(fit, rules(placement_policy::earliest_completion, true),
                    turn, horizon(0)) == 1);
  CHECK(asked == 0);
  // A device still to measure the kernel goes first.
  fit[0].explore = true;
  CHECK(pick_device(fit, rules(), turn, horizon(0)) == 0);
  CHECK(pick_device({}, rules(), turn, horizon(0)) == no_pick);
}

TEST_CASE("the baselines: round robin takes turns, least loaded the fewest "
          "per stream",
          "[actors][balancer][placement_policy]") {
  uint32_t turn = 0;
  auto never = [] { return 0.0; };
  std::vector<placement_candidate> fit{{0, 1, true, false, false, 3.0},
                                       {2, 1, false, false, false, 1.0},
                                       {3, 1, true, false, false, 2.0}};
  auto rr = rules(placement_policy::round_robin);
  // Turns 0, then past each pick; device 1 is not a candidate.
  CHECK(fit[pick_device(fit, rr, turn, never)].index == 0);
  CHECK(turn == 1);
  CHECK(fit[pick_device(fit, rr, turn, never)].index == 2);
  CHECK(fit[pick_device(fit, rr, turn, never)].index == 3);
  CHECK(turn == 0);
  CHECK(fit[pick_device(fit, rr, turn, never)].index == 0);
  auto ll = rules(placement_policy::least_loaded);
  CHECK(fit[pick_device(fit, ll, turn, never)].index == 2);
}

TEST_CASE("CPU fallback: only a CPU worker with room",
          "[actors][balancer][placement_policy]") {
  uint32_t turn = 0;
  auto never = [] { return 0.0; };
  std::vector<placement_candidate> fit{{0, 5, true, false, false},
                                       {1, 9, true, false, true},
                                       {2, 7, true, false, true},
                                       {3, 1, false, false, true}};
  auto r = rules();
  r.cpu_only = true;
  CHECK(pick_device(fit, r, turn, never) == 2);
  fit[1].room = fit[2].room = false;
  CHECK(pick_device(fit, r, turn, never) == no_pick);
}
