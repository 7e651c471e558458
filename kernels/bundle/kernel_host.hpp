// Kernel hosts (docs/kernels.md, "Kernel hosts"): a bundle's CPU code runs
// in processes of its own, cohort-kernel-host (host_main.cpp), never in the
// node's. Each call's inputs go into a memory file the host maps, the
// kernel runs there, its output comes back the same way. A kernel that
// crashes, aborts or exits ends its host, one that runs past its time is
// killed with its host, one that allocates past the host's memory limit
// fails there: each ends its own call with a kernel_failure naming what
// happened, and the next call gets a new host.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kernels/bundle/host_protocol.hpp"
#include "kernels/catalog.hpp"
#include "messages/bundle.pb.h"

namespace cohort::kernels::bundle {

/// The file name of the kernel host program, installed next to the GPU
/// plugins and cohort-kernel-probe.
inline constexpr const char* host_program = "cohort-kernel-host";

/// A kernel host's address space by default (RLIMIT_AS): 4 GiB.
inline constexpr uint64_t default_host_memory = uint64_t{4} << 30;

/// How long a call that names no time limit (a reference run, a benchmark)
/// may run: the default kernel_timeout_ms of the supervision section.
inline constexpr std::chrono::milliseconds default_call_timeout{5000};

/// How the hosts of one bundle run.
struct host_settings {
  /// cohort-kernel-host's path.
  std::string program;
  /// Each host's address space in bytes (RLIMIT_AS); 0: not limited.
  /// Builds with AddressSanitizer cannot limit it (its shadow memory is
  /// larger than any limit) and say so in `notes`.
  uint64_t memory_limit = default_host_memory;
  /// How long a host may take to load the bundle's shared objects.
  std::chrono::milliseconds start_timeout{10'000};
};

/// What the kernel hosts of this process did, for the metrics
/// (cohort_kernel_host_*_total).
struct host_counts {
  uint64_t started = 0;
  /// Calls whose kernel crashed, aborted or exited its host.
  uint64_t crashed = 0;
  /// Calls killed at their time limit.
  uint64_t timed_out = 0;
};

/// The counts of every bundle's hosts since the process started.
host_counts hosts_counted();

/// The kernel hosts of one bundle: a pool of cohort-kernel-host processes,
/// each running one call at a time; a call takes an idle one or starts a
/// new one, so there are as many as calls run at once. Thread-safe.
class kernel_hosts {
public:
  /// The hosts of `bundle`, whose shared objects are `objects` (path,
  /// bytes) and whose kernels are `kernels` (index into `objects`, symbol,
  /// name). Nothing is started yet. Null with `why` set when the objects
  /// cannot be kept in memory files.
  static std::shared_ptr<kernel_hosts>
  make(const std::string& bundle,
       const std::vector<std::pair<std::string, std::string>>& objects,
       const std::vector<pb::KernelHostStart::Kernel>& kernels,
       host_settings settings, std::string& why);

  ~kernel_hosts();

  kernel_hosts(const kernel_hosts&) = delete;
  kernel_hosts& operator=(const kernel_hosts&) = delete;

  /// Runs kernel `index` on `in` into `out` (sized and zeroed by the
  /// caller) in a host, for at most `limit`. Throws kernel_failure naming
  /// the kernel: its own error (a non-zero return and its message), a
  /// crash or an exit of its host, the time limit, the memory limit, a
  /// host that does not start. A host that died while idle is replaced
  /// before the call is sent: the kernel runs at most once per call. A host
  /// whose call failed in any way is not used again.
  void call(uint32_t index, const kernel_args& args, typed_inputs in,
            kernel_output& out, std::chrono::milliseconds limit);

  /// Hosts running now (idle or in a call).
  size_t running() const;

  /// What the build cannot enforce (the memory limit under
  /// AddressSanitizer); empty when everything is.
  static std::string notes();

private:
  struct process;

  kernel_hosts(std::string bundle, host_settings settings);

  std::unique_ptr<process> start(std::string& why);
  /// An idle host, or a new one (`fresh`).
  std::unique_ptr<process> take(bool& fresh, std::string& why);
  void give_back(std::unique_ptr<process> p);
  /// Waits for the answer of call `c`, sent to `p`, and copies its output;
  /// throws kernel_failure when it is not a result.
  void finish(process& p, const std::string& name, const host::call& c,
              uint64_t total, kernel_output& out,
              std::chrono::milliseconds limit);
  [[noreturn]] void fail(const std::string& kernel, const std::string& what);

  std::string bundle_;
  host_settings settings_;
  /// The start message, serialized.
  std::string start_;
  /// The shared objects' memory files, handed to every host.
  std::vector<int> object_fds_;
  std::vector<std::string> names_;
  mutable std::mutex mtx_;
  std::vector<std::unique_ptr<process>> idle_;
  std::atomic<size_t> running_{0};
};

} // namespace cohort::kernels::bundle
