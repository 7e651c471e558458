// One event for the audit log, before it is chained and written.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include <caf/error.hpp>
#include <caf/meta/load_callback.hpp>
#include <caf/meta/type_name.hpp>

namespace cohort {

/// What happened; values match `cohort.pb.AuditKind`.
enum class audit_kind : uint8_t {
  admitted = 1,
  rejected = 2,
  placed = 3,
  completed = 4,
  failed = 5,
  fallback = 6,
  device_event = 7,
  /// An alert started or stopped firing.
  alert = 8,
  /// An operator's call through the admin API.
  admin = 9,
  /// The log cut off a torn write when it was opened.
  recovery = 10,
  /// First record of a segment after a rotation.
  rotated = 11,
  /// A kernel bundle loaded or refused (12 is BATCH, a storage form).
  kernel_bundle = 13,
  /// A device-resident object made, stored, evicted, lost or freed
  /// (docs/objects.md).
  object = 14,
  /// An item cancelled: by whom, and what it was doing (docs/jobs.md).
  cancel = 15,
  /// A session of cohort exec, or a process's memory in it (docs/exec.md).
  exec_session = 16,
};

/// Returns the kind's name ("admitted", ...).
const char* to_string(audit_kind kind);

/// An event as the actors report it; the audit actor numbers, timestamps
/// (if unset) and chains it.
struct audit_event {
  audit_kind kind = audit_kind::admitted;
  std::string tenant;
  uint64_t work_id = 0;
  std::string device;
  std::string kernel;
  std::string detail;
  int64_t time_ns = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, audit_event& x) {
  auto kind = static_cast<uint8_t>(x.kind);
  auto load = caf::meta::load_callback([&]() -> caf::error {
    x.kind = static_cast<audit_kind>(kind);
    return caf::none;
  });
  return f(caf::meta::type_name("audit_event"), kind, x.tenant, x.work_id,
           x.device, x.kernel, x.detail, x.time_ns, load);
}

/// Nanoseconds since the Unix epoch, from the system clock.
int64_t wall_clock_ns();

/// A common-path event (an admission, a first placement, a completion) in
/// fixed binary form: names are indices into the runtime's tables (tenants
/// in the order of the config, devices by index, kernels by id), so that
/// recording one builds no string and allocates nothing. The audit log
/// writes a run of them as one BATCH record, hashed once (docs/audit.md).
struct audit_entry {
  int64_t time_ns = 0;
  uint64_t work_id = 0;
  /// admitted: the item's device-memory bytes; otherwise 0.
  uint64_t value = 0;
  uint32_t tenant = 0;
  /// `no_device` for none.
  uint16_t device = 0;
  /// An audit_kind: admitted, placed or completed.
  uint8_t kind = 0;
  /// A kernel id.
  uint8_t kernel = 0;

  static constexpr uint16_t no_device = 0xFFFF;
};

static_assert(sizeof(audit_entry) == 32 &&
              std::is_trivially_copyable_v<audit_entry>);

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, audit_entry& x) {
  return f(caf::meta::type_name("audit_entry"), x.time_ns, x.work_id, x.value,
           x.tenant, x.device, x.kind, x.kernel);
}

/// What one actor sends the audit actor at a time: fixed entries and full
/// events, in the order they happened: `events[i]` comes right before
/// `entries[at[i]]` (after the last entry when `at[i]` is entries.size()).
struct audit_batch {
  std::vector<audit_entry> entries;
  std::vector<audit_event> events;
  std::vector<uint32_t> at;

  bool empty() const { return entries.empty() && events.empty(); }

  size_t size() const { return entries.size() + events.size(); }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, audit_batch& x) {
  return f(caf::meta::type_name("audit_batch"), x.entries, x.events, x.at);
}

} // namespace cohort
