// What the runtime tells of a device-resident object (docs/objects.md): to
// the client that made it (put, an item kept on a device) and to listings.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <caf/error.hpp>
#include <caf/meta/load_callback.hpp>
#include <caf/meta/type_name.hpp>
#include <caf/sec.hpp>

#include "kernels/dtype.hpp"

namespace cohort {

/// One object as the balancer's directory holds it.
struct object_info {
  /// Never 0 for an object; 0 in a result without one.
  uint64_t id = 0;
  std::string tenant;
  kernels::dtype type = kernels::dtype::f32;
  uint64_t elements = 0;
  /// Devices holding a copy, by name.
  std::vector<std::string> devices;
  /// It has a copy in host memory (made from a host buffer, read back or
  /// spilled).
  bool host_copy = false;
  /// Client handles and items in flight that hold it.
  uint32_t handles = 0;
  uint32_t readers = 0;
  /// Processes attached to it, and its live exports (docs/objects.md,
  /// "Sharing across processes").
  uint32_t attached = 0;
  uint32_t exports = 0;
  /// Milliseconds since it was made.
  int64_t age_ms = 0;

  uint64_t bytes() const { return elements * kernels::element_size(type); }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, object_info& x) {
  auto type = static_cast<uint8_t>(x.type);
  auto load = caf::meta::load_callback([&]() -> caf::error {
    if (type >= kernels::dtype_limit)
      return caf::sec::invalid_argument;
    x.type = static_cast<kernels::dtype>(type);
    return caf::none;
  });
  return f(caf::meta::type_name("object_info"), x.id, x.tenant, type,
           x.elements, x.devices, x.host_copy, x.handles, x.readers, x.attached,
           x.exports, x.age_ms, load);
}

/// What has happened to objects since the runtime started (the balancer's
/// counters; metrics and `GET /v1/stats`).
struct object_counters {
  /// Objects made (by put, or from an item's output kept on a device).
  uint64_t made = 0;
  /// Objects freed (their last holder let go).
  uint64_t freed = 0;
  /// Copies stored on devices.
  uint64_t copies_stored = 0;
  /// Copies evicted from a device to make room, and spills: only copies
  /// read back to host memory before they were evicted.
  uint64_t evicted = 0;
  uint64_t spilled = 0;
  /// Copies that went with a lost device, and objects lost with them (no
  /// other copy).
  uint64_t copies_lost = 0;
  uint64_t lost = 0;
  /// Sharing across processes: exports made and revoked, attaches granted
  /// and refused, detaches, and attachments reclaimed (their process exited,
  /// or closed its connection, without a detach); attachments live now.
  uint64_t exported = 0;
  uint64_t unexported = 0;
  uint64_t attaches = 0;
  uint64_t attach_refused = 0;
  uint64_t detaches = 0;
  uint64_t reclaimed = 0;
  uint64_t attached_now = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, object_counters& x) {
  return f(caf::meta::type_name("object_counters"), x.made, x.freed,
           x.copies_stored, x.evicted, x.spilled, x.copies_lost, x.lost,
           x.exported, x.unexported, x.attaches, x.attach_refused, x.detaches,
           x.reclaimed, x.attached_now);
}

} // namespace cohort
