// Kernels registered in the node's process (by the application or from a
// bundle) on GPUs in device host processes (docs/device-hosts.md,
// "Kernels"): which kernels a host cannot know by itself, the code the
// balancer sends a host before their first item there, and the sizes of a
// launch the host cannot work out (their rules are C++ in this process).
#pragma once

#include <bitset>
#include <cstdint>
#include <vector>

#include <caf/expected.hpp>

#include "messages/device_info.hpp"
#include "messages/host.hpp"
#include "messages/work.hpp"

namespace cohort::actors::balancer {

/// True for a kernel registered in this process only: not one every Cohort
/// process registers alike (the catalog's and the geo kernels).
bool node_only(kernel_id id);

/// True when a stage of `item` runs a node_only kernel.
bool has_node_only(const work_item& item);

/// Whether a device outside the node's process can run `item`'s node_only
/// kernels: a real GPU in a host process of this machine whose backend
/// each of them has code for. A remote host (another machine's, which
/// other nodes may reach too) and a simulated GPU (which runs a kernel's
/// CPU code) cannot.
bool host_runs(const device_info& device, const work_item& item);

/// The node_only kernels of `item` not yet in `sent`, as kernel_code for
/// `device`'s backend; marks them sent.
std::vector<kernel_code> code_to_send(const device_info& device,
                                      const work_item& item,
                                      std::bitset<256>& sent);

/// Per stage of a valid `item`, its output's elements and the threads its
/// launch needs on `device`'s backend (run_request::sizes); kernel_error
/// when a kernel's rule throws.
caf::expected<std::vector<uint64_t>> launch_sizes(const device_info& device,
                                                  const work_item& item);

/// Marks `item`'s node_only kernels in `bits` (a host process that could
/// not register them).
void mark_refused(std::bitset<256>& bits, const work_item& item);

/// True when a node_only kernel of `item` is marked in `bits`.
bool refused(const std::bitset<256>& bits, const work_item& item);

} // namespace cohort::actors::balancer
