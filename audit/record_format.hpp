// The audit log's record format, internal to the audit library: the hash
// chain, the limits on a record, and reading records from raw bytes (varints,
// a record found without trusting its length prefix, a torn tail, BATCH
// records and their entries).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "audit/audit_log.hpp"

namespace cohort::pb {
class AuditRecord;
} // namespace cohort::pb

namespace cohort::audit::detail {

// The smallest rotate_bytes accepted: a segment must hold more than the
// ROTATED record that starts it, or every write would rotate.
inline constexpr uint64_t min_rotate_bytes = 4096;

inline constexpr uint32_t max_audit_batch = 65536;

// Strings of an event are cut to this, so that a record stays below
// max_record_bytes.
inline constexpr size_t max_field_bytes = 64 * 1024;

// `hash` is the highest-numbered field, so a record is its body followed by
// that field: tag (10 << 3 | length-delimited), length 32, the digest.
inline constexpr uint8_t hash_tag = (10 << 3) | 2;
inline constexpr size_t hash_trailer = 2 + 32;

// A zero fill this long at the end of a file is what a crash leaves when
// the file's size reached the disk before its data: a record never ends with
// this many zeros (it ends with a hash).
inline constexpr size_t zero_fill_bytes = 32;

/// hash = SHA-256(prev_hash || body), where body is the record serialized
/// with `hash` unset: exactly the bytes before the hash field.
digest chain_hash(const void* prev, size_t prev_size, const void* body,
                  size_t body_size);

std::string_view as_view(const digest& d);

enum class varint_status { ok, partial, malformed };

/// Reads a varint of at most `max_bytes` bytes at `i`, advancing `i`.
varint_status read_varint(const uint8_t* d, size_t& i, size_t end,
                          uint64_t& out, size_t max_bytes = 10);

/// Whether a complete record whose stored hash matches its own prev_hash
/// and body starts at `s` (read without trusting any length prefix).
bool self_consistent_record_at(const uint8_t* d, size_t s, size_t size);

/// Whether what follows the last good record, from `off` to the end of the
/// file, is what a crash mid-write leaves (an incomplete record or a zero
/// fill, no complete record after it).
bool torn_tail_at(const uint8_t* d, size_t off, size_t size, bool incomplete);

/// Why a BATCH record whose hash verified cannot be read; empty when its
/// entries fit its count and tables.
std::string batch_problem(const pb::AuditRecord& rec);

/// Calls `on_record` with each record of a checked BATCH record, as it
/// would have been written on its own (its prev_hash and hash are the
/// batch's).
void expand_batch(const pb::AuditRecord& rec, pb::AuditRecord& out,
                  const std::function<void(const pb::AuditRecord&)>& on_record);

/// "FILE: record seq N (record I of the file, byte offset X): why".
std::string bad_record(const audit_verdict& v);

/// Cuts `s` to at most `max` bytes.
void cut(std::string& s, size_t max);

} // namespace cohort::audit::detail
