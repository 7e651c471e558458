// What the balancer decides about device-resident objects (docs/objects.md),
// as plain code over the object directory: which objects an item reads and
// whether it may, where it may run, what its run request carries to a
// device, and how an object is described. The balancer's handlers carry out
// the rest (stores, reads, drops, charges, audit records).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "messages/objects.hpp"
#include "messages/work.hpp"
#include "objects/object_directory.hpp"

namespace cohort::actors::balancer {

/// The readers' key of items not placed on a device (queued, parked,
/// waiting for memory): they hold their objects there.
inline constexpr size_t unplaced_key = 0xffffffff;

/// Device memory one copy of an object of `bytes` takes (what a device's
/// store_object allocates and the tenant is charged).
uint64_t object_block_bytes(uint64_t bytes);

/// The objects `item`'s inputs name, each once, in order of first use.
std::vector<uint64_t> objects_read(const work_item& item);

/// Why `item` may not read the objects it names: one that is not live
/// (invalid_arguments), of another tenant (not_granted), named with another
/// size or type (invalid_arguments), or lost (object_lost). None if it may.
caf::error check_objects(const objects::object_directory& dir,
                         const work_item& item);

/// The devices an item reading `ids` may run on: those holding a copy of
/// each object that has no host copy (every device when all have one). An
/// object being rebuilt does not narrow it: its items wait for the rebuild,
/// and their mask is worked out again after it.
uint64_t object_mask(const objects::object_directory& dir,
                     const std::vector<uint64_t>& ids);

/// `item` as device `d` gets it: inputs naming objects that `d` holds stay
/// names, the others become the objects' host copies. object_lost when an
/// object has neither.
caf::expected<work_item> item_for(const objects::object_directory& dir,
                                  const work_item& item, size_t d);

/// The object as clients see it; `names` are the devices' names by index.
object_info describe_object(const objects::object_entry& e,
                            const std::vector<std::string>& names,
                            int64_t now_ns);

} // namespace cohort::actors::balancer
