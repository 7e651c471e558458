// Accounting: what tenants are charged for the items on each device, over
// the live quota book. A placement charges its items' device memory to the
// device, leaving it refunds the charge; a device lost with items on it
// keeps their charges (its pool holds their blocks until a reset) until it
// comes back or its memory is released for good. Plain code: the balancer
// says what happened and asks what may happen, and carries out the rest.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include <caf/error.hpp>

#include "messages/quota.hpp"
#include "quota/quota_book.hpp"

namespace cohort::actors::balancer {

/// One tenant's device-memory charge for an item. A merged launch charges
/// each member's tenant for its own item.
struct charge {
  int tenant = 0;
  uint64_t bytes = 0;
};

using charges = std::span<const charge>;

class accounting {
public:
  accounting() = default;

  /// Terms leased by the quota actor for `lease.devices.size()` devices.
  explicit accounting(quota_lease lease);

  /// New terms for the same tenants and devices: what each tenant uses and
  /// what is stranded carry over. False (and nothing changes) when the
  /// lease names other tenants or another number of devices.
  bool renew(quota_lease lease);

  /// Terms for the fleet with one more device (a GPU a rescan added): the
  /// same tenants, their old devices unchanged (quota_book::add_device).
  /// What each tenant uses, in flight and its rate tokens carry over; the
  /// new device has nothing charged or stranded. An error (and nothing
  /// changes) for any other lease.
  caf::error add_device(quota_lease lease);

  /// The live book: policies, admission counts, usage and headroom.
  quota::quota_book& book() { return book_; }
  const quota::quota_book& book() const { return book_; }

  /// The terms as leased, with nothing in use (what dry runs start from).
  const quota_lease& lease() const { return lease_; }

  /// Whether device `d`'s memory is metered (false for CPU workers).
  bool metered(size_t d) const { return d < 64 && (metered_ >> d & 1) != 0; }

  /// Bit d set: device d's memory is metered.
  uint64_t metered_mask() const { return metered_; }

  /// Why `cs` may not take device memory on device `d` now, all of them
  /// together (the first refusal); none if they may.
  caf::error check(charges cs, size_t d);

  /// `cs` were placed on device `d`.
  void charge_to(charges cs, size_t d);

  /// `cs` left device `d` (ended, cancelled, moved elsewhere).
  void refund(charges cs, size_t d);

  /// Device `d` was lost holding `cs`: they stay charged there, as its pool
  /// holds their blocks, until `release`.
  void strand(charges cs, size_t d);

  /// Device `d` was reset or its memory released for good: what was
  /// stranded there is refunded.
  void release(size_t d);

  /// Bytes stranded on device `d`.
  uint64_t stranded(size_t d) const;

private:
  quota_lease lease_;
  quota::quota_book book_;
  /// The lease's devices with memory, as a mask (read on every placement).
  uint64_t metered_ = 0;
  /// Per device: charges stranded there.
  std::vector<std::vector<charge>> stranded_;
};

} // namespace cohort::actors::balancer
