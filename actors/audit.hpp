// The audit actor: every event of the runtime ends up in its hash-chained log.
#pragma once

#include <chrono>
#include <memory>

#include <caf/typed_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "audit/audit_log.hpp"
#include "messages/atoms.hpp"
#include "messages/audit_event.hpp"
#include "messages/audit_stats.hpp"

namespace cohort::actors {

/// Told when the audit log stops or starts again being writable.
using audit_listener = caf::typed_actor<
    /// `ok`: the log can be written again; otherwise `why` it cannot.
    caf::reacts_to<audit_atom, bool, std::string>>;

using audit_actor = caf::typed_actor<
    /// Appends a batch of events to the log, in order.
    caf::reacts_to<record_atom, std::vector<audit_event>>,
    /// Appends fixed entries and events to the log in the order the batch
    /// gives; runs of entries become BATCH records.
    caf::reacts_to<record_atom, audit_batch>,
    /// Writes and syncs everything received so far (no sync under
    /// audit_fsync::never); replies with the number of records in the log.
    /// The reply acknowledges every record received before the flush.
    caf::replies_to<flush_atom>::with<uint64_t>,
    /// The log's counters.
    caf::replies_to<stats_atom>::with<audit_stats>,
    /// Periodic write of buffered records (and sync, under
    /// audit_fsync::interval); while writes fail, another try.
    caf::reacts_to<tick_atom>,
    /// Tells `listener` whenever the log stops or starts again being
    /// writable (at once if it cannot be written now).
    caf::reacts_to<watch_atom, audit_listener>,
    /// Device `index` is named `name` in the entries that refer to it (a
    /// GPU a rescan added); the reply says it was taken.
    caf::replies_to<device_atom, uint32_t, std::string>::with<bool>>;

struct audit_state {
  std::shared_ptr<audit::audit_log> log;
  /// When the earliest tick in flight arrives (none when max()).
  std::chrono::steady_clock::time_point next_tick =
      std::chrono::steady_clock::time_point::max();
  /// Whether the listener was last told that the log cannot be written,
  /// and why.
  bool failing = false;
  std::string why;
  audit_listener listener;
  static inline const char* name = "cohort.audit";
};

/// Owns `log` and appends what it is sent. Buffered records are written at
/// the log's batch size, at most 20 ms after they arrive, and on flush;
/// under audit_fsync::interval, written records are synced when their
/// interval is up. While writes fail (a full disk), it tries again every
/// 100 ms and tells its listener when the log stops and starts being
/// writable. The log blocks on write(2) and fdatasync: spawn it detached,
/// off the scheduler's threads.
audit_actor::behavior_type
audit_impl(audit_actor::stateful_pointer<audit_state> self,
           std::shared_ptr<audit::audit_log> log);

/// Collects events inside one actor and sends them to the audit actor in
/// batches: common-path entries in fixed binary (nothing allocated per
/// entry), other events in full, in the order they were added. Not
/// thread-safe: lives in the state of the actor that uses it.
class audit_buffer {
public:
  audit_buffer() = default;

  explicit audit_buffer(audit_actor dest) : dest_(std::move(dest)) {
    pending_.entries.reserve(max_pending);
  }

  /// Adds one event for `self`: sends the batch when it is full, otherwise
  /// makes sure a tick_atom reaches `self` within 5 ms to send it.
  template <class Self> void add(Self* self, audit_event ev) {
    pending_.at.push_back(uint32_t(pending_.entries.size()));
    pending_.events.push_back(std::move(ev));
    added(self);
  }

  /// Adds one common-path entry, as `add(self, event)`.
  template <class Self> void add(Self* self, const audit_entry& e) {
    pending_.entries.push_back(e);
    added(self);
  }

  /// Handles the tick `add` scheduled.
  template <class Self> void on_tick(Self* self) {
    tick_scheduled_ = false;
    flush(self);
  }

  /// Sends everything pending, as one message.
  template <class Self> void flush(Self* self) {
    if (pending_.empty() || !dest_)
      return;
    self->send(dest_, record_atom::value, std::move(pending_));
    pending_ = {};
    pending_.entries.reserve(max_pending);
  }

  static constexpr size_t max_pending = 1024;

private:
  template <class Self> void added(Self* self) {
    if (pending_.size() >= max_pending) {
      flush(self);
    } else if (!tick_scheduled_) {
      tick_scheduled_ = true;
      self->delayed_send(self, std::chrono::milliseconds(5), tick_atom::value);
    }
  }

  audit_actor dest_;
  audit_batch pending_;
  bool tick_scheduled_ = false;
};

} // namespace cohort::actors
