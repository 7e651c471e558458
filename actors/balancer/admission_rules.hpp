// Admission rules: whether a submitted item is admitted now, held back, or
// refused. Pure deciders: they read a tenant's policy and what the balancer
// tells them, and return a verdict that the balancer carries out (sends,
// audit records, its books).
#pragma once

#include <cstddef>
#include <cstdint>

#include <caf/error.hpp>

#include "messages/quota.hpp"
#include "messages/work.hpp"

namespace cohort::actors::balancer {

/// The most devices one gang may take.
inline constexpr uint32_t max_gang = 64;

/// Checks what an item asks for against its tenant's grant, before any
/// limit: every stage's kernel is in the catalog (else unknown_kernel) and
/// granted (else not_granted); the item is well formed, its shape worked
/// out into `shape` (else invalid_arguments); a gang is a single gemm with
/// at least as many rows as devices, at most max_gang (else
/// invalid_arguments). None when it passes.
caf::error check_item(const tenant_policy& pol, const work_item& item,
                      item_shape& shape);

/// What becomes of an item that passed its checks.
struct admission_verdict {
  enum class action : uint8_t {
    /// Admitted now.
    admit,
    /// Held back until the limit in `why` lets it through (or its time is
    /// up).
    hold,
    /// Refused with `why`.
    reject,
  };
  action what = action::admit;
  caf::error why;
};

/// Decides on an item of a tenant with policy `pol`: `limit` is what stops
/// the tenant from starting one more item now (quota_book::check_admit;
/// none when nothing does), `held` how many of its items are held back
/// already and `front_why` (when `held` > 0) why the first of them is.
/// Later items wait behind held-back ones, so that order within a tenant
/// holds. Over a limit, a tenant whose policy is to reject refuses with the
/// limit; otherwise the item is held back, up to the tenant's queue_limit,
/// beyond which it is refused with queue_full.
admission_verdict decide_admission(const tenant_policy& pol, caf::error limit,
                                   size_t held, const caf::error* front_why);

} // namespace cohort::actors::balancer
