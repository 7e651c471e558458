// Reading an audit log: every segment checked record by record along the
// hash chain, BATCH records expanded, a torn tail told from tampering.
#include <algorithm>
#include <cstring>
#include <unistd.h>

#include <google/protobuf/io/coded_stream.h>

#include "audit/audit_log.hpp"
#include "audit/record_format.hpp"
#include "audit/segment_files.hpp"
#include "messages/cohort.pb.h"

namespace cohort::audit {

using namespace detail;

namespace {

// Where the chain stands while files are read.
struct chain_cursor {
  bool started = false;
  uint64_t seq = 0;
  digest head{};
};

// Checks the records of one file, continuing the chain in `c`. Returns
// false at the first bad record, filled into `v`.
bool verify_file(const mapped_file& m, bool last, chain_cursor& c,
                 audit_verdict& v, audit_file& f,
                 const std::function<void(const pb::AuditRecord&)>& on_record) {
  const uint8_t* d = m.data;
  size_t size = m.size;
  size_t off = 0;
  uint64_t index = 0;
  pb::AuditRecord rec;
  pb::AuditRecord expanded;
  while (off < size) {
    ++index;
    bool parsed = false;
    auto bad = [&](std::string why, bool incomplete) {
      v.first_bad = c.started ? c.seq + 1 : parsed ? rec.seq() : 1;
      v.reason = std::move(why);
      v.bad_file = f.path;
      v.bad_offset = off;
      v.bad_index = index;
      v.torn_tail = last && torn_tail_at(d, off, size, incomplete);
      return false;
    };
    size_t p = off;
    uint64_t len = 0;
    switch (read_varint(d, p, size, len, 5)) {
    case varint_status::partial:
      return bad("truncated length prefix", true);
    case varint_status::malformed:
      return bad("malformed length prefix", false);
    case varint_status::ok:
      break;
    }
    if (len > max_record_bytes)
      return bad("length prefix announces " + std::to_string(len) +
                     " bytes, more than the largest record (" +
                     std::to_string(max_record_bytes) + ")",
                 false);
    if (len > size - p)
      return bad("truncated record (" + std::to_string(len) +
                     " bytes announced, " + std::to_string(size - p) +
                     " present)",
                 true);
    const uint8_t* r = d + p;
    if (len < hash_trailer || r[len - hash_trailer] != hash_tag ||
        r[len - hash_trailer + 1] != 32)
      return bad("record does not end with its hash", false);
    if (!rec.ParseFromArray(r, int(len)))
      return bad("record does not parse", false);
    parsed = true;
    if (rec.prev_hash().size() != 32)
      return bad("prev_hash is not 32 bytes", false);
    if (!c.started) {
      // The oldest record on disk: the chain's start, or (older segments
      // pruned) the first record of a segment.
      if (rec.seq() == 0)
        return bad("sequence number 0", false);
      if (rec.seq() == 1 && rec.prev_hash() != as_view(digest{}))
        return bad("the first record (seq 1) does not start a chain", false);
      if (rec.seq() > 1 && rec.kind() != pb::ROTATED)
        return bad("the log starts mid-chain at seq " +
                       std::to_string(rec.seq()) +
                       ", but not at the start of a segment: records before "
                       "it were removed",
                   false);
      v.mid_chain = rec.seq() > 1;
      v.first_seq = rec.seq();
      c.seq = rec.seq() - 1;
      std::memcpy(c.head.data(), rec.prev_hash().data(), 32);
      c.started = true;
    }
    if (rec.seq() != c.seq + 1) {
      auto why = "sequence number " + std::to_string(rec.seq()) +
                 ", expected " + std::to_string(c.seq + 1);
      if (rec.seq() > c.seq + 1)
        why += ": records " + std::to_string(c.seq + 1) + " to " +
               std::to_string(rec.seq() - 1) +
               " are missing (a removed segment?)";
      return bad(why, false);
    }
    if (rec.prev_hash() != as_view(c.head))
      return bad("does not link to the previous record", false);
    bool batch = rec.kind() == pb::BATCH;
    auto h = chain_hash(c.head.data(), c.head.size(), r, len - hash_trailer);
    if (std::memcmp(h.data(), r + len - 32, 32) != 0)
      return bad(batch
                     ? "hash mismatch: a record of the BATCH of " +
                           std::to_string(rec.count()) + " records from seq " +
                           std::to_string(rec.seq()) + " was altered"
                     : "hash mismatch: the record was altered",
                 false);
    if (batch)
      if (auto why = batch_problem(rec); !why.empty())
        return bad(why, false);
    if (f.records == 0)
      f.first_seq = rec.seq();
    uint64_t n = batch ? rec.count() : 1;
    c.seq = rec.seq() + n - 1;
    c.head = h;
    v.good_records += n;
    v.last_seq = c.seq;
    f.records += n;
    f.last_seq = c.seq;
    if (on_record && batch)
      expand_batch(rec, expanded, on_record);
    else if (on_record)
      on_record(rec);
    off = p + len;
  }
  return true;
}

} // namespace

audit_verdict
audit_log::verify(const std::string& path,
                  const std::function<void(const pb::AuditRecord&)>& on_record,
                  const std::function<void(const std::string&)>& on_file) {
  audit_verdict v;
  auto files = audit_segments(path);
  if (files.empty() || ::access(path.c_str(), F_OK) == 0)
    files.push_back(path);
  chain_cursor c;
  for (size_t i = 0; i < files.size(); ++i) {
    mapped_file m{files[i]};
    audit_file f;
    f.path = files[i];
    f.bytes = m.size;
    if (!m.error.empty()) {
      v.first_bad = c.started ? c.seq + 1 : 1;
      v.reason = m.error;
      v.bad_file = files[i];
      v.bad_index = 1;
      v.files.push_back(std::move(f));
      v.head = c.head;
      return v;
    }
    if (on_file)
      on_file(files[i]);
    bool good = verify_file(m, i + 1 == files.size(), c, v, f, on_record);
    v.files.push_back(std::move(f));
    if (!good) {
      v.head = c.head;
      return v;
    }
  }
  v.ok = true;
  v.head = c.head;
  return v;
}

} // namespace cohort::audit
