#include "audit/audit_log.hpp"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <memory>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <google/protobuf/io/coded_stream.h>
#include <openssl/evp.h>

#include "kernels/catalog.hpp"
#include "messages/cohort.pb.h"
#include "messages/errc.hpp"

namespace cohort::audit {

namespace {

using std::chrono::steady_clock;

// The smallest rotate_bytes accepted: a segment must hold more than the
// ROTATED record that starts it, or every write would rotate.
constexpr uint64_t min_rotate_bytes = 4096;

constexpr uint32_t max_audit_batch = 65536;

// Strings of an event are cut to this, so that a record stays below
// max_record_bytes.
constexpr size_t max_field_bytes = 64 * 1024;

// `hash` is the highest-numbered field, so a record is its body followed by
// that field: tag (10 << 3 | length-delimited), length 32, the digest.
constexpr uint8_t hash_tag = (10 << 3) | 2;
constexpr size_t hash_trailer = 2 + 32;

// A zero fill this long at the end of a file is what a crash leaves when
// the file's size reached the disk before its data: a record never ends with
// this many zeros (it ends with a hash).
constexpr size_t zero_fill_bytes = 32;

// hash = SHA-256(prev_hash || body), where body is the record serialized
// with `hash` unset: exactly the bytes before the hash field.
digest chain_hash(const void* prev, size_t prev_size, const void* body,
                  size_t body_size) {
  // One context per thread, reset by each DigestInit.
  thread_local std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx{
      EVP_MD_CTX_new(), &EVP_MD_CTX_free};
  digest out{};
  unsigned len = 0;
  // Fetched once: EVP_sha256() makes OpenSSL 3 look the algorithm up, under
  // a lock, on every DigestInit.
  static EVP_MD* sha256 = EVP_MD_fetch(nullptr, "SHA256", nullptr);
  EVP_DigestInit_ex(ctx.get(), sha256, nullptr);
  EVP_DigestUpdate(ctx.get(), prev, prev_size);
  EVP_DigestUpdate(ctx.get(), body, body_size);
  EVP_DigestFinal_ex(ctx.get(), out.data(), &len);
  return out;
}

std::string_view as_view(const digest& d) {
  return {reinterpret_cast<const char*>(d.data()), d.size()};
}

std::string io_failure(const std::string& what) {
  return what + ": " + std::strerror(errno);
}

std::string file_name(const std::string& path) {
  auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string dir_name(const std::string& path) {
  auto slash = path.rfind('/');
  if (slash == std::string::npos)
    return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// The segments of `path` with their numbers, oldest first.
std::vector<std::pair<uint64_t, std::string>>
numbered_segments(const std::string& path) {
  std::vector<std::pair<uint64_t, std::string>> out;
  auto dir = dir_name(path);
  auto prefix = file_name(path) + ".";
  struct closer {
    void operator()(DIR* d) const { ::closedir(d); }
  };
  std::unique_ptr<DIR, closer> d{::opendir(dir.c_str())};
  if (!d)
    return out;
  while (auto* e = ::readdir(d.get())) {
    std::string_view name{e->d_name};
    if (name.size() <= prefix.size() || name.substr(0, prefix.size()) != prefix)
      continue;
    auto digits = name.substr(prefix.size());
    if (digits.size() > 18 || digits.front() == '0' ||
        !std::all_of(digits.begin(), digits.end(),
                     [](char c) { return c >= '0' && c <= '9'; }))
      continue;
    out.emplace_back(std::stoull(std::string{digits}),
                     path + "." + std::string{digits});
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Makes a created, renamed or removed file's name durable.
void sync_dir(const std::string& path) {
  int fd = ::open(dir_name(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return;
  ::fsync(fd);
  ::close(fd);
}

// A whole file, mapped read-only.
struct mapped_file {
  const uint8_t* data = nullptr;
  size_t size = 0;
  std::string error;

  explicit mapped_file(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      error = io_failure("cannot open");
      return;
    }
    struct stat st;
    if (::fstat(fd, &st) != 0) {
      error = io_failure("cannot stat");
    } else if (st.st_size > 0) {
      size = size_t(st.st_size);
      void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
      if (p == MAP_FAILED) {
        error = io_failure("cannot map");
        size = 0;
      } else {
        data = static_cast<const uint8_t*>(p);
      }
    }
    ::close(fd);
  }

  ~mapped_file() {
    if (data != nullptr)
      ::munmap(const_cast<uint8_t*>(data), size);
  }

  mapped_file(const mapped_file&) = delete;
  mapped_file& operator=(const mapped_file&) = delete;
};

enum class varint_status { ok, partial, malformed };

// Reads a varint of at most `max_bytes` bytes at `i`, advancing `i`.
varint_status read_varint(const uint8_t* d, size_t& i, size_t end,
                          uint64_t& out, size_t max_bytes = 10) {
  out = 0;
  for (size_t n = 0; n < max_bytes; ++n) {
    if (i >= end)
      return varint_status::partial;
    uint8_t b = d[i++];
    out |= uint64_t(b & 0x7F) << (7 * n);
    if ((b & 0x80) == 0)
      return varint_status::ok;
  }
  return varint_status::malformed;
}

// Whether a complete record whose stored hash matches its own prev_hash and
// body starts at `s`. Reads fields until the hash field, without trusting
// any length prefix: how a record is found whose prefix was altered.
bool self_consistent_record_at(const uint8_t* d, size_t s, size_t size) {
  size_t end = std::min(size, s + max_record_bytes);
  size_t i = s;
  const uint8_t* prev = nullptr;
  size_t prev_size = 0;
  while (i < end) {
    size_t tag_pos = i;
    uint64_t tag = 0;
    uint64_t x = 0;
    if (read_varint(d, i, end, tag) != varint_status::ok || (tag >> 3) == 0)
      return false;
    switch (tag & 7) {
    case 0:
      if (read_varint(d, i, end, x) != varint_status::ok)
        return false;
      break;
    case 1:
      i += 8;
      break;
    case 5:
      i += 4;
      break;
    case 2:
      if (read_varint(d, i, end, x) != varint_status::ok || x > end - i)
        return false;
      if (tag == hash_tag) {
        if (x != 32)
          return false;
        auto h = chain_hash(prev, prev_size, d + s, tag_pos - s);
        return std::memcmp(h.data(), d + i, 32) == 0;
      }
      if ((tag >> 3) == 9) {
        prev = d + i;
        prev_size = size_t(x);
      }
      i += size_t(x);
      break;
    default:
      return false;
    }
  }
  return false;
}

// Whether what follows the last good record, from `off` to the end of the
// file, is what a crash mid-write leaves: an incomplete record (`incomplete`:
// its length prefix or body runs past the end) or a zero fill, with no
// complete record anywhere after it. A complete record that fails its checks
// is not torn: it was altered.
bool torn_tail_at(const uint8_t* d, size_t off, size_t size, bool incomplete) {
  size_t zeros = 0;
  while (zeros < size - off && d[size - 1 - zeros] == 0)
    ++zeros;
  bool zero_filled = zeros >= zero_fill_bytes || zeros == size - off;
  if (!incomplete && !zero_filled)
    return false;
  // Every record body starts with its seq field (tag 0x08).
  for (size_t s = off + 1; s < size; ++s)
    if (d[s] == 0x08 && self_consistent_record_at(d, s, size))
      return false;
  return true;
}

// Why a BATCH record whose hash verified cannot be read (a writer's bug,
// not tampering); empty when its entries fit its count and tables.
std::string batch_problem(const pb::AuditRecord& rec) {
  auto n = uint64_t(rec.count());
  if (n == 0 || n > audit_log::max_batch_entries)
    return "a BATCH record holds " + std::to_string(n) + " records, not 1 to " +
           std::to_string(audit_log::max_batch_entries);
  if (rec.entries().size() != n * sizeof(audit_entry))
    return "a BATCH record of " + std::to_string(n) + " records has " +
           std::to_string(rec.entries().size()) + " bytes of entries, not " +
           std::to_string(n * sizeof(audit_entry));
  for (uint64_t i = 0; i < n; ++i) {
    audit_entry e;
    std::memcpy(&e, rec.entries().data() + i * sizeof e, sizeof e);
    auto k = e.kind;
    bool kind_ok = pb::AuditKind_IsValid(k) && k != pb::AUDIT_UNSPECIFIED &&
                   k != pb::RECOVERY && k != pb::ROTATED && k != pb::BATCH;
    if (!kind_ok || e.tenant >= uint32_t(rec.tenants_size()) ||
        e.kernel >= rec.kernels_size() ||
        (e.device != audit_entry::no_device && e.device >= rec.devices_size()))
      return "entry " + std::to_string(i + 1) + " of a BATCH record (seq " +
             std::to_string(rec.seq() + i) +
             ") has a kind or a name index out of range";
  }
  return {};
}

// Calls `on_record` with each record of a checked BATCH record, as it would
// have been written on its own (its prev_hash and hash are the batch's).
void expand_batch(
    const pb::AuditRecord& rec, pb::AuditRecord& out,
    const std::function<void(const pb::AuditRecord&)>& on_record) {
  out.Clear();
  out.set_prev_hash(rec.prev_hash());
  out.set_hash(rec.hash());
  for (uint32_t i = 0; i < rec.count(); ++i) {
    audit_entry e;
    std::memcpy(&e, rec.entries().data() + size_t(i) * sizeof e, sizeof e);
    out.set_seq(rec.seq() + i);
    out.set_time_ns(e.time_ns);
    out.set_kind(static_cast<pb::AuditKind>(e.kind));
    out.set_tenant(rec.tenants(int(e.tenant)));
    out.set_work_id(e.work_id);
    if (e.device == audit_entry::no_device)
      out.clear_device();
    else
      out.set_device(rec.devices(e.device));
    out.set_kernel(rec.kernels(e.kernel));
    if (e.kind == pb::ADMITTED)
      out.set_detail(std::to_string(e.value) + " bytes");
    else
      out.clear_detail();
    on_record(out);
  }
}

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

// "FILE: record seq N (record I of the file, byte offset X): why".
std::string bad_record(const audit_verdict& v) {
  return v.bad_file + ": record seq " + std::to_string(v.first_bad) +
         " (record " + std::to_string(v.bad_index) +
         " of the file, byte offset " + std::to_string(v.bad_offset) +
         "): " + v.reason;
}

void cut(std::string& s, size_t max) {
  if (s.size() > max)
    s.resize(max);
}

} // namespace

std::string to_hex(const digest& d) {
  static constexpr char hex[] = "0123456789abcdef";
  std::string out;
  for (auto b : d) {
    out += hex[b >> 4];
    out += hex[b & 0xF];
  }
  return out;
}

const char* to_string(audit_fsync x) {
  switch (x) {
  case audit_fsync::every_batch:
    return "every_batch";
  case audit_fsync::interval:
    return "interval";
  case audit_fsync::on_flush_only:
    return "on_flush_only";
  case audit_fsync::never:
    return "never";
  }
  return "unknown";
}

caf::expected<audit_options> audit_options_of(const pb::RuntimeConfig& cfg) {
  auto bad = [](const std::string& what) {
    return make_error(errc::malformed_config, "audit: " + what);
  };
  audit_options out;
  if (cfg.audit_batch() > max_audit_batch)
    return bad("audit_batch is " + std::to_string(cfg.audit_batch()) +
               ", at most " + std::to_string(max_audit_batch));
  if (cfg.audit_batch() > 0)
    out.batch = cfg.audit_batch();
  auto& a = cfg.audit();
  switch (a.fsync()) {
  case pb::FSYNC_EVERY_BATCH:
    out.fsync = audit_fsync::every_batch;
    break;
  case pb::FSYNC_INTERVAL:
    out.fsync = audit_fsync::interval;
    break;
  case pb::FSYNC_ON_FLUSH_ONLY:
    out.fsync = audit_fsync::on_flush_only;
    break;
  case pb::FSYNC_NEVER:
    out.fsync = audit_fsync::never;
    break;
  default:
    return bad("fsync is " + std::to_string(int(a.fsync())) +
               ", not one of FSYNC_EVERY_BATCH, FSYNC_INTERVAL, "
               "FSYNC_ON_FLUSH_ONLY, FSYNC_NEVER");
  }
  if (a.fsync_interval_ms() > 0 && a.fsync() != pb::FSYNC_INTERVAL)
    return bad("fsync_interval_ms is set but fsync is " +
               pb::AuditFsync_Name(a.fsync()) +
               "; it applies to FSYNC_INTERVAL only");
  if (a.fsync_interval_ms() > 600000)
    return bad("fsync_interval_ms is " + std::to_string(a.fsync_interval_ms()) +
               ", at most 600000");
  if (a.fsync_interval_ms() > 0)
    out.fsync_interval = std::chrono::milliseconds{a.fsync_interval_ms()};
  if (a.rotate_bytes() > 0 && a.rotate_bytes() < min_rotate_bytes)
    return bad("rotate_bytes is " + std::to_string(a.rotate_bytes()) +
               ", at least " + std::to_string(min_rotate_bytes) +
               " (or 0: never rotate)");
  if (a.keep_files() > 0 && a.rotate_bytes() == 0)
    return bad("keep_files is " + std::to_string(a.keep_files()) +
               " but rotate_bytes is 0: nothing rotates, so there are no "
               "segments to keep");
  out.rotate_bytes = a.rotate_bytes();
  out.keep_files = a.keep_files();
  if (a.on_write_failure() != pb::AUDIT_FAIL_CLOSED &&
      a.on_write_failure() != pb::AUDIT_KEEP_RUNNING)
    return bad("on_write_failure is " +
               std::to_string(int(a.on_write_failure())) +
               ", not AUDIT_FAIL_CLOSED (0) or AUDIT_KEEP_RUNNING (1)");
  if (a.max_unwritten_mib() > 4096)
    return bad("max_unwritten_mib is " + std::to_string(a.max_unwritten_mib()) +
               ", at most 4096");
  if (a.max_unwritten_mib() > 0)
    out.max_unwritten_bytes = uint64_t{a.max_unwritten_mib()} << 20;
  return out;
}

std::vector<std::string> audit_segments(const std::string& path) {
  std::vector<std::string> out;
  for (auto& [n, p] : numbered_segments(path))
    out.push_back(std::move(p));
  return out;
}

audit_log::audit_log(std::string path, int fd, audit_options opts)
    : path_(std::move(path)), fd_(fd), opts_(opts) {
  if (opts_.batch == 0)
    opts_.batch = 256;
  if (opts_.rotate_bytes > 0)
    opts_.rotate_bytes = std::max(opts_.rotate_bytes, min_rotate_bytes);
}

audit_log::~audit_log() {
  flush(true);
  if (fd_ >= 0)
    ::close(fd_);
  if (lock_fd_ >= 0)
    ::close(lock_fd_);
}

caf::expected<std::unique_ptr<audit_log>>
audit_log::open(const std::string& path, uint32_t batch) {
  audit_options opts;
  opts.batch = batch;
  return open(path, opts);
}

namespace {

// Takes the writer's lock of the log at `path`: an exclusive flock on
// `path.lock`, which holds the writer's pid. Returns its descriptor.
caf::expected<int> lock_log(const std::string& path) {
  auto lock_path = path + ".lock";
  int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0)
    return make_error(errc::io_error,
                      io_failure(lock_path + ": cannot open the lock file"));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    auto why = errno;
    char holder[32] = {0};
    auto n = ::pread(fd, holder, sizeof(holder) - 1, 0);
    ::close(fd);
    if (why == EWOULDBLOCK)
      return make_error(
          errc::io_error,
          path + ": the audit log is in use by another writer" +
              (n > 0 ? std::string{" (pid "} + std::string{holder, size_t(n)} +
                           ")"
                     : std::string{}) +
              "; one log has one writer (give each node its own audit_path)");
    errno = why;
    return make_error(errc::io_error,
                      io_failure(lock_path + ": cannot lock the audit log"));
  }
  auto pid = std::to_string(::getpid());
  if (::ftruncate(fd, 0) != 0 ||
      ::pwrite(fd, pid.data(), pid.size(), 0) != ssize_t(pid.size())) {
    // The pid is only for the message a second writer gets.
  }
  return fd;
}

} // namespace

caf::expected<std::unique_ptr<audit_log>>
audit_log::open(const std::string& path, audit_options opts) {
  auto lock = lock_log(path);
  if (!lock)
    return lock.error();
  // Released on every early return; the log owns it once made.
  std::unique_ptr<int, void (*)(int*)> lock_guard{
      &*lock, [](int* fd) { ::close(*fd); }};
  auto segments = numbered_segments(path);
  bool existed = ::access(path.c_str(), F_OK) == 0;
  audit_verdict v;
  v.ok = true;
  if (existed || !segments.empty()) {
    v = verify(path);
    // Only a torn write at the very end may be repaired: anything else bad
    // is evidence, and appending after it would bury it.
    if (!v.ok && !(v.torn_tail && v.bad_file == path))
      return make_error(errc::audit_chain_broken,
                        bad_record(v) +
                            "; refusing to append to a broken chain");
  }
  int fd =
      ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0)
    return make_error(errc::io_error,
                      io_failure(path + ": cannot open the audit log"));
  std::unique_ptr<audit_log> log{new audit_log(path, fd, opts)};
  log->lock_fd_ = *lock;
  lock_guard.release();
  log->stats_.opened_at_seq = v.last_seq;
  log->seq_ = v.last_seq;
  log->written_seq_ = log->synced_seq_ = v.last_seq;
  log->head_ = v.head;
  if (!segments.empty())
    log->last_segment_ = segments.back().first;
  log->segments_ = uint32_t(segments.size());
  std::string recovered;
  if (!v.ok) {
    struct stat st;
    uint64_t before = ::fstat(fd, &st) == 0 ? uint64_t(st.st_size) : 0;
    if (::ftruncate(fd, off_t(v.bad_offset)) != 0)
      return make_error(errc::io_error,
                        io_failure(path + ": cannot cut off a torn write"));
    recovered =
        "cut off a torn write: " + std::to_string(before - v.bad_offset) +
        " bytes after seq " + std::to_string(v.last_seq) + " at byte offset " +
        std::to_string(v.bad_offset) + " of " + file_name(path) + " (" +
        v.reason + ")";
    ++log->stats_.recoveries;
  }
  struct stat st;
  if (::fstat(fd, &st) != 0)
    return make_error(errc::io_error, io_failure(path + ": cannot stat"));
  log->file_bytes_ = uint64_t(st.st_size);
  if (!existed && opts.fsync != audit_fsync::never)
    sync_dir(path);
  // Every file after the first starts with a ROTATED record, so that a set
  // whose oldest segments were pruned starts at one (see verify).
  if (log->file_bytes_ == 0 && !segments.empty())
    log->chain({audit_kind::rotated, "", 0, "", "",
                "continues from " + file_name(segments.back().second) +
                    " (last seq " + std::to_string(v.last_seq) + ")",
                0});
  if (!recovered.empty())
    log->chain({audit_kind::recovery, "", 0, "", "", recovered, 0});
  if (log->pending_ > 0)
    if (auto err = log->flush(true))
      return err;
  return log;
}

void audit_log::chain(const audit_event& ev) {
  // The scratch record and body keep their capacity from call to call.
  auto& rec = scratch_;
  rec.set_seq(++seq_);
  rec.set_time_ns(ev.time_ns != 0 ? ev.time_ns : wall_clock_ns());
  rec.set_kind(static_cast<pb::AuditKind>(ev.kind));
  rec.set_tenant(ev.tenant);
  rec.set_work_id(ev.work_id);
  rec.set_device(ev.device);
  rec.set_kernel(ev.kernel);
  rec.set_detail(ev.detail);
  if (ev.tenant.size() > max_field_bytes ||
      ev.device.size() > max_field_bytes ||
      ev.kernel.size() > max_field_bytes ||
      ev.detail.size() > max_field_bytes) {
    // Readers refuse records past max_record_bytes as corrupt.
    cut(*rec.mutable_tenant(), max_field_bytes);
    cut(*rec.mutable_device(), max_field_bytes);
    cut(*rec.mutable_kernel(), max_field_bytes);
    if (rec.detail().size() > max_field_bytes) {
      cut(*rec.mutable_detail(), max_field_bytes);
      rec.mutable_detail()->append(" [cut]");
    }
  }
  rec.set_prev_hash(reinterpret_cast<const char*>(head_.data()), head_.size());
  rec.clear_hash();
  body_.clear();
  rec.AppendToString(&body_);
  seal();
  ++pending_;
  ++stats_.records_appended;
}

void audit_log::seal() {
  head_ = chain_hash(head_.data(), head_.size(), body_.data(), body_.size());
  uint8_t prefix[8];
  auto size = uint32_t(body_.size() + hash_trailer);
  auto* end = google::protobuf::io::CodedOutputStream::WriteVarint32ToArray(
      size, prefix);
  buffer_.append(reinterpret_cast<const char*>(prefix), size_t(end - prefix));
  buffer_.append(body_);
  buffer_.push_back(char(hash_tag));
  buffer_.push_back(char(head_.size()));
  buffer_.append(reinterpret_cast<const char*>(head_.data()), head_.size());
}

void audit_log::name_table::set(std::vector<std::string> names) {
  for (auto& n : names)
    cut(n, max_field_bytes);
  names_ = std::move(names);
}

std::string audit_log::name_table::name_of(uint32_t global) const {
  if (kernels_ && kernels::is_known(uint8_t(global)) && global < 256)
    return std::string{kernels::name(static_cast<kernels::kernel_id>(global))};
  if (!kernels_ && global < names_.size())
    return names_[global];
  return "#" + std::to_string(global);
}

void audit_log::set_names(std::vector<std::string> tenants,
                          std::vector<std::string> devices) {
  tenants_.set(std::move(tenants));
  devices_.set(std::move(devices));
}

void audit_log::chain(std::span<const audit_entry> entries) {
  // The entries go to disk as they are in memory, with local indices.
  static_assert(std::endian::native == std::endian::little,
                "BATCH entries are little-endian (docs/audit.md)");
  auto& rec = batch_scratch_;
  auto n = uint32_t(entries.size());
  rec.set_seq(seq_ + 1);
  seq_ += n;
  rec.set_time_ns(entries.front().time_ns != 0 ? entries.front().time_ns
                                               : wall_clock_ns());
  rec.set_kind(pb::BATCH);
  rec.set_prev_hash(reinterpret_cast<const char*>(head_.data()), head_.size());
  rec.clear_hash();
  rec.set_count(n);
  rec.clear_tenants();
  rec.clear_devices();
  rec.clear_kernels();
  auto* out = rec.mutable_entries();
  out->resize(size_t(n) * sizeof(audit_entry));
  auto* dst = out->data();
  for (auto e : entries) {
    if (e.time_ns == 0)
      e.time_ns = rec.time_ns();
    e.tenant = tenants_.local(e.tenant, *rec.mutable_tenants());
    if (e.device != audit_entry::no_device)
      e.device = uint16_t(devices_.local(e.device, *rec.mutable_devices()));
    e.kernel = uint8_t(kernels_.local(e.kernel, *rec.mutable_kernels()));
    std::memcpy(dst, &e, sizeof e);
    dst += sizeof e;
  }
  // The next record starts with fresh local tables.
  tenants_.reset();
  devices_.reset();
  kernels_.reset();
  body_.clear();
  rec.AppendToString(&body_);
  seal();
  pending_ += n;
  stats_.records_appended += n;
}

caf::error audit_log::over_budget(uint64_t records) {
  if (failing_ && buffer_.size() >= opts_.max_unwritten_bytes) {
    // Memory stays bounded while the log cannot be written: unless the
    // write works now, the records are not chained, and the gap is recorded
    // once writes work again.
    if (auto err = write_batch()) {
      dropped_since_ += records;
      stats_.dropped += records;
      return err;
    }
  }
  return caf::none;
}

caf::error audit_log::append(const audit_event& ev, bool more_coming) {
  if (auto err = over_budget(1))
    return err;
  chain(ev);
  if (pending_ >=
      (more_coming ? uint64_t{max_group} * opts_.batch : uint64_t{opts_.batch}))
    return write_batch();
  return caf::none;
}

caf::error audit_log::append(std::span<const audit_entry> entries,
                             bool more_coming) {
  caf::error first;
  while (!entries.empty()) {
    // Dropped whole while writes fail and memory is used up.
    if (auto err = over_budget(entries.size()))
      return first ? first : err;
    auto part =
        entries.first(std::min<size_t>(entries.size(), max_batch_entries));
    entries = entries.subspan(part.size());
    chain(part);
    if (pending_ >= (more_coming || !entries.empty()
                         ? uint64_t{max_group} * opts_.batch
                         : uint64_t{opts_.batch}))
      if (auto err = write_batch(); err && !first)
        first = std::move(err);
  }
  return first;
}

caf::error audit_log::write_batch() {
  if (buffer_.empty())
    return caf::none;
  size_t done = 0;
  while (done < buffer_.size()) {
    auto n = ::write(fd_, buffer_.data() + done, buffer_.size() - done);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      auto msg = io_failure(path_ + ": audit write failed");
      ++stats_.write_errors;
      // A retry writes the whole batch again: a partial one left in front
      // of it would break the chain in the middle of the file.
      if (done > 0 && ::ftruncate(fd_, off_t(file_bytes_)) != 0)
        msg += io_failure("; cutting off the partial write failed too");
      return failed(make_error(errc::io_error, msg));
    }
    done += size_t(n);
  }
  if (opts_.fsync == audit_fsync::interval && written_seq_ == synced_seq_)
    unsynced_since_ = steady_clock::now();
  file_bytes_ += buffer_.size();
  stats_.bytes_written += buffer_.size();
  stats_.records_written += pending_;
  written_seq_ = seq_;
  buffer_.clear();
  pending_ = 0;
  if (std::exchange(failing_, false) && dropped_since_ > 0) {
    // The first record after the failure says what the chain is missing.
    chain({audit_kind::recovery, "", 0, "", "",
           "AUDIT GAP: " + std::to_string(dropped_since_) +
               " records were dropped while the log could not be written (" +
               describe(last_error_) + ")",
           0});
    dropped_since_ = 0;
  }
  caf::error err;
  if (opts_.fsync == audit_fsync::every_batch ||
      (opts_.fsync == audit_fsync::interval &&
       steady_clock::now() - unsynced_since_ >= opts_.fsync_interval))
    err = sync();
  if (!err && opts_.rotate_bytes > 0 && file_bytes_ >= opts_.rotate_bytes)
    err = rotate();
  return err;
}

caf::error audit_log::sync() {
  if (synced_seq_ == written_seq_)
    return caf::none;
  if (::fdatasync(fd_) != 0) {
    ++stats_.write_errors;
    return failed(
        make_error(errc::io_error, io_failure(path_ + ": fdatasync failed")));
  }
  ++stats_.fsyncs;
  stats_.records_synced += written_seq_ - synced_seq_;
  synced_seq_ = written_seq_;
  if (buffer_.empty())
    failing_ = false;
  return caf::none;
}

caf::error audit_log::rotate() {
  // A segment is complete and durable before it gets its final name.
  if (opts_.fsync != audit_fsync::never)
    if (auto err = sync())
      return err;
  auto number = last_segment_ + 1;
  auto segment = path_ + "." + std::to_string(number);
  if (::rename(path_.c_str(), segment.c_str()) != 0) {
    ++stats_.write_errors;
    return make_error(errc::io_error,
                      io_failure(path_ + ": cannot rotate to " + segment));
  }
  int fd = ::open(path_.c_str(),
                  O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    auto msg = io_failure(path_ + ": cannot start a new segment");
    ++stats_.write_errors;
    // Keep appending to the old file, under its old name.
    ::rename(segment.c_str(), path_.c_str());
    return make_error(errc::io_error, msg);
  }
  ::close(fd_);
  fd_ = fd;
  last_segment_ = number;
  file_bytes_ = 0;
  ++stats_.rotations;
  // Pruning failures are not fatal: the next rotation prunes again.
  auto kept = numbered_segments(path_);
  size_t drop = opts_.keep_files > 0 && kept.size() > opts_.keep_files
                    ? kept.size() - opts_.keep_files
                    : 0;
  for (size_t i = 0; i < drop; ++i)
    ::unlink(kept[i].second.c_str());
  segments_ = uint32_t(numbered_segments(path_).size());
  if (opts_.fsync != audit_fsync::never)
    sync_dir(path_);
  // Written with the next batch; a crash before that leaves an empty file,
  // which `open` starts the same way.
  chain({audit_kind::rotated, "", 0, "", "",
         "continues from " + file_name(segment) + " (last seq " +
             std::to_string(seq_) + ")",
         0});
  return caf::none;
}

caf::error audit_log::flush(bool sync_now) {
  // A rotation inside a write leaves the new segment's first record
  // buffered: write until nothing is.
  while (!buffer_.empty())
    if (auto err = write_batch())
      return err;
  if (sync_now && opts_.fsync != audit_fsync::never)
    return sync();
  return caf::none;
}

caf::error audit_log::tick() {
  if (auto err = flush(false))
    return err;
  if (auto due = sync_due_in(); due && due->count() == 0)
    return sync();
  return caf::none;
}

std::optional<std::chrono::milliseconds> audit_log::sync_due_in() const {
  if (opts_.fsync != audit_fsync::interval || written_seq_ == synced_seq_)
    return std::nullopt;
  auto left = unsynced_since_ + opts_.fsync_interval - steady_clock::now();
  if (left <= steady_clock::duration::zero())
    return std::chrono::milliseconds{0};
  // Rounded up: a tick at the returned time finds the sync due.
  return std::chrono::ceil<std::chrono::milliseconds>(left);
}

caf::error audit_log::failed(caf::error err) {
  failing_ = true;
  last_error_ = err;
  return err;
}

cohort::audit_stats audit_log::stats() const {
  auto out = stats_;
  out.failing = failing_;
  out.pending = pending_;
  out.last_seq = seq_;
  out.segment = path_;
  out.segment_bytes = file_bytes_;
  out.segments = segments_;
  return out;
}

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
