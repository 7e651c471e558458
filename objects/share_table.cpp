#include "objects/share_table.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "messages/errc.hpp"

namespace cohort::objects {

std::string random_token() {
  unsigned char bytes[16];
  size_t got = 0;
  while (got < sizeof bytes) {
    auto n = ::getrandom(bytes + got, sizeof bytes - got, 0);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      // No random source: no token can be made safely.
      throw std::runtime_error("getrandom failed");
    }
    got += static_cast<size_t>(n);
  }
  static constexpr char hex[] = "0123456789abcdef";
  std::string out;
  for (auto b : bytes) {
    out += hex[b >> 4];
    out += hex[b & 15];
  }
  return out;
}

caf::expected<int> sealed_snapshot(const void* data, size_t bytes,
                                   const char* name) {
  auto fail = [](const char* what) {
    return make_error(errc::io_error, std::string{"a snapshot of an object "
                                                  "to share: "} +
                                          what + ": " + std::strerror(errno));
  };
  int fd = ::memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0)
    return fail("memfd_create");
  auto* p = static_cast<const char*>(data);
  size_t done = 0;
  while (done < bytes) {
    auto n = ::write(fd, p + done, bytes - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      auto err = fail("write");
      ::close(fd);
      return err;
    }
    done += size_t(n);
  }
  if (::fcntl(fd, F_ADD_SEALS,
              F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL) != 0) {
    auto err = fail("sealing");
    ::close(fd);
    return err;
  }
  return fd;
}

std::string share_table::add_export(uint64_t object, std::string tenant,
                                    share_grant grant) {
  auto token = random_token();
  while (exports_.count(token) != 0)
    token = random_token();
  exports_.emplace(token,
                   export_entry{token, object, std::move(tenant), grant, 0});
  return token;
}

const export_entry* share_table::find_export(const std::string& token) const {
  auto i = exports_.find(token);
  return i != exports_.end() ? &i->second : nullptr;
}

bool share_table::revoke(const std::string& token, const std::string& tenant) {
  auto i = exports_.find(token);
  if (i == exports_.end() || (!tenant.empty() && i->second.tenant != tenant))
    return false;
  exports_.erase(i);
  return true;
}

caf::expected<const export_entry*> share_table::check(const std::string& token,
                                                      const share_peer& peer,
                                                      bool write,
                                                      uint32_t own_uid) const {
  auto* e = find_export(token);
  // The same answer for a token that never was and one revoked: a caller
  // guessing tokens learns nothing.
  if (e == nullptr)
    return make_error(errc::not_granted,
                      "no export has this token (unknown, revoked, or its "
                      "object was freed)");
  auto uid = e->grant.uid < 0 ? own_uid : static_cast<uint32_t>(e->grant.uid);
  if (peer.uid != uid)
    return make_error(errc::not_granted,
                      "the export is granted to user " + std::to_string(uid) +
                          ", not to user " + std::to_string(peer.uid));
  if (write && !e->grant.write)
    return make_error(errc::not_granted,
                      "the export is read-only; a read-write attach needs "
                      "a read-write export");
  if (e->grant.max_attached != 0 && e->attached >= e->grant.max_attached)
    return make_error(errc::not_granted,
                      "the export allows " +
                          std::to_string(e->grant.max_attached) +
                          " attachments at once, and they are all taken");
  return e;
}

uint64_t share_table::attach(const std::string& token, uint64_t object,
                             const share_peer& peer, bool write,
                             int32_t device) {
  if (auto i = exports_.find(token); i != exports_.end())
    ++i->second.attached;
  auto id = next_attachment_++;
  attachments_.emplace(
      id, attachment_entry{id, object, token, peer, write, device});
  return id;
}

std::optional<attachment_entry> share_table::detach(uint64_t id) {
  auto i = attachments_.find(id);
  if (i == attachments_.end())
    return std::nullopt;
  auto out = std::move(i->second);
  attachments_.erase(i);
  if (auto e = exports_.find(out.token); e != exports_.end())
    if (e->second.attached > 0)
      --e->second.attached;
  return out;
}

size_t share_table::object_gone(uint64_t object) {
  size_t n = 0;
  for (auto i = exports_.begin(); i != exports_.end();)
    if (i->second.object == object) {
      i = exports_.erase(i);
      ++n;
    } else {
      ++i;
    }
  return n;
}

uint32_t share_table::attached_to(uint64_t object) const {
  uint32_t n = 0;
  for (auto& [id, a] : attachments_)
    n += a.object == object;
  return n;
}

uint32_t share_table::exports_of(uint64_t object) const {
  uint32_t n = 0;
  for (auto& [t, e] : exports_)
    n += e.object == object;
  return n;
}

std::vector<const attachment_entry*>
share_table::attachments_of(uint64_t object) const {
  std::vector<const attachment_entry*> out;
  for (auto& [id, a] : attachments_)
    if (a.object == object)
      out.push_back(&a);
  return out;
}

} // namespace cohort::objects
