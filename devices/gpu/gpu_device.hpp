// A real GPU behind a vendor runtime (CUDA or HIP, through gpu::api): N
// streams, device memory per launch from the GPU's pool (slabs from the
// driver, reuse in stream order, zero-on-free on the stream), copies through
// pinned NUMA-local staging buffers, kernels enqueued asynchronously and their
// completion signalled by a host function on the stream, never by blocking the
// device actor. Errors are mapped onto Cohort's error enum with the file and
// line of the call; sticky errors mark the device lost.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "cohort/kernel_abi.h"
#include "devices/device.hpp"
#include "devices/gpu/api.hpp"
#include "devices/gpu/gpu_stream_ordering.hpp"
#include "devices/gpu/staging.hpp"
#include "devices/health/health.hpp"
#include "devices/memory/device_memory.hpp"

namespace cohort::devices::gpu {

/// How a GPU device is set up.
struct gpu_options {
  /// Streams per GPU (launches on one stream run in order).
  uint32_t streams = 4;
  /// Released pinned staging memory kept for reuse. Large enough for the
  /// blocks of four 192 MiB launches in flight (256 MiB classes): measured
  /// on an H100, a cache smaller than what is in flight re-pins a block for
  /// most launches, and pinning costs far more than the copies.
  uint64_t staging_cache_bytes = uint64_t{1} << 30;
  /// Health source (NVML or ROCm SMI); may be null.
  std::shared_ptr<health::gpu_monitor> monitor;
  /// When set, the UUID the GPU must have: `open` refuses another one, with
  /// device_lost naming both, before it makes anything on it (a device
  /// host opens the GPU its node probed by ordinal, and the two processes'
  /// CUDA_VISIBLE_DEVICES or device order may differ).
  std::string expect_uuid;
  /// A MIG instance (its host's CUDA_VISIBLE_DEVICES, "MIG-..."): the
  /// events of its GPU's other instances are not its. `open_gpu` finds its
  /// GPU instance through the health library (gpu_instance; whole_gpu when
  /// the library cannot say: every event of the GPU is then its own).
  std::string mig_instance;
  uint32_t gpu_instance = health::gpu_event::whole_gpu;
  /// The memory stack: limit, pool, tenant quotas and reservations. Pool
  /// options are used as given (the runtime sizes them for the GPU).
  memory::memory_options memory;
};

/// Maps a failed runtime call onto Cohort's errors: out_of_memory for a
/// refused allocation, device_lost for sticky errors and a missing device,
/// kernel_fault otherwise. The detail names the device, what was being done,
/// the vendor's error and `file:line`.
caf::error to_error(const api& rt, result rc, const std::string& device,
                    std::string_view what, const char* file, int line);

/// What GPU `ordinal` of `rt` is, as a device of `kind` named `name` with
/// `streams`, from its properties alone: nothing is opened or created on it
/// (a device host process opens it, docs/device-hosts.md).
caf::expected<std::pair<device_info, properties>>
probe_gpu(api& rt, int ordinal, device_kind kind, std::string name,
          uint32_t streams);

class gpu_device final : public device {
public:
  /// Opens GPU `ordinal` of `rt`: reads its properties, creates its streams,
  /// finds its NUMA node and starts watching its health.
  static caf::expected<std::shared_ptr<gpu_device>>
  open(std::shared_ptr<api> rt, int ordinal, device_kind kind, std::string name,
       gpu_options opts);

  ~gpu_device() override;

  /// The vendor's facts about the GPU.
  const properties& props() const { return props_; }

  /// Launches enqueued on `stream` and not yet collected.
  uint32_t inflight(uint32_t stream) const { return inflight_.at(stream); }

  /// Launches enqueued on all streams and not yet collected.
  size_t inflight() const { return records_.size(); }

  bool asynchronous() const override { return true; }

  /// Two more events per launch while on (launch_result::copy_in, copy_out).
  void time_copies(bool on) override { time_copies_ = on; }

  /// The least busy stream.
  uint32_t pick_stream(uint32_t suggested) const override;

  /// Utilization, memory, temperature and ECC counters from the monitor.
  health::gpu_sample telemetry() const override;

  /// The pinned staging buffers.
  const staging_pool& staging() const { return staging_; }

  /// Launch blocks handed out by the pool and not yet returned (leak checks).
  uint64_t live_blocks() const { return memory_->tracking().live_count(); }

  memory::device_memory* memory() override { return memory_.get(); }

  /// Fences recorded for the pool and not yet known reached.
  size_t pending_fences() const { return ordering_->pending(); }

  gpu_device(std::shared_ptr<api> rt, int ordinal, device_info info,
             properties props, gpu_options opts);

private:
  struct launch_record {
    uint32_t stream = 0;
    void* block = nullptr;
    uint64_t block_bytes = 0;
    staging_block staging;
    event_t start = nullptr;
    event_t stop = nullptr;
    /// With time_copies: recorded before the first kernel and after the
    /// last (the copies in and out are on either side).
    event_t kernels_begin = nullptr;
    event_t kernels_end = nullptr;
    /// The last stage's output: its elements and type, and topk_cosine's
    /// row indices.
    uint64_t out_values = 0;
    kernels::dtype out_type = kernels::dtype::f32;
    uint64_t out_indices = 0;
    size_t stage_out = 0;
    size_t stage_idx = 0;
  };

  /// A registered kernel's entry point on this device, its module loaded on
  /// first use; the error says why when the module or function failed.
  caf::error function_of(kernels::kernel_id id, function_t& f);
  /// Zeroes a registered kernel's output and enqueues its entry point on
  /// `s` over the threads its launch rule asks for (`threads`, when the
  /// launch brought them: a node's kernel in a device host).
  caf::error launch_registered(kernels::kernel_id id,
                               const kernels::kernel_args& args,
                               const cohort_gpu_call& call, stream_t s,
                               std::optional<uint64_t> threads);

  /// Outlives the device while completion callbacks may still arrive.
  struct callback_hub {
    std::mutex mtx;
    const gpu_device* owner = nullptr;
  };

  caf::expected<launch_result>
  do_launch(uint32_t stream, uint64_t ticket, kernels::kernel_id id,
            const kernels::kernel_args& args, kernels::typed_inputs inputs,
            const memory::owner_tag& owner) override;
  caf::expected<launch_result>
  do_launch_chain(uint32_t stream, uint64_t ticket,
                  std::span<const stage_view> chain,
                  const memory::owner_tag& owner) override;
  caf::expected<launch_result> do_collect(uint64_t ticket) override;
  caf::error do_health() override;
  caf::error do_reset() override;
  void do_release_memory() override;
  std::vector<std::string> do_take_warnings() override;
  caf::error copy_in(void* dst, const void* src, size_t bytes) override;
  caf::error copy_out(void* dst, const void* src, size_t bytes) override;
  /// copy_in / copy_out: one copy on stream 0, waited for.
  caf::error copy_now(void* dst, const void* src, size_t bytes, bool to_device);

  caf::error create_streams(int line);
  void destroy_streams();
  /// Returns what a launch held; with `synchronize`, first waits for its
  /// stream (a launch that failed half-way may still be copying).
  void release(launch_record& rec, bool synchronize);
  caf::error fail(result rc, std::string_view what, int line);
  caf::error event(event_t& e, int line);
  /// Takes the health events the monitor delivered since the last call.
  caf::error drain_health_events();

  static void on_done(void* user);

  std::shared_ptr<api> rt_;
  int ordinal_;
  properties props_;
  gpu_options opts_;
  std::vector<stream_t> streams_;
  std::vector<uint32_t> inflight_;
  std::vector<event_t> free_events_;
  bool time_copies_ = false;
  std::unordered_map<uint64_t, launch_record> records_;
  staging_pool staging_;
  /// Owned by memory_; kept to tear its events down with the context.
  gpu_stream_ordering* ordering_ = nullptr;
  std::unique_ptr<memory::device_memory> memory_;
  /// Set once the context is lost; every call then fails with it.
  caf::error lost_;
  std::shared_ptr<callback_hub> hub_;
  std::mutex events_mtx_;
  std::vector<health::gpu_event> events_;
  /// Non-fatal events not yet taken.
  std::vector<std::string> warnings_;
  /// Registered kernels' modules loaded into this device's context, and
  /// their entry points; a reset destroys them with the context.
  struct loaded_module {
    module_t module = nullptr;
    function_t function = nullptr;
  };
  std::unordered_map<uint8_t, loaded_module> modules_;
};

} // namespace cohort::devices::gpu
