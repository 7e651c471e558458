// Cohort's one error enum, without CAF: the public API's errors
// (cohort::error::code) and, inside Cohort, the codes of its CAF errors
// (messages/errc.hpp). Values are stable: they are written to audit logs and
// cross processes.
#pragma once

#include <cstdint>
#include <string>

namespace cohort {

/// Every error Cohort reports. Errors carry a human-readable detail string as
/// their context; `describe()` renders both.
enum class errc : uint8_t {
  /// Not an error.
  none = 0,
  /// The kernel is not in the catalog.
  unknown_kernel,
  /// Inputs or arguments do not fit the kernel (wrong count or sizes).
  invalid_arguments,
  /// The tenant has no grant (grants are default-deny).
  unknown_tenant,
  /// The tenant's grant does not include this kernel or any usable device.
  not_granted,
  /// The tenant already has its maximum number of items in flight.
  over_inflight_quota,
  /// The item would take the tenant past its device-memory quota.
  over_memory_quota,
  /// A device refused an allocation (hard OOM); the item may run elsewhere.
  out_of_memory,
  /// The device was lost (off the bus, device-level Xid, sticky error).
  device_lost,
  /// The kernel faulted on the device (application-level Xid).
  kernel_fault,
  /// The kernel ran past its timeout; the device is treated as hung.
  kernel_timeout,
  /// No online device may run the item.
  no_device_available,
  /// The item was placed the maximum number of times and failed every time.
  retries_exhausted,
  /// A configuration file or message is malformed or inconsistent.
  malformed_config,
  /// A pipeline file is malformed or inconsistent.
  malformed_pipeline,
  /// A file could not be opened, read or written.
  io_error,
  /// The audit log's hash chain does not verify.
  audit_chain_broken,
  /// The runtime is shutting down and accepts no new work.
  shutting_down,
  /// A fault-injection request does not apply to this device.
  invalid_fault,
  /// A device's configured memory limit would be exceeded (soft OOM: the item
  /// waits, falls back to a CPU worker or is refused, per its tenant's policy).
  memory_limit,
  /// Memory returned to a resource that did not hand it out, was already
  /// returned, or came back with another size; nothing was changed.
  invalid_free,
  /// The tenant submits faster than its rate limit allows.
  over_rate_limit,
  /// No device has this name.
  unknown_device,
  /// The device cannot go from its state to the one asked for (an operator
  /// bringing a device online that is gone for good, say).
  invalid_transition,
  /// A sticky error poisoned the device's context: every later call fails,
  /// and only a new context (a new process on real GPUs) clears it.
  context_poisoned,
  /// An operator took the device offline; work on it moves elsewhere.
  device_offline,
  /// The supervisor restarted the device on purpose (with a lost sibling,
  /// strategy ONE_FOR_ALL); work on it moves elsewhere.
  device_restarted,
  /// The same client already has an item with this id in flight: the ends
  /// of the two could not be told apart.
  duplicate_id,
  /// The tenant's queue of held-back items is full.
  queue_full,
  /// The item was cancelled (by its client, or because the caller's wait
  /// ran out) before it ended.
  cancelled,
  /// A caller's wait ran out (`runtime::run` with a timeout); the item was
  /// cancelled.
  timed_out,
  /// The audit log cannot be written (a full disk, an I/O error): nothing
  /// is admitted until it can, so that nothing runs unaudited.
  audit_unavailable,
  /// A registered kernel's own code failed on the item (its CPU
  /// implementation threw): the item's end, not retried elsewhere.
  kernel_error,
  /// A kernel bundle was refused: unsigned, signed by an unknown or revoked
  /// key, revoked itself, tampered with, malformed, or its code did not
  /// load. The message starts with the reason's name.
  bundle_refused,
  /// A device-resident object the item reads is gone: every copy was lost
  /// with its device, and it had neither a host copy nor an item to make it
  /// again (docs/objects.md).
  object_lost,
  /// No live item, nor one that ended lately, has this job number
  /// (docs/jobs.md).
  unknown_item,
  /// The item would have fallen back to a CPU worker, its predicted end
  /// there was past its tenant's fallback budget, and the tenant's policy
  /// is FALLBACK_FAIL (docs/supervision.md).
  over_fallback_budget,
};

/// Returns the enumerator's name ("cancelled", ...).
std::string to_string(errc x);

} // namespace cohort
