// The bounds of a runtime config's counts and sizes, checked before any
// section is compiled: nothing a config allows can exhaust the host.
#pragma once

#include <caf/error.hpp>

#include "devices/memory/pool_resource.hpp"
#include "messages/cohort.pb.h"

namespace cohort::config {

/// Upper bounds on a config's counts and sizes: far above any real fleet,
/// low enough that nothing they allow can exhaust the host.
struct config_bounds {
  /// A simulated GPU: 1 TiB of memory, 64 streams, speeds and rates within
  /// 1e-3 .. 1e6 of nominal.
  static constexpr uint64_t max_sim_memory_mib = uint64_t{1} << 20;
  static constexpr uint32_t max_streams = 64;
  /// A real GPU's launch streams: its pool fences 16, one is the fill
  /// stream.
  static constexpr uint32_t max_gpu_streams =
      devices::memory::pool_resource::max_streams - 1;
  static constexpr double min_speed = 1e-3;
  static constexpr double max_speed = 1e6;
  /// Tenants, and per tenant: items in flight, held-back items.
  static constexpr int max_tenants = 4096;
  static constexpr uint32_t max_inflight = 1u << 20;
  static constexpr uint32_t max_queue_limit = 1u << 20;
  /// Any time in a config: one hour.
  static constexpr uint32_t max_ms = 3'600'000;
  /// Placements of one item.
  static constexpr uint32_t max_attempts = 1000;
  /// kernel_bundles: trusted keys and bundles to load; revoked entries.
  static constexpr int max_bundle_keys = 64;
  static constexpr int max_bundles = 64;
  static constexpr int max_revoked = 4096;
  /// CAF's scheduler: worker threads, messages per turn, poll attempts and
  /// intervals, and sleeps (one second).
  static constexpr uint32_t max_threads = 256;
  static constexpr uint32_t max_throughput = 1u << 20;
  static constexpr uint32_t max_poll_attempts = 1u << 20;
  static constexpr uint32_t max_sleep_us = 1'000'000;
};

/// Checks every count, size, time and number of `cfg`: finite and in range.
/// Returns malformed_config naming the first problem, or none. (compile
/// checks the bounds first, then each section.)
caf::error check_bounds(const pb::RuntimeConfig& cfg);

} // namespace cohort::config
