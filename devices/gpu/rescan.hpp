// Device rescan (docs/gpu.md): what a fresh scan of the machine's GPUs
// changes in the node's fleet. GPUs are matched by identity (vendor and
// UUID, the instance's for MIG; the PCI bus id when a GPU reports no
// UUID), never by ordinal: the runtime numbers what it sees, and a GPU
// that leaves shifts the ordinals of those after it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include <caf/expected.hpp>

#include "messages/device_info.hpp"

namespace cohort::devices::gpu {

/// A GPU as a scan found it: `ordinal` in its vendor's runtime (for a MIG
/// instance, 0 in a process that sees it alone, `visible`).
struct scanned_gpu {
  std::string vendor;
  int ordinal = 0;
  std::string visible;
  device_info info;
};

/// A GPU of the node's fleet, at device index `index`.
struct known_gpu {
  size_t index = 0;
  std::string vendor;
  int ordinal = 0;
  std::string visible;
  device_info info;
  /// Gone from the machine (a tombstone: its index is never reused for
  /// another GPU).
  bool removed = false;
  /// Scans in a row that did not find it.
  uint32_t missed = 0;
};

/// What one scan changes.
struct rescan_plan {
  /// Scanned GPUs the fleet does not have: indexes into the scan.
  std::vector<size_t> added;
  /// Known GPUs missing from `missing_scans` scans in a row: device
  /// indexes, to be lost for good.
  std::vector<size_t> vanished;
  /// Removed GPUs found again: (device index, index into the scan).
  std::vector<std::pair<size_t, size_t>> returned;
  /// Known GPUs found at another ordinal or view (their names stay):
  /// (device index, index into the scan).
  std::vector<std::pair<size_t, size_t>> moved;
  /// Per known GPU, in the order given: scans in a row without it, after
  /// this one (0 when found).
  std::vector<uint32_t> missed;
  /// Scanned GPUs left out: two with one identity (the scan is not
  /// trusted for them), as "identity: why".
  std::vector<std::string> ignored;
};

/// The scan's helper program, installed next to the GPU plugins.
inline constexpr const char* scan_program = "cohort-gpu-scan";

/// What a scan found.
struct gpu_scan {
  std::vector<scanned_gpu> gpus;
  /// What each backend said ("CUDA: no CUDA device").
  std::vector<std::string> notes;
  /// The vendors whose GPUs it listed (the plugin loaded, the runtime
  /// answered), and whose MIG instances it listed (the health library
  /// answered): a GPU of another is not missing, only unseen.
  std::set<std::string> listed;
  std::set<std::string> mig_listed;
};

/// At most this many GPUs in one scan's answer (more is refused).
inline constexpr size_t max_scanned_gpus = 256;

/// Lists the machine's GPUs in a fresh child process (cohort-gpu-scan,
/// found where the plugins are: COHORT_PLUGIN_PATH first): a GPU runtime
/// lists its GPUs once per process, so this process's runtime cannot tell
/// what appeared or left since. A helper that is not found, crashes, hangs
/// past `timeout` (killed) or answers what does not parse is an error
/// (io_error; timed_out), never a scan that found nothing. `cancelled`
/// (may be empty) is asked while it runs: true stops it (shutting_down).
/// Thread-safe.
caf::expected<gpu_scan>
scan_gpus(std::chrono::milliseconds timeout,
          const std::function<bool()>& cancelled = nullptr);

/// The identity a GPU is matched by: "vendor/uuid", or "vendor/pci:BUS"
/// (the canonical bus id) when it has no UUID; empty when it has neither.
std::string identity(const std::string& vendor, const device_info& info);

/// Compares a scan with the fleet. A known GPU the scan does not find is
/// counted missing, and vanishes once `missing_scans` (at least 1) scans in
/// a row have missed it: a GPU that a busy driver left out once is not
/// lost for it. Only GPUs the scan could see count as missing: those of a
/// vendor in `listed` (a MIG instance, one with a `visible`: in
/// `mig_listed`), with an identity; the others keep their count.
rescan_plan plan_rescan(const std::vector<known_gpu>& known,
                        const std::vector<scanned_gpu>& scanned,
                        uint32_t missing_scans,
                        const std::set<std::string>& listed,
                        const std::set<std::string>& mig_listed);

} // namespace cohort::devices::gpu
