#include "actors/balancer/admission_rules.hpp"

#include <string>

#include "messages/errc.hpp"

namespace cohort::actors::balancer {

caf::error check_item(const tenant_policy& pol, const work_item& item,
                      item_shape& shape) {
  for (size_t i = 0; i <= item.then.size(); ++i) {
    auto k = i == 0 ? item.kernel : item.then[i - 1].kernel;
    if (!kernels::is_known(static_cast<uint8_t>(k)))
      return make_error(errc::unknown_kernel,
                        std::string{i == 0 ? "kernel" : "chained kernel"} +
                            " id " + std::to_string(int(k)) +
                            " is not in the catalog");
    if (!pol.kernels.allows(k))
      return make_error(errc::not_granted, "tenant '" + item.tenant +
                                               "' is not granted kernel " +
                                               std::string{kernels::name(k)});
  }
  try {
    if (auto why = shape_item(item, shape); !why.empty())
      return make_error(errc::invalid_arguments, std::move(why));
  } catch (const kernels::kernel_failure& e) {
    // A registered kernel's rule threw: the item ends here, named.
    return make_error(errc::kernel_error, e.what());
  }
  if (item.gang > 1 && (item.kernel != kernel_id::gemm || !item.then.empty() ||
                        item.args.m < item.gang || item.gang > max_gang))
    return make_error(errc::invalid_arguments,
                      "a gang of " + std::to_string(item.gang) +
                          " devices needs a single gemm with at least as "
                          "many rows (m) as devices, and at most " +
                          std::to_string(max_gang) + " devices");
  return {};
}

admission_verdict decide_admission(const tenant_policy& pol, caf::error limit,
                                   size_t held, const caf::error* front_why) {
  using action = admission_verdict::action;
  if (!limit && held > 0 && front_why != nullptr)
    limit =
        make_error(code_of(*front_why),
                   describe(*front_why) + " (its tenant has items held back)");
  if (!limit)
    return {action::admit, {}};
  if (pol.on_limit == limit_policy::reject)
    return {action::reject, std::move(limit)};
  if (held >= pol.queue_limit)
    return {action::reject,
            make_error(errc::queue_full,
                       "tenant '" + pol.tenant + "': its queue of " +
                           std::to_string(pol.queue_limit) +
                           " held-back items is full; held back by: " +
                           describe(limit))};
  return {action::hold, std::move(limit)};
}

} // namespace cohort::actors::balancer
