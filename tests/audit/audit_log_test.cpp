// The hash-chained audit log: append, reopen, verify, tamper, truncate,
// recover torn writes, sync by policy, rotate and prune segments.
#include <catch2/catch.hpp>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <sys/resource.h>
#include <thread>

#include "audit/audit_log.hpp"
#include "messages/errc.hpp"
#include "tests/runtime_fixture.hpp"
#include "tests/temp_dir.hpp"

using namespace cohort;
using namespace cohort::audit;

namespace {

void write_events(const std::string& path, int n, uint32_t batch = 8) {
  auto log = audit_log::open(path, batch);
  REQUIRE(log);
  for (int i = 0; i < n; ++i)
    REQUIRE_FALSE((*log)->append(
        {audit_kind::admitted, "t", uint64_t(i), "", "axpy", "detail", 0}));
  REQUIRE_FALSE((*log)->flush(true));
}

using test::slurp;

void spit(const std::string& path, const std::string& bytes) {
  std::ofstream out{path, std::ios::binary | std::ios::trunc};
  out << bytes;
}

} // namespace

TEST_CASE("a written log verifies and reopening continues the chain",
          "[actors][audit]") {
  test::temp_dir dir;
  auto path = dir.file("a.log");
  write_events(path, 100);
  auto v = audit_log::verify(path);
  CHECK(v.ok);
  CHECK(v.good_records == 100);
  write_events(path, 5);
  v = audit_log::verify(path);
  CHECK(v.ok);
  CHECK(v.good_records == 105);
}

TEST_CASE("flipping one byte breaks the chain at that record",
          "[actors][audit]") {
  test::temp_dir dir;
  auto path = dir.file("a.log");
  write_events(path, 50);
  auto bytes = slurp(path);
  // Records are the same size here: flip a byte inside record 31's detail.
  auto pos = bytes.find("detail");
  auto record_size = bytes.find("detail", pos + 1) - pos;
  bytes[pos + 30 * record_size] ^= 0x01;
  spit(path, bytes);
  auto v = audit_log::verify(path);
  CHECK_FALSE(v.ok);
  CHECK(v.first_bad == 31);
  CHECK(v.good_records == 30);
  auto reopened = audit_log::open(path, 8);
  REQUIRE_FALSE(reopened);
  CHECK(code_of(reopened.error()) == errc::audit_chain_broken);
}

TEST_CASE("a truncated tail is reported, not ignored", "[actors][audit]") {
  test::temp_dir dir;
  auto path = dir.file("a.log");
  write_events(path, 10);
  auto bytes = slurp(path);
  spit(path, bytes.substr(0, bytes.size() - 3));
  auto v = audit_log::verify(path);
  CHECK_FALSE(v.ok);
  CHECK(v.first_bad == 10);
  CHECK_THAT(v.reason, Catch::Contains("truncated"));
}

TEST_CASE("removing a record breaks the chain", "[actors][audit]") {
  test::temp_dir dir;
  auto path = dir.file("a.log");
  write_events(path, 10);
  auto bytes = slurp(path);
  auto first = bytes.find("detail");
  auto size = bytes.find("detail", first + 1) - first;
  spit(path, bytes.substr(0, size) + bytes.substr(2 * size));
  auto v = audit_log::verify(path);
  CHECK_FALSE(v.ok);
  CHECK(v.first_bad == 2);
}

TEST_CASE("an unwritable audit path is a clear error", "[actors][audit]") {
  auto log = audit_log::open("/nonexistent-dir/x.log", 8);
  REQUIRE_FALSE(log);
  CHECK(code_of(log.error()) == errc::io_error);
  CHECK_THAT(describe(log.error()), Catch::Contains("/nonexistent-dir/x.log"));
}

namespace {

// Events with details of different lengths, so records differ in size.
audit_event event(uint64_t i) {
  return {audit_kind::completed,
          i % 3 == 0 ? "a" : "b",
          i,
          "sim0",
          "gemv",
          std::string(10 + i % 40, char('a' + i % 26)),
          int64_t(1000 + i)};
}

void append_events(audit_log& log, uint64_t first, uint64_t n) {
  for (uint64_t i = first; i < first + n; ++i)
    REQUIRE_FALSE(log.append(event(i)));
}

// Byte offset of each record's length prefix in `path` (a single file).
std::vector<size_t> record_offsets(const std::string& path) {
  std::vector<size_t> out;
  size_t off = 0;
  auto bytes = slurp(path);
  while (off < bytes.size()) {
    out.push_back(off);
    uint32_t len = 0;
    int shift = 0;
    uint8_t b = 0;
    do {
      b = uint8_t(bytes[off++]);
      len |= uint32_t(b & 0x7F) << shift;
      shift += 7;
    } while (b & 0x80);
    off += len;
  }
  return out;
}

std::vector<pb::AuditRecord> records_of(const std::string& path) {
  std::vector<pb::AuditRecord> out;
  auto v = audit_log::verify(
      path, [&](const pb::AuditRecord& r) { out.push_back(r); });
  REQUIRE(v.ok);
  return out;
}

} // namespace

TEST_CASE("every fsync policy writes a log that verifies", "[actors][audit]") {
  test::temp_dir dir;
  struct expectation {
    audit_fsync policy;
    // fdatasync calls after 100 records in batches of 8 and one flush.
    uint64_t fsyncs;
    uint64_t synced;
  };
  for (auto [policy, fsyncs, synced] :
       {expectation{audit_fsync::every_batch, 13, 100},
        expectation{audit_fsync::interval, 1, 100},
        expectation{audit_fsync::on_flush_only, 1, 100},
        expectation{audit_fsync::never, 0, 0}}) {
    INFO(to_string(policy));
    auto path = dir.file(std::string{to_string(policy)} + ".log");
    audit_options opts;
    opts.batch = 8;
    opts.fsync = policy;
    opts.fsync_interval = std::chrono::hours(1);
    auto log = audit_log::open(path, opts);
    REQUIRE(log);
    append_events(**log, 0, 100);
    auto before = (*log)->stats();
    CHECK(before.records_written == 96);
    CHECK(before.pending == 4);
    CHECK(before.records_synced ==
          (policy == audit_fsync::every_batch ? 96 : 0));
    REQUIRE_FALSE((*log)->flush(true));
    auto s = (*log)->stats();
    CHECK(s.records_appended == 100);
    CHECK(s.records_written == 100);
    CHECK(s.fsyncs == fsyncs);
    CHECK(s.records_synced == synced);
    CHECK(s.bytes_written == slurp(path).size());
    CHECK(s.write_errors == 0);
    auto v = audit_log::verify(path);
    CHECK(v.ok);
    CHECK(v.good_records == 100);
  }
}

TEST_CASE("the interval policy syncs written records when their time is up",
          "[actors][audit]") {
  test::temp_dir dir;
  audit_options opts;
  opts.batch = 4;
  opts.fsync = audit_fsync::interval;
  opts.fsync_interval = std::chrono::milliseconds(5);
  auto log = audit_log::open(dir.file("a.log"), opts);
  REQUIRE(log);
  CHECK_FALSE((*log)->sync_due_in());
  append_events(**log, 0, 4);
  auto due = (*log)->sync_due_in();
  REQUIRE(due);
  CHECK(*due <= std::chrono::milliseconds(5));
  CHECK((*log)->stats().records_synced == 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK((*log)->sync_due_in() == std::chrono::milliseconds(0));
  REQUIRE_FALSE((*log)->tick());
  CHECK((*log)->stats().records_synced == 4);
  CHECK((*log)->stats().fsyncs == 1);
  CHECK_FALSE((*log)->sync_due_in());
}

TEST_CASE("a torn last record is cut off at every byte offset",
          "[actors][audit]") {
  test::temp_dir dir;
  auto path = dir.file("a.log");
  {
    auto log = audit_log::open(path, 8);
    REQUIRE(log);
    append_events(**log, 0, 19);
    // A detail of 200 bytes: the last record's length prefix has two bytes,
    // so one cut leaves half a prefix.
    REQUIRE_FALSE((*log)->append({audit_kind::failed, "a", 19, "sim0", "gemv",
                                  std::string(200, 'z'), 5000}));
    REQUIRE_FALSE((*log)->flush(true));
  }
  auto whole = slurp(path);
  auto last = record_offsets(path).back();
  REQUIRE(uint8_t(whole[last]) >= 0x80);
  for (size_t cut = last; cut < whole.size(); ++cut) {
    INFO("cut at byte " << cut << " of " << whole.size());
    spit(path, whole.substr(0, cut));
    auto before = audit_log::verify(path);
    if (cut == last) {
      // A clean end: nothing to recover.
      CHECK(before.ok);
    } else {
      CHECK_FALSE(before.ok);
      CHECK(before.torn_tail);
      CHECK(before.first_bad == 20);
      CHECK(before.bad_offset == last);
    }
    {
      // No fdatasync: recovery does not depend on it, and 250 reopens with
      // it take seconds.
      audit_options opts;
      opts.fsync = audit_fsync::never;
      auto log = audit_log::open(path, opts);
      REQUIRE(log);
      CHECK((*log)->stats().recoveries == (cut == last ? 0 : 1));
      CHECK((*log)->records() == (cut == last ? 19 : 20));
      // The chain continues after the recovery record.
      REQUIRE_FALSE((*log)->append(event(100)));
      REQUIRE_FALSE((*log)->flush(true));
    }
    auto recs = records_of(path);
    REQUIRE(recs.size() == (cut == last ? 20 : 21));
    if (cut != last) {
      auto& rec = recs[19];
      CHECK(rec.kind() == pb::RECOVERY);
      CHECK_THAT(rec.detail(), Catch::Contains("torn write"));
      CHECK_THAT(rec.detail(),
                 Catch::Contains("at byte offset " + std::to_string(last)));
      CHECK_THAT(rec.detail(), Catch::Contains(std::to_string(cut - last) +
                                               " bytes after seq 19"));
    }
    CHECK(recs.back().work_id() == 100);
  }
}

TEST_CASE("a zero fill after a crash is cut off", "[actors][audit]") {
  test::temp_dir dir;
  auto path = dir.file("a.log");
  write_events(path, 10);
  auto whole = slurp(path);
  auto last = record_offsets(path).back();
  // A partial record followed by zeros, or zeros alone: what a file system
  // leaves when the file's size reached the disk before its data.
  for (auto tail : {whole.substr(last, 7) + std::string(4000, '\0'),
                    std::string(5, '\0'), std::string(4096, '\0')}) {
    spit(path, whole.substr(0, last) + tail);
    auto v = audit_log::verify(path);
    CHECK_FALSE(v.ok);
    CHECK(v.torn_tail);
    auto log = audit_log::open(path, 8);
    REQUIRE(log);
    CHECK((*log)->stats().recoveries == 1);
    CHECK((*log)->records() == 10);
  }
}

TEST_CASE("a complete record that fails its check is tampering, not a torn "
          "write",
          "[actors][audit]") {
  test::temp_dir dir;
  auto path = dir.file("a.log");
  write_events(path, 20);
  auto whole = slurp(path);
  auto offs = record_offsets(path);
  auto last = offs.back();
  // Every byte of the last record: its length prefix, body and hash.
  for (size_t at = last; at < whole.size(); ++at) {
    INFO("flipped byte " << at);
    auto bytes = whole;
    bytes[at] = char(bytes[at] ^ 0x01);
    spit(path, bytes);
    auto v = audit_log::verify(path);
    CHECK_FALSE(v.ok);
    CHECK_FALSE(v.torn_tail);
    CHECK(v.first_bad == 20);
    CHECK(v.bad_offset == last);
    auto log = audit_log::open(path, 8);
    REQUIRE_FALSE(log);
    CHECK(code_of(log.error()) == errc::audit_chain_broken);
    CHECK_THAT(describe(log.error()), Catch::Contains("record seq 20"));
    CHECK_THAT(describe(log.error()), Catch::Contains(path));
    CHECK_THAT(describe(log.error()),
               Catch::Contains("byte offset " + std::to_string(last)));
    // The evidence stays as it was.
    CHECK(slurp(path) == bytes);
  }
}

TEST_CASE("flipping any byte of a record in the middle names that record",
          "[actors][audit]") {
  test::temp_dir dir;
  auto path = dir.file("a.log");
  {
    auto log = audit_log::open(path, 16);
    REQUIRE(log);
    append_events(**log, 0, 300);
  }
  auto whole = slurp(path);
  auto offs = record_offsets(path);
  REQUIRE(offs.size() == 300);
  size_t target = 150; // 0-based: record seq 151
  for (size_t at = offs[target]; at < offs[target + 1]; ++at) {
    INFO("flipped byte " << at << ", record starts at " << offs[target]);
    auto bytes = whole;
    bytes[at] = char(bytes[at] ^ 0x20);
    spit(path, bytes);
    auto v = audit_log::verify(path);
    CHECK_FALSE(v.ok);
    CHECK(v.first_bad == target + 1);
    CHECK(v.bad_index == target + 1);
    CHECK(v.bad_offset == offs[target]);
    CHECK(v.bad_file == path);
    CHECK(v.good_records == target);
    CHECK_FALSE(v.torn_tail);
    CHECK_FALSE(audit_log::open(path, 8));
  }
}

TEST_CASE("rotation chains segments and the whole set verifies",
          "[actors][audit]") {
  test::temp_dir dir;
  auto path = dir.file("a.log");
  audit_options opts;
  opts.batch = 8;
  opts.rotate_bytes = 4096;
  {
    auto log = audit_log::open(path, opts);
    REQUIRE(log);
    append_events(**log, 0, 400);
    REQUIRE_FALSE((*log)->flush(true));
    auto s = (*log)->stats();
    CHECK(s.rotations >= 5);
    CHECK(s.segments == s.rotations);
    CHECK(s.segment == path);
    CHECK(audit_segments(path).size() == s.rotations);
    // Every segment passed rotate_bytes at a batch boundary.
    for (auto& seg : audit_segments(path))
      CHECK(slurp(seg).size() >= 4096);
  }
  auto segs = audit_segments(path);
  CHECK(segs.front() == path + ".1");
  std::vector<std::string> files;
  std::vector<pb::AuditRecord> recs;
  auto v = audit_log::verify(
      path, [&](const pb::AuditRecord& r) { recs.push_back(r); },
      [&](const std::string& f) { files.push_back(f); });
  REQUIRE(v.ok);
  CHECK_FALSE(v.mid_chain);
  CHECK(v.first_seq == 1);
  CHECK(v.files.size() == segs.size() + 1);
  CHECK(files.size() == segs.size() + 1);
  CHECK(files.back() == path);
  // 400 events and a ROTATED record at the start of each later file.
  CHECK(v.good_records == 400 + segs.size());
  for (size_t i = 1; i < v.files.size(); ++i) {
    auto& first = recs[v.files[i].first_seq - 1];
    CHECK(first.kind() == pb::ROTATED);
    CHECK_THAT(first.detail(),
               Catch::Contains("continues from a.log." + std::to_string(i)));
    CHECK(v.files[i].first_seq == v.files[i - 1].last_seq + 1);
  }
  // Reopening continues the chain in the active file.
  {
    auto log = audit_log::open(path, opts);
    REQUIRE(log);
    CHECK((*log)->records() == v.last_seq);
    append_events(**log, 400, 10);
  }
  auto again = audit_log::verify(path);
  CHECK(again.ok);
  CHECK(again.last_seq >= v.last_seq + 10);
}

TEST_CASE("a removed or reordered segment breaks the chain",
          "[actors][audit]") {
  test::temp_dir dir;
  auto path = dir.file("a.log");
  audit_options opts;
  opts.batch = 8;
  opts.rotate_bytes = 4096;
  {
    auto log = audit_log::open(path, opts);
    REQUIRE(log);
    append_events(**log, 0, 400);
  }
  auto segs = audit_segments(path);
  REQUIRE(segs.size() >= 4);
  auto seg2 = slurp(segs[1]);
  auto seg3 = slurp(segs[2]);
  SECTION("removed") {
    std::filesystem::remove(segs[1]);
    auto v = audit_log::verify(path);
    CHECK_FALSE(v.ok);
    CHECK(v.bad_file == segs[2]);
    CHECK(v.bad_index == 1);
    CHECK(v.bad_offset == 0);
    CHECK_THAT(v.reason, Catch::Contains("are missing"));
    auto log = audit_log::open(path, opts);
    REQUIRE_FALSE(log);
    CHECK(code_of(log.error()) == errc::audit_chain_broken);
  }
  SECTION("swapped") {
    spit(segs[1], seg3);
    spit(segs[2], seg2);
    auto v = audit_log::verify(path);
    CHECK_FALSE(v.ok);
    CHECK(v.bad_file == segs[1]);
    CHECK_THAT(v.reason, Catch::Contains("sequence number"));
  }
  SECTION("its head cut") {
    // Records removed from the front of the oldest file: a mid-chain start
    // that is not a segment's start.
    auto first = slurp(segs[0]);
    auto offs = record_offsets(segs[0]);
    spit(segs[0], first.substr(offs[3]));
    auto v = audit_log::verify(path);
    CHECK_FALSE(v.ok);
    CHECK(v.bad_file == segs[0]);
    CHECK_THAT(v.reason, Catch::Contains("starts mid-chain at seq 4"));
  }
  SECTION("a torn segment") {
    spit(segs[1], seg2.substr(0, seg2.size() - 5));
    auto v = audit_log::verify(path);
    CHECK_FALSE(v.ok);
    CHECK(v.bad_file == segs[1]);
    // Only the end of the active file may be cut off.
    CHECK_FALSE(v.torn_tail);
    CHECK_FALSE(audit_log::open(path, opts));
  }
}

TEST_CASE("keep_files prunes the oldest segments; the rest verifies mid-chain",
          "[actors][audit]") {
  test::temp_dir dir;
  auto path = dir.file("a.log");
  audit_options opts;
  opts.batch = 8;
  opts.rotate_bytes = 4096;
  opts.keep_files = 2;
  uint64_t rotations = 0;
  {
    auto log = audit_log::open(path, opts);
    REQUIRE(log);
    append_events(**log, 0, 500);
    REQUIRE_FALSE((*log)->flush(true));
    rotations = (*log)->stats().rotations;
    CHECK((*log)->stats().segments == 2);
  }
  REQUIRE(rotations > 3);
  auto segs = audit_segments(path);
  REQUIRE(segs.size() == 2);
  // The newest numbers stay; numbers are never reused.
  CHECK(segs[0] == path + "." + std::to_string(rotations - 1));
  CHECK(segs[1] == path + "." + std::to_string(rotations));
  auto v = audit_log::verify(path);
  REQUIRE(v.ok);
  CHECK(v.mid_chain);
  CHECK(v.first_seq > 1);
  CHECK(v.files.front().path == segs[0]);
  CHECK(v.last_seq == 500 + rotations);
  // A pruned log reopens and keeps going.
  {
    auto log = audit_log::open(path, opts);
    REQUIRE(log);
    append_events(**log, 500, 300);
  }
  CHECK(audit_segments(path).size() == 2);
  CHECK(audit_log::verify(path).ok);
}

TEST_CASE("a crash between rotating and starting the new file recovers",
          "[actors][audit]") {
  test::temp_dir dir;
  auto path = dir.file("a.log");
  audit_options opts;
  opts.batch = 8;
  opts.rotate_bytes = 4096;
  {
    auto log = audit_log::open(path, opts);
    REQUIRE(log);
    append_events(**log, 0, 100);
  }
  auto n = audit_segments(path).size();
  // The active file renamed, the new one not created yet.
  std::filesystem::rename(path, path + "." + std::to_string(n + 1));
  auto v = audit_log::verify(path);
  CHECK(v.ok);
  {
    auto log = audit_log::open(path, opts);
    REQUIRE(log);
    CHECK((*log)->records() == v.last_seq + 1);
  }
  auto recs = records_of(path);
  CHECK(recs.back().kind() == pb::ROTATED);
  CHECK_THAT(recs.back().detail(),
             Catch::Contains("a.log." + std::to_string(n + 1)));
}

TEST_CASE("over-long event strings are cut to keep records readable",
          "[actors][audit]") {
  test::temp_dir dir;
  auto path = dir.file("a.log");
  {
    auto log = audit_log::open(path, 8);
    REQUIRE(log);
    REQUIRE_FALSE((*log)->append(
        {audit_kind::failed, "a", 1, "", "", std::string(3 << 20, 'x'), 0}));
  }
  auto recs = records_of(path);
  REQUIRE(recs.size() == 1);
  CHECK(recs[0].detail().size() < max_record_bytes);
  CHECK_THAT(recs[0].detail(), Catch::EndsWith("[cut]"));
}

TEST_CASE("group commit: a full batch waits for records already coming",
          "[actors][audit]") {
  test::temp_dir dir;
  auto path = dir.file("a.log");
  audit_options opts;
  opts.batch = 8;
  auto log = audit_log::open(path, opts);
  REQUIRE(log);
  for (uint64_t i = 0; i < 100; ++i)
    REQUIRE_FALSE((*log)->append(event(i), true));
  // Nothing written yet: 100 < max_group batches.
  CHECK((*log)->stats().records_written == 0);
  CHECK((*log)->pending() == 100);
  // The burst's last record writes it all, in one write and one fdatasync.
  REQUIRE_FALSE((*log)->append(event(100)));
  auto s = (*log)->stats();
  CHECK(s.records_written == 101);
  CHECK(s.fsyncs == 1);
  // The group never grows past max_group batches.
  for (uint64_t i = 0; i < audit_log::max_group * 8; ++i)
    REQUIRE_FALSE((*log)->append(event(i), true));
  CHECK((*log)->stats().records_written == 101 + audit_log::max_group * 8);
  CHECK(audit_log::verify(path).ok);
}

TEST_CASE("a log has one writer: a second open is refused until the first "
          "closes",
          "[actors][audit]") {
  test::temp_dir dir;
  auto path = dir.file("a.log");
  auto first = audit_log::open(path, 8);
  REQUIRE(first);
  auto second = audit_log::open(path, 8);
  REQUIRE_FALSE(second);
  CHECK(code_of(second.error()) == errc::io_error);
  CHECK_THAT(describe(second.error()),
             Catch::Contains("in use by another writer") &&
                 Catch::Contains("pid " + std::to_string(::getpid())));
  first->reset();
  auto third = audit_log::open(path, 8);
  CHECK(third);
}

TEST_CASE("a log is one regular file with one name: devices, directories and "
          "second names are refused, a symbolic link shares its file's lock",
          "[actors][audit]") {
  test::temp_dir dir;
  auto refused = [](const std::string& path, const std::string& why) {
    auto log = audit_log::open(path, 8);
    REQUIRE_FALSE(log);
    CHECK(code_of(log.error()) == errc::io_error);
    CHECK_THAT(describe(log.error()), Catch::Contains(why));
  };
  // /dev/full took every write's error after admission had begun.
  refused("/dev/full", "must be a regular file; this is a character device");
  refused(dir.path.string(), "this is a directory");
  auto path = dir.file("a.log");
  {
    auto first = audit_log::open(path, 1);
    REQUIRE(first);
    REQUIRE_FALSE((*first)->append(
        {audit_kind::admitted, "t", 1, "", "gemv", "", 1}));
    // Another name of the same file: through a symbolic link the lock is
    // the file's, so the second writer is refused; a hard link is refused
    // whoever opens it.
    auto link = dir.file("link.log");
    std::filesystem::create_symlink(path, link);
    refused(link, "in use by another writer");
    auto hard = dir.file("hard.log");
    std::filesystem::create_hard_link(path, hard);
    refused(hard, "2 names (hard links)");
    std::filesystem::remove(hard);
  }
  // Through the link once the first writer is gone: the same chain goes on.
  auto again = audit_log::open(dir.file("link.log"), 1);
  REQUIRE(again);
  REQUIRE_FALSE((*again)->append(
      {audit_kind::completed, "t", 1, "cpu0", "gemv", "", 2}));
  again->reset();
  auto v = audit_log::verify(path);
  CHECK(v.ok);
  CHECK(v.good_records == 2);
  std::filesystem::create_symlink(dir.file("nowhere.log"), dir.file("dangling.log"));
  refused(dir.file("dangling.log"), "a file that does not exist");
}

TEST_CASE("while writes fail, records wait in bounded memory and the gap is "
          "chained",
          "[actors][audit]") {
  test::temp_dir dir;
  auto path = dir.file("a.log");
  audit_options opts;
  opts.batch = 4;
  opts.max_unwritten_bytes = 4096;
  auto log = audit_log::open(path, opts);
  REQUIRE(log);
  auto& l = **log;
  auto event = [](uint64_t i) {
    return audit_event{audit_kind::admitted, "t", i, "", "axpy", "detail", 0};
  };
  for (uint64_t i = 0; i < 10; ++i)
    REQUIRE_FALSE(l.append(event(i)));
  REQUIRE_FALSE(l.flush(true));
  {
    test::full_disk full{path};
    caf::error last;
    for (uint64_t i = 10; i < 500; ++i)
      if (auto err = l.append(event(i)))
        last = std::move(err);
    CHECK(code_of(last) == errc::io_error);
    CHECK_THAT(describe(last), Catch::Contains("No space left on device"));
    CHECK(l.failing());
    auto s = l.stats();
    CHECK(s.failing);
    CHECK(s.write_errors > 0);
    // Bounded: what did not fit in 4 KiB was dropped, not kept.
    CHECK(s.dropped > 0);
    CHECK(s.pending < 500);
    CHECK(code_of(l.flush(true)) == errc::io_error);
  }
  // The disk has room again: everything kept is written, after the record
  // that names the gap.
  REQUIRE_FALSE(l.flush(true));
  CHECK_FALSE(l.failing());
  auto dropped = l.stats().dropped;
  REQUIRE_FALSE(l.append(event(500)));
  REQUIRE_FALSE(l.flush(true));
  uint64_t admitted = 0;
  std::string gap;
  auto v = audit_log::verify(path, [&](const pb::AuditRecord& r) {
    if (r.kind() == pb::ADMITTED)
      ++admitted;
    if (r.kind() == pb::RECOVERY)
      gap = r.detail();
  });
  CHECK(v.ok);
  CHECK(admitted + dropped == 501);
  CHECK_THAT(gap, Catch::StartsWith("AUDIT GAP: " + std::to_string(dropped) +
                                    " records were dropped"));
}

namespace {

// Limits the size of files this process writes (RLIMIT_FSIZE) to `bytes`
// until destroyed: a write past it writes what fits and fails with EFBIG, as
// on a disk with that much room. `room(n)` gives it more.
class file_room {
public:
  explicit file_room(rlim_t bytes) {
    REQUIRE(::getrlimit(RLIMIT_FSIZE, &saved_) == 0);
    old_ = std::signal(SIGXFSZ, SIG_IGN);
    room(bytes);
  }
  ~file_room() {
    ::setrlimit(RLIMIT_FSIZE, &saved_);
    std::signal(SIGXFSZ, old_);
  }
  void room(rlim_t bytes) {
    rlimit rl{bytes, saved_.rlim_max};
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &rl) == 0);
  }

private:
  rlimit saved_{};
  void (*old_)(int) = SIG_DFL;
};

} // namespace

TEST_CASE("a backlog larger than the disk's room: what fits is written and "
          "kept, the rest waits, and the gap is recorded where it is",
          "[actors][audit]") {
  test::temp_dir dir;
  auto path = dir.file("a.log");
  audit_options opts;
  opts.batch = 4;
  opts.max_unwritten_bytes = 4 << 20;
  auto log = audit_log::open(path, opts);
  REQUIRE(log);
  auto& l = **log;
  std::string detail(4000, 'd');
  auto event = [&](uint64_t i) {
    return audit_event{audit_kind::admitted, "t", i, "", "axpy", detail, 0};
  };
  REQUIRE_FALSE(l.append(event(0)));
  REQUIRE_FALSE(l.flush(true));
  auto start = std::filesystem::file_size(path);
  uint64_t appended = 1;
  {
    file_room limit{start + 100};
    // 5 MiB of records, past the 4 MiB kept: the rest is dropped.
    for (; appended < 1300; ++appended)
      l.append(event(appended));
    auto s = l.stats();
    CHECK(l.failing());
    CHECK(s.dropped > 0);
    // Before: every record appended past the batch size wrote the whole
    // backlog again (and cut it back): one write error per record.
    CHECK(s.write_errors < 20);
    // Room for 1.5 MiB of the 4 MiB waiting.
    limit.room(start + (3 << 19));
    auto err = l.flush(true);
    CHECK(code_of(err) == errc::io_error);
    CHECK_THAT(describe(err), Catch::Contains("File too large"));
    CHECK(l.failing());
    // Before: the write of the whole backlog was taken back; now the pieces
    // that fitted stay, whole records that verify.
    auto written = std::filesystem::file_size(path);
    CHECK(written > start + (900 << 10));
    CHECK(written <= start + (3 << 19));
    auto v = audit_log::verify(path);
    CHECK(v.ok);
    CHECK(v.last_seq > 200);
    CHECK(l.stats().records_written == v.last_seq);
    CHECK(l.pending() == l.records() - v.last_seq);
  }
  // Room again: one record more, after the wait between tries, comes after
  // the record that names the gap.
  std::this_thread::sleep_for(audit_log::retry_interval +
                              std::chrono::milliseconds(10));
  REQUIRE_FALSE(l.append(
      {audit_kind::completed, "t", 4242, "", "axpy", "after the gap", 0}));
  REQUIRE_FALSE(l.flush(true));
  CHECK_FALSE(l.failing());
  auto dropped = l.stats().dropped;
  std::vector<pb::AuditRecord> recs;
  auto v = audit_log::verify(
      path, [&](const pb::AuditRecord& r) { recs.push_back(r); });
  CHECK(v.ok);
  REQUIRE(recs.size() >= 2);
  CHECK(recs.back().detail() == "after the gap");
  CHECK(recs[recs.size() - 2].kind() == pb::RECOVERY);
  CHECK_THAT(recs[recs.size() - 2].detail(),
             Catch::StartsWith("AUDIT GAP: " + std::to_string(dropped)));
  CHECK(recs.size() - 2 + dropped == appended);
}

namespace {

// `n` common-path entries from work id `first`: admitted (with bytes),
// placed and completed on device 1, in turn, tenant 0, kernel gemv.
std::vector<audit_entry> entries(uint64_t first, uint64_t n) {
  std::vector<audit_entry> out;
  for (uint64_t i = first; i < first + n; ++i) {
    audit_entry e;
    e.time_ns = 1000 + int64_t(i);
    e.work_id = i / 3;
    e.tenant = 0;
    e.kernel = static_cast<uint8_t>(kernel_id::gemv);
    switch (i % 3) {
    case 0:
      e.kind = uint8_t(audit_kind::admitted);
      e.device = audit_entry::no_device;
      e.value = 4096 + i;
      break;
    case 1:
      e.kind = uint8_t(audit_kind::placed);
      e.device = 1;
      break;
    default:
      e.kind = uint8_t(audit_kind::completed);
      e.device = 1;
    }
    out.push_back(e);
  }
  return out;
}

// Every record of a verified log, as readers see it.
std::vector<pb::AuditRecord> read_all(const std::string& path,
                                      audit_verdict* verdict = nullptr) {
  std::vector<pb::AuditRecord> out;
  auto v = audit_log::verify(
      path, [&](const pb::AuditRecord& r) { out.push_back(r); });
  if (verdict != nullptr)
    *verdict = v;
  return out;
}

} // namespace

TEST_CASE("fixed entries are chained as BATCH records and read back one by "
          "one",
          "[actors][audit]") {
  test::temp_dir dir;
  auto path = dir.file("a.log");
  {
    auto log = audit_log::open(path, 64);
    REQUIRE(log);
    (*log)->set_names({"alpha", "beta"}, {"cpu0", "sim0"});
    REQUIRE_FALSE((*log)->append(event(100)));
    auto e = entries(0, 300);
    REQUIRE_FALSE((*log)->append(std::span<const audit_entry>{e}));
    REQUIRE_FALSE((*log)->append(event(101)));
    auto s = (*log)->stats();
    CHECK(s.records_appended == 302);
    REQUIRE_FALSE((*log)->flush(true));
    CHECK((*log)->records() == 302);
  }
  // The batch is one record on disk: three in all.
  CHECK(record_offsets(path).size() == 3);
  audit_verdict v;
  auto recs = read_all(path, &v);
  CHECK(v.ok);
  CHECK(v.good_records == 302);
  CHECK(v.last_seq == 302);
  REQUIRE(recs.size() == 302);
  for (size_t i = 0; i < recs.size(); ++i)
    CHECK(recs[i].seq() == i + 1);
  CHECK(recs[0].work_id() == 100);
  CHECK(recs[301].work_id() == 101);
  auto& admitted = recs[1];
  CHECK(admitted.kind() == pb::ADMITTED);
  CHECK(admitted.tenant() == "alpha");
  CHECK(admitted.device().empty());
  CHECK(admitted.kernel() == "gemv");
  CHECK(admitted.detail() == "4096 bytes");
  CHECK(admitted.time_ns() == 1000);
  auto& placed = recs[2];
  CHECK(placed.kind() == pb::PLACED);
  CHECK(placed.device() == "sim0");
  CHECK(placed.detail().empty());
  CHECK(recs[3].kind() == pb::COMPLETED);
  CHECK(recs[300].work_id() == 99);
  // Reopening continues the chain after the batch.
  {
    auto log = audit_log::open(path, 64);
    REQUIRE(log);
    CHECK((*log)->records() == 302);
    auto e = entries(300, 3);
    REQUIRE_FALSE((*log)->append(std::span<const audit_entry>{e}));
  }
  v = audit_log::verify(path);
  CHECK(v.ok);
  CHECK(v.good_records == 305);
}

TEST_CASE("a long run of entries is split into BATCH records of at most "
          "max_batch_entries",
          "[actors][audit]") {
  test::temp_dir dir;
  auto path = dir.file("a.log");
  auto n = uint64_t(audit_log::max_batch_entries) * 2 + 5;
  {
    auto log = audit_log::open(path, 256);
    REQUIRE(log);
    auto e = entries(0, n);
    REQUIRE_FALSE((*log)->append(std::span<const audit_entry>{e}));
  }
  CHECK(record_offsets(path).size() == 3);
  audit_verdict v;
  auto recs = read_all(path, &v);
  CHECK(v.ok);
  REQUIRE(recs.size() == n);
  // Without names set, indices are written as #N.
  CHECK(recs[0].tenant() == "#0");
  CHECK(recs[1].device() == "#1");
  CHECK(recs[1].kernel() == "gemv");
  CHECK(recs.back().seq() == n);
}

TEST_CASE("flipping any byte of a BATCH record breaks the chain at its first "
          "record",
          "[actors][audit]") {
  test::temp_dir dir;
  auto path = dir.file("a.log");
  {
    auto log = audit_log::open(path, 16);
    REQUIRE(log);
    (*log)->set_names({"t"}, {"cpu0", "sim0"});
    append_events(**log, 0, 5);
    auto e = entries(0, 40);
    REQUIRE_FALSE((*log)->append(std::span<const audit_entry>{e}));
    append_events(**log, 5, 5);
  }
  auto whole = slurp(path);
  auto offs = record_offsets(path);
  REQUIRE(offs.size() == 11);
  for (size_t at = offs[5]; at < offs[6]; ++at) {
    INFO("flipped byte " << at << ", the batch starts at " << offs[5]);
    auto bytes = whole;
    bytes[at] = char(bytes[at] ^ 0x20);
    spit(path, bytes);
    auto v = audit_log::verify(path);
    CHECK_FALSE(v.ok);
    CHECK(v.first_bad == 6);
    CHECK(v.bad_index == 6);
    CHECK(v.bad_offset == offs[5]);
    CHECK(v.good_records == 5);
    CHECK_FALSE(v.torn_tail);
  }
  // A byte of an entry (the first one's work id, after its time of 1000
  // ns): the verdict names the batch and its records.
  auto bytes = whole;
  auto first = bytes.find(std::string("\xe8\x03\0\0\0\0\0\0", 8), offs[5]);
  REQUIRE(first < offs[6]);
  bytes[first + 8] ^= 0x01;
  spit(path, bytes);
  auto v = audit_log::verify(path);
  CHECK_THAT(v.reason, Catch::Contains("a record of the BATCH of 40 records "
                                       "from seq 6 was altered"));
}

TEST_CASE("a torn BATCH record at the end is cut off when the log is opened",
          "[actors][audit]") {
  test::temp_dir dir;
  auto path = dir.file("a.log");
  {
    auto log = audit_log::open(path, 16);
    REQUIRE(log);
    append_events(**log, 0, 3);
    auto e = entries(0, 30);
    REQUIRE_FALSE((*log)->append(std::span<const audit_entry>{e}));
  }
  auto whole = slurp(path);
  auto offs = record_offsets(path);
  REQUIRE(offs.size() == 4);
  spit(path, whole.substr(0, offs[3] + (whole.size() - offs[3]) / 2));
  auto v = audit_log::verify(path);
  CHECK_FALSE(v.ok);
  CHECK(v.torn_tail);
  CHECK(v.first_bad == 4);
  auto log = audit_log::open(path, 16);
  REQUIRE(log);
  CHECK((*log)->records() == 4);
  (*log).reset();
  audit_verdict after;
  auto recs = read_all(path, &after);
  CHECK(after.ok);
  REQUIRE(recs.size() == 4);
  CHECK(recs.back().kind() == pb::RECOVERY);
}

TEST_CASE("while writes fail, entries wait in bounded memory too",
          "[actors][audit]") {
  test::temp_dir dir;
  auto path = dir.file("a.log");
  audit_options opts;
  opts.batch = 4;
  opts.max_unwritten_bytes = 4096;
  auto log = audit_log::open(path, opts);
  REQUIRE(log);
  auto& l = **log;
  {
    test::full_disk full{path};
    caf::error last;
    for (uint64_t i = 0; i < 50; ++i) {
      auto e = entries(i * 30, 30);
      if (auto err = l.append(std::span<const audit_entry>{e}))
        last = std::move(err);
    }
    CHECK(code_of(last) == errc::io_error);
    auto s = l.stats();
    CHECK(s.dropped > 0);
    CHECK(s.pending < 1500);
  }
  REQUIRE_FALSE(l.flush(true));
  auto dropped = l.stats().dropped;
  uint64_t common = 0;
  std::string gap;
  auto v = audit_log::verify(path, [&](const pb::AuditRecord& r) {
    if (r.kind() == pb::RECOVERY)
      gap = r.detail();
    else
      ++common;
  });
  CHECK(v.ok);
  CHECK(common + dropped == 1500);
  CHECK_THAT(gap, Catch::StartsWith("AUDIT GAP: " + std::to_string(dropped)));
}
