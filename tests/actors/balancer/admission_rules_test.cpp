// The admission rules alone: verdicts from a policy and the facts given,
// no actors.
#include <catch2/catch.hpp>

#include "actors/balancer/admission_rules.hpp"
#include "messages/errc.hpp"

using namespace cohort;
using namespace cohort::actors::balancer;

namespace {

tenant_policy policy(limit_policy on_limit = limit_policy::reject) {
  tenant_policy p;
  p.tenant = "t";
  p.kernels.all = true;
  p.device_mask = ~uint64_t{0};
  p.on_limit = on_limit;
  p.queue_limit = 3;
  return p;
}

work_item gemv(uint64_t m = 8, uint64_t n = 8) {
  work_item item;
  item.id = 1;
  item.tenant = "t";
  item.kernel = kernel_id::gemv;
  item.args.m = m;
  item.args.n = n;
  item.inputs.emplace_back(std::vector<float>(m * n, 1.0f));
  item.inputs.emplace_back(std::vector<float>(n, 1.0f));
  return item;
}

work_item gemm(uint64_t m, uint32_t gang) {
  work_item item;
  item.id = 2;
  item.tenant = "t";
  item.kernel = kernel_id::gemm;
  item.args.m = m;
  item.args.n = 4;
  item.args.k = 4;
  item.inputs.emplace_back(std::vector<float>(m * 4, 1.0f));
  item.inputs.emplace_back(std::vector<float>(16, 1.0f));
  item.gang = gang;
  return item;
}

using action = admission_verdict::action;

} // namespace

TEST_CASE("check_item passes a granted, well-formed item and gives its shape",
          "[actors][balancer][admission]") {
  item_shape shape;
  auto item = gemv(8, 8);
  CHECK_FALSE(check_item(policy(), item, shape));
  CHECK(shape.bytes >= (64 + 8 + 8) * sizeof(float));
  CHECK(shape.output_elements == 8);
}

TEST_CASE("check_item names unknown and ungranted kernels, bad shapes and "
          "bad gangs",
          "[actors][balancer][admission]") {
  item_shape shape;
  auto unknown = gemv();
  unknown.kernel = static_cast<kernel_id>(200);
  CHECK(code_of(check_item(policy(), unknown, shape)) == errc::unknown_kernel);
  auto chained = gemv();
  chained.then.push_back({});
  chained.then.back().kernel = static_cast<kernel_id>(201);
  auto err = check_item(policy(), chained, shape);
  CHECK(code_of(err) == errc::unknown_kernel);
  CHECK(to_string(err).find("chained kernel") != std::string::npos);
  auto pol = policy();
  pol.kernels = {};
  pol.kernels.add(kernel_id::gemm);
  err = check_item(pol, gemv(), shape);
  CHECK(code_of(err) == errc::not_granted);
  CHECK(to_string(err).find("gemv") != std::string::npos);
  auto short_input = gemv(8, 8);
  short_input.inputs[0] = host_buffer{std::vector<float>(3, 1.0f)};
  CHECK(code_of(check_item(policy(), short_input, shape)) ==
        errc::invalid_arguments);
  CHECK_FALSE(check_item(policy(), gemm(8, 4), shape));
  // Fewer rows than devices, more devices than a gang may take, a gang of
  // another kernel.
  CHECK(code_of(check_item(policy(), gemm(2, 4), shape)) ==
        errc::invalid_arguments);
  CHECK(code_of(check_item(policy(), gemm(128, max_gang + 1), shape)) ==
        errc::invalid_arguments);
  auto gang_gemv = gemv(8, 8);
  gang_gemv.gang = 2;
  CHECK(code_of(check_item(policy(), gang_gemv, shape)) ==
        errc::invalid_arguments);
}

TEST_CASE("decide_admission admits under the limits, and holds or refuses "
          "over them by the tenant's policy",
          "[actors][balancer][admission]") {
  auto over = make_error(errc::over_inflight_quota, "3 in flight");
  // Nothing in the way.
  CHECK(decide_admission(policy(), {}, 0, nullptr).what == action::admit);
  // Reject policy: the limit itself.
  auto v = decide_admission(policy(), over, 0, nullptr);
  CHECK(v.what == action::reject);
  CHECK(code_of(v.why) == errc::over_inflight_quota);
  // Queue policy: held back, with the limit as the reason...
  auto queue = policy(limit_policy::queue);
  v = decide_admission(queue, over, 0, nullptr);
  CHECK(v.what == action::hold);
  CHECK(code_of(v.why) == errc::over_inflight_quota);
  // ... until the queue is full.
  v = decide_admission(queue, over, 3, &over);
  CHECK(v.what == action::reject);
  CHECK(code_of(v.why) == errc::queue_full);
  CHECK(to_string(v.why).find("3 held-back items") != std::string::npos);
  CHECK(decide_admission(policy(limit_policy::cpu_fallback), over, 2, &over)
            .what == action::hold);
}

TEST_CASE("decide_admission keeps a tenant's order: under its limits, an "
          "item still waits behind held-back ones",
          "[actors][balancer][admission]") {
  auto rate = make_error(errc::over_rate_limit, "no token");
  auto v = decide_admission(policy(limit_policy::queue), {}, 1, &rate);
  CHECK(v.what == action::hold);
  CHECK(code_of(v.why) == errc::over_rate_limit);
  CHECK(to_string(v.why).find("its tenant has items held back") !=
        std::string::npos);
  // With the reject policy it is refused rather than overtaking.
  v = decide_admission(policy(), {}, 1, &rate);
  CHECK(v.what == action::reject);
}
