// The object directory: every device-resident object of a runtime, where its
// copies are (devices, host), who holds it (client handles, items reading
// it), how it can be rebuilt (a host copy, or the item that produced it) and
// which copies may be evicted. Plain code, like the quota book: the balancer
// keeps the live one, says what happened and asks what may happen; the device
// actors hold the memory. Not an actor, not thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "kernels/dtype.hpp"
#include "messages/host_buffer.hpp"

namespace cohort::objects {

/// Devices by index, as a mask (the balancer's fleets have at most 64).
using device_mask = uint64_t;

inline bool has_device(device_mask m, size_t d) {
  return d < 64 && (m >> d & 1) != 0;
}

inline device_mask device_bit(size_t d) {
  return d < 64 ? device_mask{1} << d : 0;
}

/// One object. Immutable contents; everything else changes.
struct object_entry {
  uint64_t id = 0;
  std::string tenant;
  kernels::dtype type = kernels::dtype::f32;
  uint64_t elements = 0;
  /// The host copy (empty when there is none: an item's output kept on a
  /// device, not yet read back or spilled).
  host_buffer host;
  bool has_host = false;
  /// Devices holding a copy.
  device_mask replicas = 0;
  /// Devices a copy is being made on (a store in flight).
  device_mask storing = 0;
  /// Devices where an item read it from its host copy (no copy there): a
  /// second one there stores a copy (a replica).
  device_mask missed = 0;
  /// References of clients (the handles an application holds).
  uint32_t handles = 0;
  /// Items in flight that read it, per device they run on (0 for the host
  /// copy, a CPU worker's read).
  std::unordered_map<uint32_t, uint32_t> readers;
  /// Processes attached to it through the share socket, per device whose
  /// copy they map (unplaced_key for a snapshot of the host copy). They
  /// hold it, and the copy they map is never evicted.
  std::unordered_map<uint32_t, uint32_t> attached;
  /// The item whose output it is (its work id), when the balancer keeps
  /// that item to re-run it should every copy be lost.
  std::optional<uint64_t> producer;
  /// Its producing item re-runs now: items reading it wait for it.
  bool rebuilding = false;
  /// Objects whose producing item reads this one (kept to re-run it): they
  /// hold it.
  uint32_t dependents = 0;
  /// Order of last use (higher: more recent), for eviction.
  uint64_t last_use = 0;
  /// When it was made (steady clock, nanoseconds).
  int64_t created_ns = 0;

  uint64_t bytes() const { return elements * kernels::element_size(type); }

  /// Items reading it anywhere.
  uint32_t reader_count() const {
    uint32_t n = 0;
    for (auto& [d, k] : readers)
      n += k;
    return n;
  }
};

/// What became of the objects of a lost device.
struct loss_report {
  /// Still held elsewhere (another device or the host copy).
  std::vector<uint64_t> kept;
  /// Only their producing item can bring them back (it is re-run).
  std::vector<uint64_t> rerun;
  /// Gone: items reading them fail with object_lost.
  std::vector<uint64_t> lost;
};

/// A copy that may be evicted from a device to make room: dropped when the
/// object has another copy, spilled (read back to the host first) when not.
struct eviction {
  uint64_t id = 0;
  uint64_t bytes = 0;
  bool spill = false;
};

class object_directory {
public:
  /// A new object of `tenant` with one client handle; `host` is its host
  /// copy when it has one. Returns its id (never 0).
  uint64_t create(std::string tenant, kernels::dtype type, uint64_t elements,
                  std::optional<host_buffer> host, int64_t now_ns);

  /// An id for an object made later with `create_as` (an item's output
  /// kept on a device under it).
  uint64_t reserve_id() { return next_id_++; }

  /// As `create`, under an id from `reserve_id`; false (nothing made) for
  /// an id that is live or was never reserved.
  bool create_as(uint64_t id, std::string tenant, kernels::dtype type,
                 uint64_t elements, std::optional<host_buffer> host,
                 int64_t now_ns);

  /// The object, or nullptr for an id that is not (or no longer) live.
  object_entry* find(uint64_t id);
  const object_entry* find(uint64_t id) const;

  /// Live objects, in id order.
  std::vector<const object_entry*> list() const;
  size_t size() const { return entries_.size(); }

  // -- copies -----------------------------------------------------------------

  /// A copy on device `d` is being made / was made / failed or went.
  void storing(uint64_t id, size_t d);
  void stored(uint64_t id, size_t d);
  void unstored(uint64_t id, size_t d);

  /// The object has a host copy now (read back or spilled).
  void set_host(uint64_t id, host_buffer host);

  // -- holders ----------------------------------------------------------------

  /// A client handle more / less. Returns true when the object is to be
  /// freed now (no handles and no readers left): the caller drops its
  /// copies and then calls `erase`.
  void retain(uint64_t id);
  bool release(uint64_t id);

  /// A process attached to the copy on device `key` (unplaced_key: a
  /// snapshot of the host copy), and detached; `detach` returns true when
  /// the object is to be freed now.
  void attach(uint64_t id, uint32_t key);
  bool detach(uint64_t id, uint32_t key);

  /// An object made from an item that read this one holds it while it may
  /// have to re-run that item; `undepend` returns true when the object is
  /// to be freed now.
  void depend(uint64_t id);
  bool undepend(uint64_t id);

  /// Drops the host copy (a read-write attach makes the attached copy the
  /// only one).
  void drop_host(uint64_t id);

  /// An item reading it runs (or ran) on device `d`.
  void pin(uint64_t id, size_t d);
  /// As above; true when it is to be freed now.
  bool unpin(uint64_t id, size_t d);

  /// Takes the object out of the directory (its copies were dropped).
  void erase(uint64_t id);

  /// True when nobody holds it any more (handles, readers, attached
  /// processes, dependents).
  bool unreferenced(uint64_t id) const;

  // -- placement --------------------------------------------------------------

  /// Bytes of `ids` that device `d` holds (what an item reading them need
  /// not move there).
  uint64_t resident_bytes(const std::vector<uint64_t>& ids, size_t d) const;

  /// Marks a use of the object (for eviction order).
  void touch(uint64_t id);

  /// Copies on device `d` to evict, least recently used first, until at
  /// least `bytes` would be freed: copies no item on `d` reads, of objects
  /// of `tenant` (every tenant when empty). Fewer than `bytes` when nothing
  /// more can go. `block_bytes` is what a copy of an object occupies there.
  std::vector<eviction> evictable(size_t d, uint64_t bytes,
                                  const std::string& tenant,
                                  uint64_t (*block_bytes)(uint64_t)) const;

  // -- loss ---------------------------------------------------------------

  /// Device `d` was lost with its copies.
  loss_report device_lost(size_t d);

private:
  std::unordered_map<uint64_t, object_entry> entries_;
  uint64_t next_id_ = 1;
  uint64_t clock_ = 0;
};

} // namespace cohort::objects
