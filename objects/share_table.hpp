// The books of objects shared with other processes (docs/objects.md,
// "Sharing across processes"): exports, each with its token and grant, and
// the attachments made with them. Plain code without actors: the balancer
// keeps the live one and does what it decides (holds, pins, frees).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <caf/expected.hpp>

#include "messages/share.hpp"

namespace cohort::objects {

struct export_entry {
  std::string token;
  uint64_t object = 0;
  std::string tenant;
  share_grant grant;
  /// Attachments made with it and still live.
  uint32_t attached = 0;
};

struct attachment_entry {
  uint64_t id = 0;
  uint64_t object = 0;
  std::string token;
  share_peer peer;
  bool write = false;
  /// The device whose copy it maps (its index), or -1 for a snapshot of
  /// the host copy.
  int32_t device = -1;
};

class share_table {
public:
  /// A new export of `object`; returns its token (128 random bits, hex).
  std::string add_export(uint64_t object, std::string tenant,
                         share_grant grant);

  /// The export of `token`, or nullptr.
  const export_entry* find_export(const std::string& token) const;

  /// Revokes the export of `token` (of `tenant`; any tenant when empty).
  /// Attachments made with it stay. False when there is none.
  bool revoke(const std::string& token, const std::string& tenant);

  /// Whether `peer` may attach with `token`, read-write when `write`; the
  /// export on success. Errors: not_granted (an unknown or revoked token,
  /// another user, write under a read-only grant, the grant's limit of
  /// attachments reached). `own_uid` is the runtime's user (a grant's
  /// uid -1).
  caf::expected<const export_entry*> check(const std::string& token,
                                           const share_peer& peer, bool write,
                                           uint32_t own_uid) const;

  /// Records an attachment of `object` that `check` allowed (its export
  /// may have been revoked since); returns its id.
  uint64_t attach(const std::string& token, uint64_t object,
                  const share_peer& peer, bool write, int32_t device);

  /// Ends attachment `id`: what it was, or nothing when unknown.
  std::optional<attachment_entry> detach(uint64_t id);

  /// Forgets the exports of `object` (it was freed or lost); returns how
  /// many there were.
  size_t object_gone(uint64_t object);

  /// Attachments and exports of `object`, and every live attachment.
  uint32_t attached_to(uint64_t object) const;
  uint32_t exports_of(uint64_t object) const;
  size_t attachments() const { return attachments_.size(); }
  size_t exports() const { return exports_.size(); }

  /// Every live attachment of `object`.
  std::vector<const attachment_entry*> attachments_of(uint64_t object) const;

private:
  std::map<std::string, export_entry> exports_;
  std::map<uint64_t, attachment_entry> attachments_;
  uint64_t next_attachment_ = 1;
};

/// 32 hexadecimal digits from the kernel's random source (getrandom).
std::string random_token();

/// A memfd holding a copy of `bytes` bytes at `data`, sealed against
/// writes, growing and shrinking: another process maps it read-only.
/// Returns the descriptor (close-on-exec), which the caller owns. Errors:
/// io_error.
caf::expected<int> sealed_snapshot(const void* data, size_t bytes,
                                   const char* name);

} // namespace cohort::objects
