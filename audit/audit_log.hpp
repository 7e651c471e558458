// The audit log: length-delimited `cohort.pb.AuditRecord`s, each chained to
// the one before by SHA-256, in an active file and its rotated segments.
// docs/audit.md describes the format, the fsync policies, recovery and
// rotation.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <caf/expected.hpp>

#include "messages/audit_event.hpp"
#include "messages/audit_stats.hpp"
#include "messages/cohort.pb.h"

namespace cohort::audit {

/// A SHA-256 digest.
using digest = std::array<uint8_t, 32>;

/// Lower-case hex of a digest.
std::string to_hex(const digest& d);

/// Which batch writes are followed by fdatasync; values match
/// `cohort.pb.AuditFsync`. A flush syncs under every policy but `never`.
enum class audit_fsync : uint8_t {
  /// Every batch write: a written batch is durable.
  every_batch = 0,
  /// Written records are synced within `fsync_interval` of their write.
  interval = 1,
  /// Only a flush syncs.
  on_flush_only = 2,
  /// Nothing syncs, not even a flush.
  never = 3,
};

/// Returns "every_batch", "interval", "on_flush_only" or "never".
const char* to_string(audit_fsync x);

/// How an audit log writes, syncs and rotates.
struct audit_options {
  /// Records buffered before a batch is written (one write(2)).
  uint32_t batch = 256;
  audit_fsync fsync = audit_fsync::every_batch;
  /// audit_fsync::interval: the longest a written record stays unsynced
  /// while the log is in use.
  std::chrono::milliseconds fsync_interval{1000};
  /// Rotate once the active file has this many bytes; 0 never.
  uint64_t rotate_bytes = 0;
  /// Rotated segments kept (the oldest go first); 0 keeps all.
  uint32_t keep_files = 0;
  /// While writes fail, records are kept in memory up to this many bytes;
  /// past it they are dropped and counted, and the first record written
  /// after the failure (an AUDIT GAP, kind RECOVERY) says how many.
  uint64_t max_unwritten_bytes = uint64_t{64} << 20;
};

/// The audit options of `cfg` (`audit_batch` and `audit { ... }`);
/// malformed_config names the first bad value.
caf::expected<audit_options> audit_options_of(const pb::RuntimeConfig& cfg);

/// The largest record the log writes or accepts; longer strings in an event
/// are cut to fit. A length prefix announcing more is corruption.
inline constexpr uint32_t max_record_bytes = 1 << 20;

/// The rotated segments of the log whose active file is `path`: the files
/// `path.N` (N a positive number), oldest (lowest N) first.
std::vector<std::string> audit_segments(const std::string& path);

/// One file of a log, as `verify` read it.
struct audit_file {
  std::string path;
  /// Records of this file that verified, and their sequence numbers (0 when
  /// none did).
  uint64_t records = 0;
  uint64_t first_seq = 0;
  uint64_t last_seq = 0;
  /// The file's size.
  uint64_t bytes = 0;
};

/// What `verify` found.
struct audit_verdict {
  /// True when every record of every file verified and the chain is whole.
  bool ok = false;
  /// Records that verified, in order, before the first bad one.
  uint64_t good_records = 0;
  /// Sequence numbers of the first and the last record that verified.
  uint64_t first_seq = 0;
  uint64_t last_seq = 0;
  /// The oldest kept file starts mid-chain (at `first_seq` > 1, older
  /// segments pruned): its first record links to a hash that is not on disk.
  bool mid_chain = false;
  /// Hash of the last good record (the chain head).
  digest head{};
  /// The first bad record (all 0 or empty when ok): the sequence number it
  /// should carry, why it is bad, its file, the byte offset of its length
  /// prefix in that file and its 1-based index among the file's records.
  uint64_t first_bad = 0;
  std::string reason;
  std::string bad_file;
  uint64_t bad_offset = 0;
  uint64_t bad_index = 0;
  /// The bad record is a torn write: an incomplete record (or zero fill) at
  /// the end of the last file, with no complete record after it. Opening
  /// the log cuts it off; anything else bad is refused.
  bool torn_tail = false;
  /// Every file read, in chain order (segments, then the active file).
  std::vector<audit_file> files;
};

/// Appends chained records to the active file `path`, rotating it into
/// segments. Not thread-safe: owned by the audit actor. Records are buffered
/// and written as one write(2) per batch: when `batch` are pending, on
/// `flush` and on `tick`; `audit_options::fsync` says which writes are
/// synced.
class audit_log {
public:
  ~audit_log();

  /// Opens the log at `path` for appending, creating it if needed. An
  /// existing log must verify and its chain continues; a torn write at the
  /// end of the active file (an incomplete last record after a crash) is
  /// cut off and the cut audited as a RECOVERY record. Any other bad record
  /// is refused with audit_chain_broken naming it. One writer at a time:
  /// the log is locked (flock on `path.lock`) while open, and a second
  /// writer, in this process or another, is refused with io_error naming
  /// the holder's pid.
  static caf::expected<std::unique_ptr<audit_log>> open(const std::string& path,
                                                        audit_options opts);

  /// `open` with default options but the batch size.
  static caf::expected<std::unique_ptr<audit_log>> open(const std::string& path,
                                                        uint32_t batch);

  /// Chains and buffers one record; writes the batch when it is full. With
  /// `more_coming` (the caller holds more records to append right away) a
  /// full batch waits for them, up to `max_group` batches: one write and one
  /// fdatasync then cover them all (group commit). While writes fail and
  /// `max_unwritten_bytes` are buffered, the record is dropped (counted in
  /// `stats().dropped`) and the write error returned.
  caf::error append(const audit_event& ev, bool more_coming = false);

  /// The names that audit entries' indices refer to: tenants in the order
  /// of the runtime config, devices by index (kernels are the catalog's).
  /// An index without a name is written as `#N`.
  void set_names(std::vector<std::string> tenants,
                 std::vector<std::string> devices);

  /// Names device `index` (one added while the runtime runs).
  void set_device_name(uint32_t index, std::string name);

  /// Chains and buffers `entries` as BATCH records (one per
  /// `max_batch_entries`), each counting as `size()` records towards the
  /// batch size and hashed once; otherwise as `append(event)`.
  caf::error append(std::span<const audit_entry> entries,
                    bool more_coming = false);

  /// Entries in one BATCH record at most.
  static constexpr uint32_t max_batch_entries = 4096;

  /// True while the last write or sync failed (until one succeeds).
  bool failing() const { return failing_; }

  /// How many batches group commit may join into one write.
  static constexpr uint32_t max_group = 16;

  /// A buffer is written in pieces of whole records of about this size, each
  /// kept once written: a disk with room for part of a backlog takes that
  /// part.
  static constexpr size_t write_piece_bytes = size_t{1} << 20;

  /// While writes fail, appending tries a write at most this often
  /// (records wait in memory, or are dropped once it is full, in between).
  static constexpr std::chrono::milliseconds retry_interval{100};

  /// Writes every buffered record; `sync` also makes every written record
  /// durable (fdatasync), except under audit_fsync::never. A record is
  /// acknowledged once a `flush(true)` after it returned without error.
  caf::error flush(bool sync);

  /// The periodic write: writes buffered records and, under
  /// audit_fsync::interval, syncs written ones whose time is up.
  caf::error tick();

  /// Under audit_fsync::interval with written records not yet synced: the
  /// time until they must be; otherwise nothing.
  std::optional<std::chrono::milliseconds> sync_due_in() const;

  /// Records in the chain (the newest record's sequence number).
  uint64_t records() const { return seq_; }

  /// Records buffered but not yet written.
  uint64_t pending() const { return pending_; }

  const std::string& path() const { return path_; }

  const audit_options& options() const { return opts_; }

  /// Hash of the newest record.
  const digest& head() const { return head_; }

  /// Counters since open, and where the log stands.
  cohort::audit_stats stats() const;

  /// Reads and checks a whole log: its segments in order, then the active
  /// file `path` (either may be missing, not both). Every record parses,
  /// numbers follow each other, links to its predecessor (across files too)
  /// and hashes to its stored hash. The oldest file may start mid-chain only
  /// at a ROTATED record (older segments pruned). Each record that verified
  /// is passed to `on_record` in order; `on_file` is told each file before
  /// its records.
  static audit_verdict
  verify(const std::string& path,
         const std::function<void(const pb::AuditRecord&)>& on_record = {},
         const std::function<void(const std::string&)>& on_file = {});

private:
  audit_log(std::string path, int fd, audit_options opts);

  // Numbers, chains and buffers one record, without writing.
  void chain(const audit_event& ev);

  // Numbers, chains and buffers one BATCH record of `entries` (at most
  // max_batch_entries), without writing.
  void chain(std::span<const audit_entry> entries);

  // Appends the record in body_ (serialized without its hash), chained to
  // head_, to the write buffer.
  void seal();

  // Whether records are to be dropped rather than buffered: writes fail and
  // the buffer is full (and a write now fails too).
  caf::error over_budget(uint64_t records);

  // Writes the buffer (in pieces of whole records, write_piece_bytes each;
  // those written stay written when a later one fails), synced as the
  // policy says, then rotation when the file is full.
  caf::error write_batch();

  // write_batch, but while writes fail at most once per retry_interval
  // (otherwise the last error): a backlog written again for every record
  // appended would keep the writer busy for as long as the disk is short of
  // space. The audit actor's flushes and ticks write whenever they come.
  caf::error try_write();

  // Chains the RECOVERY record that names the records dropped since the
  // last one.
  void mark_gap();

  caf::error sync();

  // Notes that the log cannot be written now; returns `err`.
  caf::error failed(caf::error err);

  // Renames the active file to the next segment, starts a new one and
  // prunes old segments.
  caf::error rotate();

  std::string path_;
  int fd_ = -1;
  audit_options opts_;
  uint64_t seq_ = 0;
  uint64_t pending_ = 0;
  digest head_{};
  std::string buffer_;
  /// Where each record in buffer_ ends, and its (last) sequence number.
  std::vector<std::pair<size_t, uint64_t>> ends_;
  pb::AuditRecord scratch_;
  pb::AuditRecord batch_scratch_;
  /// A name table of audit entries (tenants, devices or kernels) and the
  /// local indices of its names in the BATCH record being built.
  class name_table {
  public:
    /// Kernels' table: named by the catalog.
    explicit name_table(bool kernels = false) : kernels_(kernels) {}

    void set(std::vector<std::string> names);
    void set(uint32_t index, std::string name);

    /// The local index of `global`, adding its name to `out` the first
    /// time (`#N` for an index without a name).
    template <class Names> uint32_t local(uint32_t global, Names& out) {
      if (global >= max_direct)
        return add(global, out);
      if (direct_.size() <= global)
        direct_.resize(size_t(global) + 1, -1);
      if (direct_[global] < 0) {
        direct_[global] = int32_t(add(global, out));
        touched_.push_back(global);
      }
      return uint32_t(direct_[global]);
    }

    void reset() {
      for (auto g : touched_)
        direct_[g] = -1;
      touched_.clear();
    }

  private:
    // Indices below this are looked up in a flat table; others (never in a
    // runtime: its tables are smaller) get a name entry each time.
    static constexpr uint32_t max_direct = 65536;

    template <class Names> uint32_t add(uint32_t global, Names& out) {
      out.Add(name_of(global));
      return uint32_t(out.size() - 1);
    }

    std::string name_of(uint32_t global) const;

    bool kernels_;
    std::vector<std::string> names_;
    std::vector<int32_t> direct_;
    std::vector<uint32_t> touched_;
  };
  name_table tenants_;
  name_table devices_;
  name_table kernels_{true};
  std::string body_;
  /// Size of the active file, as far as this process wrote it.
  uint64_t file_bytes_ = 0;
  /// Number of the newest segment, and how many are on disk.
  uint64_t last_segment_ = 0;
  uint32_t segments_ = 0;
  /// Sequence numbers of the last record written and the last one synced.
  uint64_t written_seq_ = 0;
  uint64_t synced_seq_ = 0;
  /// When the oldest written but unsynced record was written.
  std::chrono::steady_clock::time_point unsynced_since_;
  cohort::audit_stats stats_;
  /// The writer's lock (flock on `path.lock`), held while open.
  int lock_fd_ = -1;
  /// The last write or sync failed; records dropped since (not chained).
  bool failing_ = false;
  caf::error last_error_;
  uint64_t dropped_since_ = 0;
  /// While writes fail: when appending may try a write again.
  std::chrono::steady_clock::time_point next_try_;
};

} // namespace cohort::audit
