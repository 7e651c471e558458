// What the runtime tells of the items it holds (docs/jobs.md): each live
// item's state, device and age, and the last items that ended, for
// listings, `cohort jobs` and `GET /v1/items`.
#pragma once

#include <cstdint>
#include <string>

#include <caf/meta/type_name.hpp>

namespace cohort {

/// One item as the balancer sees it. `job` names it in the node: a number
/// given at submission, unique for the runtime's life (an item's own id is
/// its client's, and two clients may use the same).
struct item_view {
  uint64_t job = 0;
  /// work_item::id, as its client gave it.
  uint64_t id = 0;
  /// Its client: the number of the actor its end goes to (every item the
  /// C++ or Python API of one runtime submits has the same one).
  uint64_t client = 0;
  std::string tenant;
  std::string kernel;
  /// held (by its tenant's limits, not admitted yet), queued (admitted,
  /// waiting for a device), placed (on a device's queue, not sent yet),
  /// running (sent to its device); once ended: done, failed, cancelled.
  std::string state;
  /// The device it is placed on, runs on or ended on; empty otherwise.
  std::string device;
  /// Nanoseconds since it was submitted (an ended item: from its
  /// submission to its end).
  int64_t age_ns = 0;
  /// Placements so far.
  uint32_t attempts = 0;
  /// Cancelled while it runs: it ends with cancelled when its launch ends.
  bool cancelling = false;
  /// work_item::priority.
  int32_t priority = 0;
  /// Why it waits (held, queued), or how it ended (failed, cancelled).
  std::string detail;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, item_view& x) {
  return f(caf::meta::type_name("item_view"), x.job, x.id, x.client, x.tenant,
           x.kernel, x.state, x.device, x.age_ns, x.attempts, x.cancelling,
           x.priority, x.detail);
}

/// Which items a cancel (or a listing) takes: every field set must match
/// (`job` 0, `client` 0 and an empty `tenant` match any). A cancel with
/// none set is refused: it would take every item.
struct item_filter {
  uint64_t job = 0;
  std::string tenant;
  uint64_t client = 0;

  bool any() const { return job != 0 || !tenant.empty() || client != 0; }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, item_filter& x) {
  return f(caf::meta::type_name("item_filter"), x.job, x.tenant, x.client);
}

} // namespace cohort
