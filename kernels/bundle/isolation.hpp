// Loading in isolation (docs/kernels.md): a verified bundle's code is first
// loaded in a child process, cohort-kernel-probe (devices/gpu/
// kernel_probe.cpp), which opens its shared objects and loads its GPU code
// through the node's own GPU plugins. Only when the child reports success
// does the node load the code itself; a child that crashes, hangs past the
// timeout or reports a driver error refuses the bundle, and the node goes
// on.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kernels/bundle/bundle.hpp"
#include "kernels/bundle/kernel_host.hpp"

namespace cohort::kernels::bundle {

/// The file name of the helper program, installed next to the GPU plugins.
inline constexpr const char* probe_program = "cohort-kernel-probe";

/// How long a child may take by default: a JIT compile of a large PTX
/// module takes seconds, not minutes.
inline constexpr std::chrono::milliseconds default_probe_timeout{60'000};

/// Where and how the child runs.
struct isolation {
  /// The helper's path. Empty: it was not found, and every bundle is
  /// refused (load_failed, naming `searched`).
  std::string helper;
  /// The folders searched for it, for that message.
  std::string searched;
  /// The GPU plugins the node loaded, by vendor ("CUDA" -> file); GPU
  /// code of a vendor not here is not probed (no GPU of it to run on).
  std::map<std::string, std::string> plugins;
  /// Past it, the child is killed and the bundle refused (load_hung).
  std::chrono::milliseconds timeout = default_probe_timeout;
  /// Where bundles' CPU code runs once loaded: in kernel host processes
  /// (kernel_host.hpp), or, for trusted bundles, in this process
  /// (kernel_bundles.cpu_code: IN_PROCESS).
  bool cpu_in_process = false;
  /// cohort-kernel-host's path, found where `helper` is. Empty: not found,
  /// and every bundle is refused unless cpu_in_process.
  std::string host;
  /// Each kernel host's address space in bytes; 0: not limited.
  uint64_t host_memory_limit = default_host_memory;
};

/// What the child found, for the audit record's detail and `cohort kernel
/// verify`.
struct probe_report {
  /// "cpu/libacme.so on cpu", "kernels.ptx on cuda0 (NVIDIA H100, sm_90)".
  std::vector<std::string> loaded;
  /// What was not checked and why ("kernels.hsaco: not loaded: the node
  /// has no HIP plugin").
  std::vector<std::string> notes;
};

/// Loads `b`'s code in a child process as `iso` says. A refusal says what
/// failed: load_failed with the driver's or the loader's words, load_crashed
/// with the signal and the step it was at, load_hung with the step it was
/// at. Never throws; thread-safe; the child is always reaped.
std::variant<probe_report, refused> probe(const checked_bundle& b,
                                          const isolation& iso);

} // namespace cohort::kernels::bundle
