// Dry runs of allocation plans: what `cohort simulate` and the balancer's
// simulate (asked through the quota actor) answer. Each step goes through the quota model (grants, quotas,
// limits, reservations: soft refusals) and then through the real pool of
// each device over address space of its capacity (hard refusals,
// fragmentation). Nothing runs on a device.
#pragma once

#include <vector>

#include "quota/quota_book.hpp"
#include "devices/memory/pool_resource.hpp"
#include "messages/simulation.hpp"

namespace cohort::quota {

/// Runs `plan` on `book` (its usage is where the plan starts: that many
/// bytes are taken on each device's pool first) with pool options `pools`
/// per device.
simulation_report
simulate(quota_book book, const allocation_plan& plan,
         const std::vector<devices::memory::pool_options>& pools);

} // namespace cohort::quota
