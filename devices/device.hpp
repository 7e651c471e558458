// The small device interface every backend implements: memory, launches,
// health and reset. A device is owned by exactly one device actor.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <new>
#include <string>
#include <unordered_map>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "devices/health/health.hpp"
#include "devices/memory/memory_resource.hpp"
#include "devices/xid_policy.hpp"
#include "kernels/catalog.hpp"
#include "messages/device_info.hpp"

namespace cohort::devices {

namespace memory {
class device_memory;
} // namespace memory

/// What one launch produced.
struct launch_result {
  kernels::kernel_output output;
  /// Time the device spent (measured on real hardware, modeled on simulated).
  std::chrono::nanoseconds device_time{0};
  /// Simulated timing noise: the time reported for the launch is
  /// device_time times this (a preempted or throttled timer), while the
  /// device is busy only device_time.
  double reported_factor = 1.0;
  /// True if the launch will never complete (a hung stream). The device actor's
  /// watchdog turns this into a kernel_timeout.
  bool hung = false;
  /// True if the launch was only enqueued (GPU backends): the device calls
  /// its completion handler with the ticket once it has finished, and the
  /// device actor then takes the output with `collect`.
  bool pending =
      false; /// Of device_time, measured apart when the device was asked to
  /// (time_copies): the host-to-device copies before the first kernel and
  /// the device-to-host copies after the last (GPU backends; 0 otherwise,
  /// and on devices that do not copy: CPU workers, simulated GPUs).
  std::chrono::nanoseconds copy_in{0};
  std::chrono::nanoseconds copy_out{0};
};

/// One kernel of a chain as a device runs it: the stages run in order on one
/// stream, and each stage's output stays in device memory for the next.
struct stage_view {
  kernels::kernel_id id = kernels::kernel_id::axpy;
  kernels::kernel_args args;
  /// Host inputs; at `from_previous` (when >= 0) an empty placeholder that
  /// the previous stage's output fills on the device.
  kernels::small_vector<kernels::typed_view, 4> inputs;
  int32_t from_previous = -1;
  /// Bit i set: input i is a device-resident object of this device, already
  /// in its memory at `inputs[i].data` (find_object); it is read there, not
  /// copied in, and its transfer costs nothing.
  uint32_t resident = 0;
  /// Set for a node's kernel in a device host process (kernel_def::
  /// sized_by_caller): the output's elements and the launch's threads, as
  /// the node worked them out from the kernel's rules.
  bool sized = false;
  uint64_t out_elements = 0;
  uint64_t threads = 0;
};

/// An immutable buffer a device keeps in its memory between launches (a
/// device-resident object, docs/objects.md): where it is and what it holds.
struct resident_object {
  /// The elements, in device memory (host memory on a simulated GPU).
  kernels::typed_view data;
  /// The block holding them and its size (what the tenant is charged).
  void* block = nullptr;
  uint64_t block_bytes = 0;
  std::string tenant;
};

/// Called by an asynchronous device, from any thread, when the launch with
/// this ticket has finished or failed. It must only post a message.
using completion_handler = std::function<void(uint64_t ticket)>;

/// One compute device. Not thread-safe except where a backend says so: only
/// its device actor calls it. Launch arguments must have been validated.
class device {
public:
  virtual ~device() = default;

  /// Static facts about the device.
  const device_info& info() const { return info_; }

  /// Sets the other GPUs it reaches directly (`device_info::links`). Once,
  /// before its actor starts.
  void set_links(std::vector<device_link> links) {
    info_.links = std::move(links);
  }

  /// Runs one kernel on `stream` (0 <= stream < info().streams), or enqueues
  /// it there (`pending` in the result). `ticket` names the launch in the
  /// completion handler and in `collect` / `finish`. Device memory for it
  /// comes from the device's pool, tagged with `owner`. Memory errors:
  /// out_of_memory (the device is full: hard OOM), memory_limit or
  /// over_memory_quota (a configured limit: soft OOM).
  /// Host memory exhausted while computing (std::bad_alloc) is
  /// out_of_memory for the item, never a crash of the device's owner.
  caf::expected<launch_result> launch(uint32_t stream, uint64_t ticket,
                                      kernels::kernel_id id,
                                      const kernels::kernel_args& args,
                                      kernels::typed_inputs inputs,
                                      const memory::owner_tag& owner = {}) {
    try {
      return do_launch(stream, ticket, id, args, inputs, owner);
    } catch (const std::bad_alloc&) {
      return host_memory_exhausted();
    } catch (const kernels::kernel_failure& e) {
      return kernel_failed(e);
    }
  }

  /// As above, for f32 inputs.
  caf::expected<launch_result> launch(uint32_t stream, uint64_t ticket,
                                      kernels::kernel_id id,
                                      const kernels::kernel_args& args,
                                      kernels::input_views inputs,
                                      const memory::owner_tag& owner = {}) {
    auto views = kernels::typed(inputs);
    return launch(stream, ticket, id, args, kernels::typed_inputs{views},
                  owner);
  }

  /// Runs (or enqueues) a chain of kernels as one launch: only the first
  /// stage's inputs and the extra inputs of later stages come from the host,
  /// only the last stage's output goes back. Stages must have been
  /// validated together (validate_item).
  caf::expected<launch_result>
  launch_chain(uint32_t stream, uint64_t ticket,
               std::span<const stage_view> chain,
               const memory::owner_tag& owner = {}) {
    try {
      return do_launch_chain(stream, ticket, chain, owner);
    } catch (const std::bad_alloc&) {
      return host_memory_exhausted();
    } catch (const kernels::kernel_failure& e) {
      return kernel_failed(e);
    }
  }

  /// Asynchronous devices: the output of a pending launch whose completion
  /// was signalled; releases what the launch held. Errors mean the launch
  /// failed on the device (device_lost for sticky errors).
  caf::expected<launch_result> collect(uint64_t ticket) {
    return do_collect(ticket);
  }

  /// Synchronous devices whose launches hold device memory until their
  /// modeled completion (simulated GPUs): the launch `ticket` has completed;
  /// releases what it held. Unknown tickets are ignored.
  void finish(uint64_t ticket) { do_finish(ticket); }

  /// Keeps a copy of `data` in device memory as object `id`, its block
  /// tagged with `owner` (charged to its tenant, limited by its quota).
  /// Synchronous: the copy is done when it returns. Errors: invalid_arguments
  /// for an id it holds already or a device without memory of its own (CPU
  /// workers read objects from their host copies); the memory errors of
  /// `launch`; device_lost.
  caf::error store_object(uint64_t id, kernels::typed_view data,
                          const memory::owner_tag& owner);

  /// Object `id`, or nullptr when the device does not hold it. Valid until
  /// it is dropped or the device is reset, recreated or released.
  const resident_object* find_object(uint64_t id) const {
    auto i = objects_.find(id);
    return i != objects_.end() ? &i->second : nullptr;
  }

  /// Copies object `id` to host memory (a `get`, or a spill before it is
  /// evicted). Errors: invalid_arguments when it is not held; device_lost.
  caf::expected<kernels::kernel_output> read_object(uint64_t id);

  /// How another process maps object `id` (docs/objects.md, "Sharing
  /// across processes"): the region of device memory holding it and the
  /// object's offset there. Errors: invalid_arguments when it is not held
  /// or the device's memory cannot be shared (CPU workers).
  caf::expected<memory::shared_region> share_object(uint64_t id);

  /// Frees object `id`; false when it is not held. Launches in flight that
  /// read it must have ended (the caller counts its readers).
  bool drop_object(uint64_t id);

  /// Frees every object (a new device actor starts from none: the
  /// balancer forgot the old one's). Backends also call it in their
  /// destructors, while their memory exists, to refund a shared ledger.
  void drop_all_objects();

  /// Bytes of device memory the objects hold (their blocks), and how many.
  uint64_t object_bytes() const { return object_bytes_; }
  size_t object_count() const { return objects_.size(); }

  /// The device's memory (pool, limits, statistics), or nullptr for devices
  /// without device memory (CPU workers). Only the owner of the device uses
  /// it.
  virtual memory::device_memory* memory() { return nullptr; }

  /// True for devices whose launches complete later (`pending`).
  virtual bool asynchronous() const { return false; }

  /// From now on, measure each launch's copies apart from its kernels
  /// (launch_result::copy_in, copy_out), or stop. GPU backends then record
  /// two more events per launch; the others have nothing to measure.
  virtual void time_copies(bool on) { (void)on; }

  /// The stream the next launch should go to; `suggested` is the device
  /// actor's choice by modeled time. GPU devices pick their least busy one.
  virtual uint32_t pick_stream(uint32_t suggested) const { return suggested; }

  /// Sets the handler asynchronous devices call when a launch finishes. Set
  /// once by the device actor that owns the device, before any launch.
  void on_completion(completion_handler f) {
    std::lock_guard<std::mutex> guard{completion_mtx_};
    completion_ = std::move(f);
  }

  /// Polled by the device actor: none while the device is usable, device_lost
  /// (with what happened) once it is not.
  caf::error health() { return do_health(); }

  /// Tries to bring a lost device back into service; none on success.
  /// context_poisoned when a sticky error survived the reset: only
  /// `recreate` can bring it back.
  caf::error reset() {
    // The objects went with the memory (the directory rebuilds or loses
    // them); their blocks are forgotten with the memory's books.
    forget_objects();
    return do_reset();
  }

  /// Replaces the device's context with a new one, as a new process would:
  /// the only cure for a sticky error. Everything on the device is gone. None
  /// on success; context_poisoned from backends that cannot do it here.
  caf::error recreate() {
    forget_objects();
    return do_recreate();
  }

  /// The device is given up or taken out of service with no actor driving
  /// it: what its launches held is dropped and its memory's books cleared,
  /// so that no tenant stays charged for work lost with it (a simulated
  /// GPU's blocks go back to the host; a real GPU's went with its context).
  void release_memory() {
    forget_objects();
    do_release_memory();
  }

  /// Warnings since the last call that do not take the device down
  /// (application-level Xids, corrected ECC errors, thermal throttling);
  /// they make it degraded. Polled by the device actor with `health`.
  std::vector<std::string> take_warnings() { return do_take_warnings(); }

  /// Xid errors the device reported (any level) and the code of the last
  /// one (0: none yet). Thread-safe: metrics read them from any thread.
  uint64_t xid_errors() const { return xid_errors_.load(); }
  uint32_t last_xid() const { return last_xid_.load(); }

  /// Its health counters now: temperature, power, utilization, memory and
  /// ECC. A GPU's come from its vendor's library (NVML, ROCm SMI), a
  /// simulated GPU's from its model (source "simulated"); unavailable,
  /// saying why, for CPU workers and where there is no library.
  /// Thread-safe; a library call may take a millisecond or more.
  virtual health::gpu_sample telemetry() const;

  /// Keeps `s`, taken at `wall_ns` (ns since the epoch), in its history:
  /// the last telemetry_kept. Thread-safe: the node's sampler writes, the
  /// admin API reads; the history outlives a restart of its actor.
  void keep_telemetry(int64_t wall_ns, health::gpu_sample s);
  std::vector<health::timed_sample> telemetry_history() const;
  static constexpr size_t telemetry_kept = 600;

  /// The last xids_kept Xids it reported, each with when it was seen.
  std::vector<health::timed_xid> recent_xids() const;
  static constexpr size_t xids_kept = 64;

  /// The node's Xid policy (supervision { xid }); the defaults until set.
  /// The runtime sets it before the device's actor runs, a host process
  /// when its node greets the device. Thread-safe.
  void set_xid_policy(xid_policy policy);
  /// What the policy does on `xid`. Thread-safe.
  xid_action xid_action_of(uint32_t xid) const;

  /// How long a launch of each kernel may run (supervision's
  /// kernel_timeout_ms, `per_kernel` by kernel id, 0 there: `all`). Set by
  /// the device's actor before it launches; CPU code that can be stopped
  /// (a bundle's kernel in a kernel host process) is stopped at it.
  void set_kernel_timeouts(std::chrono::milliseconds all,
                           std::vector<std::chrono::milliseconds> per_kernel) {
    kernel_timeout_ = all;
    kernel_timeouts_ = std::move(per_kernel);
  }
  std::chrono::milliseconds kernel_timeout(kernels::kernel_id id) const {
    auto i = static_cast<size_t>(id);
    if (i < kernel_timeouts_.size() && kernel_timeouts_[i].count() > 0)
      return kernel_timeouts_[i];
    return kernel_timeout_;
  }

protected:
  /// Backends call this for every Xid they see.
  void note_xid(uint32_t xid) {
    last_xid_.store(xid);
    xid_errors_.fetch_add(1);
    keep_xid(xid);
  }

  /// The error a device that the Xid policy isolates ends with:
  /// device_offline, which its supervisor does not restart. `what` names
  /// the Xid ("NVML reported Xid 48").
  caf::error isolated_by_xid(const std::string& what) const;

  explicit device(device_info info) : info_(std::move(info)) {
    // nop
  }

  /// Tells the owning actor that the launch `ticket` has finished.
  void notify_completion(uint64_t ticket) const {
    // A runtime thread may call this while a restarted actor installs its
    // handler.
    std::lock_guard<std::mutex> guard{completion_mtx_};
    if (completion_)
      completion_(ticket);
  }

  device_info& mutable_info() { return info_; }

  /// Backends whose memory is not host memory override both (a GPU's
  /// copies, synchronous). The defaults copy with memcpy (simulated GPUs).
  virtual caf::error copy_in(void* dst, const void* src, size_t bytes);
  virtual caf::error copy_out(void* dst, const void* src, size_t bytes);

private:
  std::chrono::milliseconds kernel_timeout_{5000};
  std::vector<std::chrono::milliseconds> kernel_timeouts_;

  void keep_xid(uint32_t xid);

  std::atomic<uint64_t> xid_errors_{0};
  std::atomic<uint32_t> last_xid_{0};
  mutable std::mutex history_mtx_;
  mutable std::mutex xid_policy_mtx_;
  xid_policy xid_policy_;
  std::deque<health::timed_sample> telemetry_;
  std::deque<health::timed_xid> xids_;

  virtual caf::expected<launch_result>
  do_launch(uint32_t stream, uint64_t ticket, kernels::kernel_id id,
            const kernels::kernel_args& args, kernels::typed_inputs inputs,
            const memory::owner_tag& owner) = 0;
  virtual caf::expected<launch_result> do_collect(uint64_t ticket);
  virtual void do_finish(uint64_t) {}
  /// The default runs the stages one by one through do_launch, passing each
  /// output on in host memory (CPU workers).
  virtual caf::expected<launch_result>
  do_launch_chain(uint32_t stream, uint64_t ticket,
                  std::span<const stage_view> chain,
                  const memory::owner_tag& owner);
  virtual caf::error do_health() = 0;
  /// out_of_memory for a launch that ran out of host memory.
  caf::error host_memory_exhausted() const;
  /// kernel_error for a registered kernel whose CPU implementation failed.
  caf::error kernel_failed(const kernels::kernel_failure& e) const;

  virtual caf::error do_reset() = 0;
  /// The default: a real GPU's sticky error needs a new process, and device
  /// actors are not hosted in child processes yet.
  virtual caf::error do_recreate();
  /// The default clears the memory's books (blocks held by launches are
  /// forgotten with them).
  virtual void do_release_memory();
  virtual std::vector<std::string> do_take_warnings() { return {}; }

  /// Forgets every object without freeing its block (the memory's books
  /// are cleared with them).
  void forget_objects() {
    objects_.clear();
    object_bytes_ = 0;
  }

  device_info info_;
  std::unordered_map<uint64_t, resident_object> objects_;
  uint64_t object_bytes_ = 0;
  mutable std::mutex completion_mtx_;
  completion_handler completion_;
};

} // namespace cohort::devices
