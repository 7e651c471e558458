#include "actors/audit_log.hpp"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <memory>
#include <unistd.h>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl.h>
#include <openssl/evp.h>

#include "messages/cohort.pb.h"
#include "messages/errc.hpp"

namespace cohort::actors {

namespace {

// hash = SHA-256(prev_hash || body), where body is the record serialized
// with `hash` unset.
digest chain_hash(const std::string& prev_hash, const std::string& body) {
  // One context per thread, reset by each DigestInit.
  thread_local std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx{
      EVP_MD_CTX_new(), &EVP_MD_CTX_free};
  digest out{};
  unsigned len = 0;
  // Fetched once: EVP_sha256() makes OpenSSL 3 look the algorithm up, under
  // a lock, on every DigestInit.
  static EVP_MD* sha256 = EVP_MD_fetch(nullptr, "SHA256", nullptr);
  EVP_DigestInit_ex(ctx.get(), sha256, nullptr);
  EVP_DigestUpdate(ctx.get(), prev_hash.data(), prev_hash.size());
  EVP_DigestUpdate(ctx.get(), body.data(), body.size());
  EVP_DigestFinal_ex(ctx.get(), out.data(), &len);
  return out;
}

std::string as_bytes(const digest& d) {
  return std::string{reinterpret_cast<const char*>(d.data()), d.size()};
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

audit_log::audit_log(std::string path, int fd, uint32_t batch)
    : path_(std::move(path)), fd_(fd), batch_(batch == 0 ? 256 : batch) {
  // nop
}

audit_log::~audit_log() {
  flush(true);
  if (fd_ >= 0)
    ::close(fd_);
}

caf::expected<std::unique_ptr<audit_log>>
audit_log::open(const std::string& path, uint32_t batch) {
  audit_verdict existing;
  if (::access(path.c_str(), F_OK) == 0) {
    existing = verify(path);
    if (!existing.ok)
      return make_error(errc::audit_chain_broken,
                        path + ": record " +
                            std::to_string(existing.first_bad) + " is bad (" +
                            existing.reason +
                            "); refusing to append to a broken chain");
  }
  int fd =
      ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0)
    return make_error(errc::io_error, path + ": cannot open the audit log: " +
                                          std::strerror(errno));
  std::unique_ptr<audit_log> log{new audit_log(path, fd, batch)};
  log->seq_ = existing.good_records;
  log->head_ = existing.head;
  return log;
}

caf::error audit_log::append(const audit_event& ev) {
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
  rec.set_prev_hash(reinterpret_cast<const char*>(head_.data()), head_.size());
  rec.clear_hash();
  body_.clear();
  rec.AppendToString(&body_);
  head_ = chain_hash(rec.prev_hash(), body_);
  // `hash` is the highest-numbered field, so the full record is the body
  // followed by that field: tag (10 << 3 | length-delimited), length, bytes.
  constexpr uint8_t hash_tag = (10 << 3) | 2;
  uint8_t prefix[8];
  auto size = uint32_t(body_.size() + 2 + head_.size());
  auto* end = google::protobuf::io::CodedOutputStream::WriteVarint32ToArray(
      size, prefix);
  buffer_.append(reinterpret_cast<const char*>(prefix), size_t(end - prefix));
  buffer_.append(body_);
  buffer_.push_back(char(hash_tag));
  buffer_.push_back(char(head_.size()));
  buffer_.append(reinterpret_cast<const char*>(head_.data()), head_.size());
  if (++pending_ >= batch_)
    return flush(false);
  return caf::none;
}

caf::error audit_log::flush(bool sync) {
  size_t done = 0;
  while (done < buffer_.size()) {
    auto n = ::write(fd_, buffer_.data() + done, buffer_.size() - done);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      buffer_.erase(0, done);
      return make_error(errc::io_error, path_ + ": audit write failed: " +
                                            std::strerror(errno));
    }
    done += size_t(n);
  }
  buffer_.clear();
  pending_ = 0;
  if (sync && ::fdatasync(fd_) != 0)
    return make_error(errc::io_error,
                      path_ + ": fdatasync failed: " + std::strerror(errno));
  return caf::none;
}

audit_verdict audit_log::verify(
    const std::string& path,
    const std::function<void(const pb::AuditRecord&)>& on_record) {
  audit_verdict v;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    v.first_bad = 1;
    v.reason = std::string{"cannot open: "} + std::strerror(errno);
    return v;
  }
  google::protobuf::io::FileInputStream raw{fd};
  raw.SetCloseOnDelete(true);
  digest prev{};
  for (;;) {
    google::protobuf::io::CodedInputStream in{&raw};
    uint32_t size = 0;
    if (!in.ReadVarint32(&size)) {
      // Clean end of file, or a torn length prefix.
      if (in.CurrentPosition() == 0) {
        v.ok = true;
        break;
      }
      v.first_bad = v.good_records + 1;
      v.reason = "truncated length prefix";
      break;
    }
    auto fail = [&](std::string why) {
      v.first_bad = v.good_records + 1;
      v.reason = std::move(why);
    };
    std::string bytes;
    if (!in.ReadString(&bytes, int(size))) {
      fail("truncated record (" + std::to_string(size) + " bytes announced)");
      break;
    }
    pb::AuditRecord rec;
    if (!rec.ParseFromString(bytes)) {
      fail("record does not parse");
      break;
    }
    if (rec.seq() != v.good_records + 1) {
      fail("sequence number " + std::to_string(rec.seq()) + ", expected " +
           std::to_string(v.good_records + 1));
      break;
    }
    if (rec.prev_hash() != as_bytes(prev)) {
      fail("does not link to the previous record");
      break;
    }
    auto stored = std::move(*rec.mutable_hash());
    rec.clear_hash();
    std::string body;
    rec.SerializeToString(&body);
    auto h = chain_hash(rec.prev_hash(), body);
    if (stored != as_bytes(h)) {
      fail("hash mismatch: the record was altered");
      break;
    }
    prev = h;
    ++v.good_records;
    if (on_record) {
      rec.set_hash(std::move(stored));
      on_record(rec);
    }
  }
  v.head = prev;
  return v;
}

} // namespace cohort::actors
