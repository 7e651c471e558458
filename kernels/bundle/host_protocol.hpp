// What a node and a kernel host process (kernel_host.hpp, host_main.cpp)
// say to each other about one call. Each is one SOCK_SEQPACKET message, so
// it arrives whole or not at all; the data of the call (inputs, output)
// lives in a memory file both map, the region.
#pragma once

#include <cstdint>

#include "cohort/kernel_abi.h"

namespace cohort::kernels::bundle::host {

/// First word of every message: a host from another build of Cohort is not
/// talked to.
inline constexpr uint32_t magic = 0x43484b31; // "CHK1"

/// Descriptors the host gets (after standard input, output and error).
inline constexpr int socket_fd = 3;
inline constexpr int region_fd = 4;
/// The bundle's shared objects come after these, in KernelHostStart's order.
inline constexpr int first_object_fd = 5;

/// Bytes of a failing kernel's message, with its NUL.
inline constexpr uint32_t error_bytes = 512;

/// Where one buffer lies in the region.
struct span {
  uint64_t offset = 0;
  uint64_t length = 0; // elements
  int32_t dtype = 0;
  int32_t pad = 0;
};

/// Node -> host: run kernel `kernel` (its index in KernelHostStart) on the
/// buffers the region holds.
struct call {
  uint32_t magic = host::magic;
  uint32_t kernel = 0;
  /// The region's size now: the host maps it again when it changed.
  uint64_t region_bytes = 0;
  double alpha = 0;
  uint64_t m = 0;
  uint64_t n = 0;
  uint64_t k = 0;
  uint32_t top_k = 0;
  uint32_t input_count = 0;
  span output;
  span inputs[COHORT_MAX_INPUTS];
};

/// How a call went in the host.
enum class outcome : uint32_t {
  /// The kernel ran and returned `rc`.
  ran = 0,
  /// The host could not map the region (its memory limit): `error` says.
  no_region = 1,
  /// The call named a kernel or buffers the host does not have.
  bad_call = 2,
};

/// Host -> node.
struct answer {
  uint32_t magic = host::magic;
  outcome how = outcome::ran;
  int32_t rc = 0;
  int32_t pad = 0;
  char error[error_bytes] = {};
};

} // namespace cohort::kernels::bundle::host
