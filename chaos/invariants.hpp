// The invariant checker: after a chaos run, proves that every submitted item
// ended exactly once, that results are correct, that only allowed errors
// occurred, that no quota was exceeded, and that the audit chain verifies
// and holds a record for every item; and times each device loss's recovery.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <caf/error.hpp>

#include "messages/work.hpp"

namespace cohort::chaos {

/// How one item ended, as its client saw it.
struct item_end {
  bool ok = false;
  work_result result;
  caf::error error;
  /// When it arrived, in ms after the workload started.
  int64_t at_ms = 0;
};

/// A device loss injected during the run, to time its recovery.
struct loss_mark {
  std::string device;
  /// Wall clock, as in audit records.
  int64_t at_ns = 0;
  std::string what;
  /// Time it from the balancer noticing (the first "device lost" event of
  /// the device after `at_ns`): a hang is noticed only when the watchdog
  /// fires, a kernel timeout after the hung launch started.
  bool from_detection = false;
};

/// Everything a run produced that the checker needs.
struct run_record {
  /// Submitted items (ids unique), as the checker computes their results:
  /// objects an item reads are given by their host data.
  std::vector<work_item> items;
  /// Items that kept their output on a device (keep_on_device): by id, the
  /// elements their object must have. Their output is read by another item.
  std::map<uint64_t, uint64_t> kept;
  /// Every end each id received.
  std::map<uint64_t, std::vector<item_end>> ends;
  std::string audit_path;
  /// Why the audit log could not take every record of the run (a write
  /// error, records dropped); empty when it did.
  std::string audit_unwritten;
  /// In-flight caps per tenant and runtime-wide (0: none).
  std::map<std::string, uint32_t> inflight_cap;
  uint32_t global_inflight_cap = 0;
  /// errc names an item may end with: any item, and a tenant's items.
  std::set<std::string> allowed_errors;
  std::map<std::string, std::set<std::string>> allowed_by_tenant;
  /// What the memory observer saw go wrong.
  std::vector<std::string> memory_violations;
  std::vector<loss_mark> losses;
  /// Every item must have ended this many ms after the workload started
  /// (0: no deadline).
  int64_t deadline_ms = 0;
};

/// What the checker found.
struct verdict {
  uint64_t items = 0;
  uint64_t completed = 0;
  /// Items that ended with an allowed error (rejections included).
  uint64_t failed = 0;
  std::map<std::string, uint64_t> errors_by_code;
  /// Items that never ended, and items that ended more than once.
  uint64_t lost = 0;
  uint64_t duplicated = 0;
  uint64_t wrong_results = 0;
  /// Items that ended after the scenario's deadline.
  uint64_t late = 0;
  /// Completed items that were gangs.
  uint64_t gangs_completed = 0;
  uint64_t audit_records = 0;
  /// Items whose admission record was in a segment the log's rotation
  /// deleted (keep_files): the log cannot vouch for them either way; their
  /// ends as the client saw them are still checked.
  uint64_t audit_pruned = 0;
  /// Losses injected while their device was already down or being reset:
  /// absorbed by that recovery, not timed again.
  uint64_t absorbed_losses = 0;
  /// One entry per loss whose work moved: loss to the last moved item's end.
  std::vector<double> recovery_ms;
  /// Every broken invariant, in words (at most 50).
  std::vector<std::string> violations;
  bool ok() const { return violations.empty(); }
};

/// Checks `run`; never throws, never stops at the first problem.
verdict check_invariants(const run_record& run);

/// The q-quantile (0..1) of `xs` (nearest rank), 0 when empty.
double quantile(std::vector<double> xs, double q);

} // namespace cohort::chaos
