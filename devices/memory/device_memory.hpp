// One device's memory, composed: the backend's upstream, the pool over it,
// and the adaptors on top (limits, fault injection, statistics, tracking).
// Simulated and GPU devices each own one; every launch allocates through it.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "devices/memory/fault_injection_adaptor.hpp"
#include "devices/memory/limiting_adaptor.hpp"
#include "devices/memory/pool_resource.hpp"
#include "devices/memory/statistics_adaptor.hpp"
#include "devices/memory/tracking_adaptor.hpp"
#include "messages/memory_stats.hpp"

namespace cohort::devices::memory {

/// Sees every allocation that succeeds and every deallocation of a device,
/// on the thread of the device's owner (tests check invariants with it).
class memory_observer {
public:
  virtual ~memory_observer() = default;
  virtual void on_allocate(const std::string& device, void* p, uint64_t bytes,
                           const owner_tag& owner) = 0;
  virtual void on_deallocate(const std::string& device, void* p,
                             uint64_t bytes) = 0;
  /// The device was reset: every allocation it had is gone.
  virtual void on_reset(const std::string& /*device*/) {}
};

/// How one device's memory is set up.
struct memory_options {
  /// Most bytes handed out at once (0: the device's capacity).
  uint64_t limit = 0;
  pool_options pool;
  /// Tenants' quotas on this device (bytes; 0: none).
  std::map<std::string, uint64_t> tenant_limits;
  /// Tenants' declared peaks on this device, reserved when it is made.
  std::map<std::string, uint64_t> reservations;
  /// Global tenant quotas shared by every device; with it, tenants it does
  /// not know are refused. May be null.
  std::shared_ptr<tenant_ledger> ledger;
  /// May be null.
  std::shared_ptr<memory_observer> observer;
};

/// The stack, top to bottom: statistics (every result counted), tracking
/// (owners, leak report, double-free guard), fault injection, limiting (soft
/// OOM), the pool, the upstream (hard OOM). Only the device's owner calls it.
class device_memory {
public:
  /// Builds the stack over `upstream` with fences and zero fills from
  /// `streams`, and takes the reservations. Errors: invalid_arguments for
  /// bad pool options, out_of_memory when a reservation cannot be met.
  static caf::expected<std::unique_ptr<device_memory>>
  make(std::string device, bool simulated, uint64_t capacity,
       std::unique_ptr<memory_resource> upstream,
       std::unique_ptr<stream_ordering> streams, memory_options opts);

  ~device_memory();

  caf::expected<void*> allocate(size_t bytes, stream_ref stream,
                                const owner_tag& owner);
  caf::error deallocate(void* p, size_t bytes, stream_ref stream);

  pool_resource& pool() { return *pool_; }
  limiting_adaptor& limits() { return *limiting_; }
  fault_injection_adaptor& faults() { return *faults_; }
  tracking_adaptor& tracking() { return *tracking_; }
  const statistics_adaptor& statistics() const { return *statistics_; }
  stream_ordering& streams() { return *streams_; }

  memory_snapshot snapshot() const;

  /// How another process maps the memory at `p` (see memory_resource).
  caf::expected<shared_region> share(const void* p) {
    return upstream_->share(p);
  }

  /// Replaces the options of a stack with nothing handed out: rebuilds the
  /// pool and the adaptors and takes the reservations (the runtime
  /// configures each device once its grants are compiled). A null observer
  /// keeps the current one. Errors: invalid_arguments while allocations are
  /// live or for bad pool options; out_of_memory when a reservation cannot
  /// be met (the stack is then unreserved).
  caf::error configure(memory_options opts);

  /// Periodic upkeep (defragmentation, trimming).
  void maintain() { pool_->maintain(); }

  /// The device was reset (or its context lost): forgets every allocation.
  /// With `memory_gone`, nothing is returned to the device (it took the
  /// memory along). Returns the leak report of what was dropped.
  std::string reset(bool memory_gone);

  device_memory(std::string device, bool simulated, uint64_t capacity,
                std::unique_ptr<memory_resource> upstream,
                std::unique_ptr<stream_ordering> streams, memory_options opts);

private:
  void build(memory_options opts);
  /// Reserves each tenant's bytes; on a failure drops them all again.
  caf::error
  take_reservations(const std::map<std::string, uint64_t>& reservations);
  /// Destroys the stack, top first.
  void tear_down();

  std::string device_;
  bool simulated_;
  uint64_t capacity_;
  std::shared_ptr<memory_observer> observer_;
  std::unique_ptr<memory_resource> upstream_;
  std::unique_ptr<stream_ordering> streams_;
  std::unique_ptr<pool_resource> pool_;
  std::unique_ptr<limiting_adaptor> limiting_;
  std::unique_ptr<fault_injection_adaptor> faults_;
  std::unique_ptr<statistics_adaptor> statistics_;
  std::unique_ptr<tracking_adaptor> tracking_;
  uint64_t dropped_ = 0;
};

} // namespace cohort::devices::memory
