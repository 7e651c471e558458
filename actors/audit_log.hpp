// The audit log file: length-delimited `cohort.pb.AuditRecord`s, each chained
// to the one before by SHA-256.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <caf/expected.hpp>

#include "messages/audit_event.hpp"
#include "messages/cohort.pb.h"

namespace cohort::actors {

/// A SHA-256 digest.
using digest = std::array<uint8_t, 32>;

/// Lower-case hex of a digest.
std::string to_hex(const digest& d);

/// What `verify` found.
struct audit_verdict {
  /// Records that verified, in order, before the first bad one.
  uint64_t good_records = 0;
  /// True when every record verified and the file ended cleanly.
  bool ok = false;
  /// 1-based index of the first bad record (0 when ok).
  uint64_t first_bad = 0;
  /// Why the first bad record is bad.
  std::string reason;
  /// Hash of the last good record (the chain head).
  digest head{};
};

/// Appends chained records to one file. Not thread-safe: owned by the audit
/// actor. Records are buffered and written by `flush` (or when `batch` are
/// pending); a written batch is one write(2) call.
class audit_log {
public:
  ~audit_log();

  /// Opens `path` for appending, creating it if needed. An existing file must
  /// verify: the chain continues from its last record.
  static caf::expected<std::unique_ptr<audit_log>> open(const std::string& path,
                                                        uint32_t batch);

  /// Chains and buffers one record; writes the buffer when it is full.
  caf::error append(const audit_event& ev);

  /// Writes buffered records; `sync` also asks the kernel to persist them.
  caf::error flush(bool sync);

  /// Records appended (written or buffered), including those found at open.
  uint64_t records() const { return seq_; }

  /// Records buffered but not yet written.
  uint64_t pending() const { return pending_; }

  const std::string& path() const { return path_; }

  /// Hash of the newest record.
  const digest& head() const { return head_; }

  /// Reads and checks a whole log: every record parses, numbers follow each
  /// other, links to its predecessor and hashes to its stored hash. Each
  /// record that verified is passed to `on_record`, in order.
  static audit_verdict
  verify(const std::string& path,
         const std::function<void(const pb::AuditRecord&)>& on_record = {});

private:
  audit_log(std::string path, int fd, uint32_t batch);

  std::string path_;
  int fd_ = -1;
  uint32_t batch_;
  uint64_t seq_ = 0;
  uint64_t pending_ = 0;
  digest head_{};
  std::string buffer_;
  pb::AuditRecord scratch_;
  std::string body_;
};

} // namespace cohort::actors
