// A kernel's output as a host buffer of its type, moved, not copied: what
// an object's copy read back from a device, or an item's output kept in
// host memory, becomes.
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "kernels/catalog.hpp"
#include "messages/host_buffer.hpp"

namespace cohort {

/// The output's values (topk_cosine's indices are left out).
inline host_buffer to_host_buffer(kernels::kernel_output&& out) {
  if (out.type == kernels::dtype::f32)
    return host_buffer{std::move(out.values)};
  auto n = out.elements();
  auto type = out.type;
  auto held = std::make_shared<const std::vector<uint8_t>>(std::move(out.raw));
  return host_buffer{held, static_cast<const void*>(held->data()), n, type};
}

} // namespace cohort
