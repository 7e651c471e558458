// Counters of the audit log, as the audit actor reports them.
#pragma once

#include <cstdint>
#include <string>

#include <caf/meta/type_name.hpp>

namespace cohort {

/// What the audit log did since the runtime opened it (counters start at 0
/// in each process), and where it stands.
struct audit_stats {
  /// Records chained by this process (written or still buffered).
  uint64_t records_appended = 0;
  /// Records handed to the kernel by write(2).
  uint64_t records_written = 0;
  /// Records covered by a completed fdatasync: durable.
  uint64_t records_synced = 0;
  /// Bytes handed to the kernel.
  uint64_t bytes_written = 0;
  /// Completed fdatasync calls.
  uint64_t fsyncs = 0;
  /// Times the active file became a segment and a new one started.
  uint64_t rotations = 0;
  /// Torn writes cut off when the log was opened (0 or 1 per process).
  uint64_t recoveries = 0;
  /// Failed write(2) or fdatasync calls.
  uint64_t write_errors = 0;
  /// Records dropped (never chained) while writes failed and the memory
  /// for unwritten records was full; the chain says so in an AUDIT GAP
  /// record once writes work again.
  uint64_t dropped = 0;
  /// True while the log cannot be written (the last write or sync failed).
  bool failing = false;
  /// The newest record's sequence number when this process opened the log:
  /// this run's records are the ones after it.
  uint64_t opened_at_seq = 0;
  /// Records chained but not yet written.
  uint64_t pending = 0;
  /// Sequence number of the newest record (the chain's length when it starts
  /// at 1).
  uint64_t last_seq = 0;
  /// The file being appended to (the active file, always the configured
  /// path) and its size.
  std::string segment;
  uint64_t segment_bytes = 0;
  /// Rotated segments on disk.
  uint32_t segments = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, audit_stats& x) {
  return f(caf::meta::type_name("audit_stats"), x.records_appended,
           x.records_written, x.records_synced, x.bytes_written, x.fsyncs,
           x.rotations, x.recoveries, x.write_errors, x.dropped, x.failing,
           x.opened_at_seq, x.pending, x.last_seq, x.segment, x.segment_bytes,
           x.segments);
}

} // namespace cohort
