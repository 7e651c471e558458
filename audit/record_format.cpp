#include "audit/record_format.hpp"

#include <algorithm>
#include <cstring>
#include <memory>

#include <openssl/evp.h>

#include "messages/cohort.pb.h"

namespace cohort::audit::detail {

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

// Reads a varint of at most `max_bytes` bytes at `i`, advancing `i`.
varint_status read_varint(const uint8_t* d, size_t& i, size_t end,
                          uint64_t& out, size_t max_bytes) {
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

} // namespace cohort::audit::detail

namespace cohort::audit {

std::string to_hex(const digest& d) {
  static constexpr char hex[] = "0123456789abcdef";
  std::string out;
  for (auto b : d) {
    out += hex[b >> 4];
    out += hex[b & 0xF];
  }
  return out;
}

} // namespace cohort::audit
