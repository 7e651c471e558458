// One event for the audit log, before it is chained and written.
#pragma once

#include <cstdint>
#include <string>

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

} // namespace cohort
