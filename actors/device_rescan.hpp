// Device rescan at run time (docs/gpu.md, "Rescanning at run time"): the
// node lists the machine's GPUs afresh, in a child process
// (devices/gpu/rescan.hpp), now and then and when an operator asks, and
// compares what it finds with its fleet by identity. A GPU missing from
// enough scans in a row is removed: lost for good, its work moved on, never
// restarted. A removed GPU found again comes back when it runs in a host
// process (a new process opens it wherever it now is). A GPU that runs in
// a host process and is found at another ordinal is opened there by its
// next process. A GPU that appeared is added to the fleet, in a host
// process of its own; one that could not be (it would run in the node's
// process, the fleet is full) is reported and audited.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <caf/expected.hpp>

#include "devices/gpu/rescan.hpp"

namespace cohort::actors {

/// What one rescan found and did, each change as "device: what".
struct rescan_report {
  /// The scan's number since the node started (1 for the first).
  uint64_t scan = 0;
  /// Lost for good by this scan: missing from enough scans in a row.
  std::vector<std::string> removed;
  /// Removed before and found again: brought back (in a host process), or
  /// why not.
  std::vector<std::string> returned;
  /// Not found by this scan, not yet removed ("cuda1: missing from 1 of 2
  /// scans").
  std::vector<std::string> missing;
  /// Found at another ordinal: the next host process opens it there.
  std::vector<std::string> moved;
  /// GPUs that appeared since the node started (or were left out then),
  /// added to the fleet by this scan: "cuda2: what it is: added ...".
  std::vector<std::string> added;
  /// GPUs on the machine that the node does not run and could not add,
  /// with why.
  std::vector<std::string> found;
  /// What the scan's backends said, and what it could not trust.
  std::vector<std::string> notes;
};

/// Rescans since the node started.
struct rescan_counts {
  uint64_t scans = 0;
  /// Scans that failed (the helper was missing, crashed, hung).
  uint64_t failed = 0;
  uint64_t removed = 0;
  uint64_t returned = 0;
  /// GPUs that appeared, each counted once per appearance, and those of
  /// them added to the fleet.
  uint64_t found = 0;
  uint64_t added = 0;
};

/// devices.rescan_* of the config.
struct rescan_settings {
  /// Between periodic rescans; 0: only when asked.
  std::chrono::milliseconds interval{0};
  /// Scans in a row that must miss a GPU before it is removed.
  uint32_t missing_scans = 2;
  /// How long the scan's child may take.
  std::chrono::milliseconds timeout{30'000};
};

/// One of the node's real GPUs on this machine.
struct rescan_gpu {
  /// Its device index in the fleet.
  size_t index = 0;
  /// "CUDA" or "HIP", its ordinal, and its host's CUDA_VISIBLE_DEVICES
  /// (a MIG instance's UUID) as its host process opens it.
  std::string vendor;
  int ordinal = 0;
  std::string visible;
  device_info info;
  /// In a device host process of its own (else the node's process, whose
  /// GPU runtime does not see a GPU that came back).
  bool hosted = false;
};

/// What a rescan does to the fleet (the supervisor's messages), and how
/// it scans.
struct rescan_actions {
  std::function<void(size_t index, const std::string& why)> remove;
  std::function<void(size_t index, int ordinal, const std::string& visible)>
      move;
  std::function<void(size_t index)> restore;
  /// Adds a GPU that appeared to the fleet: what it became (its index and
  /// name), or why it was not added. None: GPUs that appear are reported
  /// only.
  std::function<caf::expected<rescan_gpu>(const devices::gpu::scanned_gpu&)>
      add;
  /// A device event for the audit log (device may be empty).
  std::function<void(const std::string& device, const std::string& detail)>
      audit;
  /// Lists the machine's GPUs now, within the timeout, giving up when
  /// asked to (devices::gpu::scan_gpus by default).
  std::function<caf::expected<devices::gpu::gpu_scan>(
      std::chrono::milliseconds, const std::function<bool()>& cancelled)>
      scan;
};

/// The node's rescans. Thread-safe: one scan at a time; counts and the
/// removed devices may be read meanwhile.
class device_rescanner {
public:
  device_rescanner(std::vector<rescan_gpu> gpus, rescan_settings settings,
                   rescan_actions act);
  ~device_rescanner();

  device_rescanner(const device_rescanner&) = delete;
  device_rescanner& operator=(const device_rescanner&) = delete;

  /// Scans now and acts on what changed. A failed scan changes nothing and
  /// is an error (io_error, timed_out), audited and counted; while another
  /// scan runs, invalid_transition at once.
  caf::expected<rescan_report> rescan();

  /// Starts rescanning every `interval` (nothing when it is 0) on a thread
  /// of its own, until stop().
  void start();
  void stop();

  rescan_counts counts() const;
  const rescan_settings& settings() const { return settings_; }

  /// The devices removed now, by name, with why.
  std::map<std::string, std::string> removed() const;

private:
  void loop();
  /// Adds GPU `s` that appeared (act_.add), unless it shares the bus of a
  /// GPU the fleet runs; what it became, or why not. Called under
  /// scan_mtx_ alone (an add asks the actors).
  caf::expected<rescan_gpu> add(const devices::gpu::scanned_gpu& s);

  rescan_settings settings_;
  rescan_actions act_;
  /// One scan at a time.
  std::mutex scan_mtx_;
  /// Guards the fleet's view, the counts and the thread's stop flag.
  mutable std::mutex mtx_;
  std::condition_variable cv_;
  std::vector<rescan_gpu> gpus_;
  std::vector<devices::gpu::known_gpu> known_;
  std::map<std::string, std::string> removed_;
  /// Identities of the GPUs found and not run, reported once each.
  std::set<std::string> reported_;
  rescan_counts counts_;
  bool stopping_ = false;
  std::thread thread_;
};

} // namespace cohort::actors
