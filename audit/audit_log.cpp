// Writing an audit log: records chained and batched, synced by the fsync
// policy, rotated into segments, and a log recovered at open (a torn tail
// cut, a RECOVERY record).
#include "audit/audit_log.hpp"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <memory>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <google/protobuf/io/coded_stream.h>

#include "audit/record_format.hpp"
#include "audit/segment_files.hpp"
#include "kernels/catalog.hpp"
#include "messages/cohort.pb.h"
#include "messages/errc.hpp"

namespace cohort::audit {

using namespace detail;
using std::chrono::steady_clock;

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

const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode))
    return "a directory";
  if (S_ISCHR(mode))
    return "a character device";
  if (S_ISBLK(mode))
    return "a block device";
  if (S_ISFIFO(mode))
    return "a FIFO";
  if (S_ISSOCK(mode))
    return "a socket";
  return "not a regular file";
}

// The file a log at `path` is: `path` itself when it does not exist yet
// (open creates it), the file a symbolic link names (the lock and the
// segments then go with that file's name, so that two names of one file
// share one lock), and an error for anything but a regular file with one
// name: a device (/dev/full), a FIFO or a directory cannot hold a chain,
// and a second name (a hard link) would let a writer that locks the other
// name write the same file.
caf::expected<std::string> log_file(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT)
      return path;
    return make_error(errc::io_error,
                      io_failure(path + ": cannot stat the audit log"));
  }
  std::string file = path;
  if (S_ISLNK(st.st_mode)) {
    std::unique_ptr<char, void (*)(void*)> real{::realpath(path.c_str(),
                                                           nullptr),
                                                &std::free};
    if (!real) {
      if (errno == ENOENT)
        return make_error(errc::io_error,
                          path + ": the audit log is a symbolic link to a "
                                 "file that does not exist");
      return make_error(errc::io_error,
                        io_failure(path + ": cannot follow the symbolic link"));
    }
    file = real.get();
    if (::stat(file.c_str(), &st) != 0)
      return make_error(errc::io_error,
                        io_failure(file + ": cannot stat the audit log"));
  }
  if (!S_ISREG(st.st_mode))
    return make_error(errc::io_error,
                      path + ": the audit log must be a regular file; this "
                             "is " +
                          file_kind(st.st_mode));
  if (st.st_nlink > 1)
    return make_error(errc::io_error,
                      path + ": the audit log has " +
                          std::to_string(st.st_nlink) +
                          " names (hard links); a log has one name and one "
                          "writer");
  return file;
}

} // namespace

caf::expected<std::unique_ptr<audit_log>>
audit_log::open(const std::string& name, audit_options opts) {
  auto file = log_file(name);
  if (!file)
    return file.error();
  const std::string& path = *file;
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
  ends_.push_back({buffer_.size(), seq_});
}

void audit_log::name_table::set(std::vector<std::string> names) {
  for (auto& n : names)
    cut(n, max_field_bytes);
  names_ = std::move(names);
}

void audit_log::name_table::set(uint32_t index, std::string name) {
  if (index >= max_direct)
    return;
  cut(name, max_field_bytes);
  if (names_.size() <= index)
    names_.resize(size_t(index) + 1);
  names_[index] = std::move(name);
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

void audit_log::set_device_name(uint32_t index, std::string name) {
  devices_.set(index, std::move(name));
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
    // Memory stays bounded while the log cannot be written: unless a write
    // works now, the records are not chained, and the gap is recorded in
    // the chain where it is.
    auto err = try_write();
    if (err && buffer_.size() >= opts_.max_unwritten_bytes) {
      dropped_since_ += records;
      stats_.dropped += records;
      return err;
    }
  }
  if (dropped_since_ > 0)
    mark_gap();
  return caf::none;
}

caf::error audit_log::try_write() {
  if (failing_) {
    auto now = steady_clock::now();
    if (now < next_try_)
      return last_error_;
    next_try_ = now + retry_interval;
  }
  return write_batch();
}

void audit_log::mark_gap() {
  // Chained where the dropped records would have been.
  auto dropped = std::exchange(dropped_since_, 0);
  chain({audit_kind::recovery, "", 0, "", "",
         "AUDIT GAP: " + std::to_string(dropped) +
             " records were dropped while the log could not be written (" +
             describe(last_error_) + ")",
         0});
}

caf::error audit_log::append(const audit_event& ev, bool more_coming) {
  if (auto err = over_budget(1))
    return err;
  chain(ev);
  if (pending_ >=
      (more_coming ? uint64_t{max_group} * opts_.batch : uint64_t{opts_.batch}))
    return try_write();
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
      if (auto err = try_write(); err && !first)
        first = std::move(err);
  }
  return first;
}

caf::error audit_log::write_batch() {
  if (buffer_.empty())
    return caf::none;
  // Written in pieces of whole records, each kept once it is on disk: when
  // the disk has room for part of the buffer (a backlog after a failure),
  // that part is written and the rest waits, instead of the whole buffer
  // being written and taken back again and again.
  size_t kept = 0;
  size_t next_end = 0;
  caf::error err;
  while (kept < buffer_.size()) {
    // The piece: records up to write_piece_bytes, at least one.
    auto piece_end = next_end;
    uint64_t piece_seq = 0;
    while (piece_end < ends_.size() &&
           (piece_end == next_end ||
            ends_[piece_end].first - kept <= write_piece_bytes)) {
      piece_seq = ends_[piece_end].second;
      ++piece_end;
    }
    auto to = ends_[piece_end - 1].first;
    size_t done = kept;
    while (done < to) {
      auto n = ::write(fd_, buffer_.data() + done, to - done);
      if (n < 0) {
        if (errno == EINTR)
          continue;
        auto msg = io_failure(path_ + ": audit write failed");
        ++stats_.write_errors;
        // A retry writes the piece again: a partial one left in front of it
        // would break the chain in the middle of the file.
        if (done > kept && ::ftruncate(fd_, off_t(file_bytes_)) != 0)
          msg += io_failure("; cutting off the partial write failed too");
        err = failed(make_error(errc::io_error, msg));
        break;
      }
      done += size_t(n);
    }
    if (err)
      break;
    if (opts_.fsync == audit_fsync::interval && written_seq_ == synced_seq_)
      unsynced_since_ = steady_clock::now();
    file_bytes_ += to - kept;
    stats_.bytes_written += to - kept;
    stats_.records_written += piece_seq - written_seq_;
    pending_ -= piece_seq - written_seq_;
    written_seq_ = piece_seq;
    kept = to;
    next_end = piece_end;
  }
  if (kept == buffer_.size()) {
    buffer_.clear();
    ends_.clear();
  } else if (kept > 0) {
    buffer_.erase(0, kept);
    ends_.erase(ends_.begin(), ends_.begin() + ptrdiff_t(next_end));
    for (auto& e : ends_)
      e.first -= kept;
  }
  if (err)
    return err;
  failing_ = false;
  // Nothing came after the dropped records yet: the gap is the newest
  // thing in the chain.
  if (dropped_since_ > 0)
    mark_gap();
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

} // namespace cohort::audit
