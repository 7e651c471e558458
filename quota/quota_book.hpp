// The quota model: every tenant's grant and limits and what it uses of them.
// The balancer keeps the live one (it admits and places under the lease,
// and answers headroom and dry runs from it); `cohort quota` and
// `cohort simulate` use it without a runtime. Not an actor, not
// thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include <caf/error.hpp>

#include "messages/quota.hpp"

namespace cohort::quota {

/// "1048576 bytes": the exact figure, for error messages about quotas.
inline std::string bytes_text(uint64_t b) {
  return std::to_string(b) + " bytes";
}

class quota_book {
public:
  using clock = std::chrono::steady_clock;

  quota_book() = default;
  explicit quota_book(quota_lease lease);

  // -- tenants and devices
  // ------------------------------------------------------

  /// The tenant's index, or -1 for a tenant without a grant.
  int tenant_index(const std::string& tenant) const;
  const tenant_policy& policy(int t) const { return policies_[size_t(t)]; }
  size_t tenants() const { return policies_.size(); }
  const std::vector<device_budget>& devices() const { return devices_; }

  /// Appends the last device of `next` (a GPU a rescan found, docs/gpu.md),
  /// a lease compiled for the fleet with it: the same tenants in the same
  /// order, whose grants keep their old devices. Each tenant gets its bit,
  /// quota and reservation there; everything in use, in flight and every
  /// rate token stays. invalid_arguments, changing nothing, for another
  /// lease.
  caf::error add_device(const quota_lease& next);

  // -- admission: in-flight caps and rate
  // ---------------------------------------

  /// None if tenant `t` may start one more item at `now`; otherwise
  /// over_inflight_quota (the tenant's cap or the runtime's) or
  /// over_rate_limit, saying which.
  caf::error check_admit(int t, clock::time_point now);

  /// Counts one more item of `t` in flight and takes a rate token.
  void admit(int t, clock::time_point now);

  /// Counts one item of `t` fewer in flight.
  void end(int t);

  /// When the next rate token of `t` is due (now if one is there).
  clock::time_point next_token(int t, clock::time_point now);

  // -- device memory
  // ------------------------------------------------------------

  /// None if `bytes` of `t` fit device `d` now (always for CPU workers);
  /// otherwise over_memory_quota (the tenant's own quota, here or across
  /// devices), memory_limit (the device's configured limit below its
  /// memory) or out_of_memory (the device's memory itself, with other
  /// tenants' reservations), naming the numbers.
  caf::error check_place(int t, size_t d, uint64_t bytes) const;

  /// None if an item of `bytes` could ever run for `t` on a device of
  /// `mask` with everything else idle: it fits one of its devices with
  /// device memory, or the grant has none, or a CPU worker may take it
  /// (policy cpu_fallback). Otherwise over_memory_quota naming the most it
  /// could get.
  caf::error check_ever(int t, uint64_t bytes, uint64_t mask) const;

  /// Adds `bytes` of `t` on device `d` (no-op for CPU workers).
  void charge(int t, size_t d, uint64_t bytes);

  /// Takes back what `charge` added.
  void refund(int t, size_t d, uint64_t bytes);

  /// Bytes placed on device `d` by all tenants.
  uint64_t placed(size_t d) const { return placed_[d]; }

  /// Device memory tenant `t` holds across devices.
  uint64_t memory(int t) const { return state_[size_t(t)].memory; }

  /// Adds `bytes` of device memory that `t` holds outside the runtime, on
  /// devices of no item (programs run by `cohort exec`, docs/exec.md): it
  /// counts against the tenant's quota across devices, so items and
  /// programs share it. None when they fit; otherwise over_memory_quota
  /// naming the numbers.
  caf::error charge_outside(int t, uint64_t bytes);

  /// Takes back what `charge_outside` added.
  void refund_outside(int t, uint64_t bytes);

  /// What `t` holds outside the runtime now.
  uint64_t outside(int t) const { return state_[size_t(t)].outside; }

  // -- reporting
  // ------------------------------------------------------------------

  /// Current use of every tenant and device; `waiting` counts per tenant
  /// are the caller's (held items are not in the book).
  quota_usage usage() const;

  /// Replaces the use with `u` (a copy of the live book's, for headroom and
  /// dry runs). Tenants it does not name keep nothing.
  void set_usage(const quota_usage& u);

  /// What `t` may still use now, per granted device.
  tenant_headroom headroom(int t) const;

private:
  struct tenant_state {
    uint64_t inflight = 0;
    /// On the devices, and `outside`.
    uint64_t memory = 0;
    uint64_t outside = 0;
    std::vector<uint64_t> on_device;
    double tokens = 0;
    clock::time_point refilled{};
  };

  /// Reserved bytes of `t` on `d` not drawn yet.
  uint64_t unclaimed(int t, size_t d) const;
  /// Bytes of `d` other tenants reserved and have not drawn.
  uint64_t reserved_for_others(int t, size_t d) const;
  /// The largest item `t` could place on `d` with what is in use now, or
  /// with everything idle.
  uint64_t room(int t, size_t d, bool idle) const;
  void refill(tenant_state& st, const tenant_policy& p,
              clock::time_point now) const;

  uint64_t max_inflight_ = 0;
  std::vector<tenant_policy> policies_;
  std::unordered_map<std::string, int> index_;
  std::vector<device_budget> devices_;
  std::vector<tenant_state> state_;
  std::vector<uint64_t> placed_;
  /// Per device: reserved bytes not yet drawn, over all tenants.
  std::vector<uint64_t> unclaimed_total_;
  uint64_t inflight_total_ = 0;
};

} // namespace cohort::quota
