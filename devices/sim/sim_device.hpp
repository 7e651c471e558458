// A simulated GPU: memory capacity, streams, a speed factor and a modeled
// clock, computing with the CPU kernels. It is how balancing, device loss and
// chaos are tested without GPUs, and it always says it is simulated. Its
// device memory is real host memory behind the same pool and adaptors a real
// GPU has: launches copy their inputs in, compute there, and hold the block
// until their modeled completion.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <memory>
#include <memory_resource>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>

#include "devices/device.hpp"
#include "devices/input_cache.hpp"
#include "devices/memory/device_memory.hpp"

namespace cohort::devices::sim {

/// Shape and modeled speed of a simulated GPU.
struct sim_params {
  std::string name = "sim0";
  uint64_t memory_bytes = 16ull << 30;
  uint32_t streams = 4;
  /// Multiplies the modeled throughput (2.0 finishes in half the time).
  double speed = 1.0;
  /// Modeled throughput at speed 1.0.
  double gflops = 10.0;
  double gbytes_per_s = 8.0;
  /// Modeled fixed cost of one launch.
  std::chrono::nanoseconds launch_latency{std::chrono::microseconds{10}};
  /// NUMA node it reports (-1: unknown).
  int32_t numa_node = -1;
  /// Timing noise: this fraction of launches reports a run time
  /// `spike_factor` times longer than it took; which ones follows from the
  /// name, the same in every run.
  double spike_fraction = 0;
  double spike_factor = 10;
  /// A simulated CPU worker: kind cpu and no device memory to account (its
  /// staging memory is host memory, as a CPU worker's is).
  bool cpu = false;
  /// Inputs it keeps between launches (by identity): their transfer is not
  /// modeled again. 0 means a quarter of its memory; CPU workers none.
  uint64_t input_cache_bytes = 0;
  /// The memory stack: limit, pool, tenant quotas and reservations.
  memory::memory_options memory;
};

/// The facts a simulated device with `p` reports (its info()), known
/// without making it: a node describes a device in a host process by them.
device_info sim_info(const sim_params& p);

/// A simulated GPU. The fault-injection calls are thread-safe and may come
/// from any thread (tests, the chaos harness) while its device actor runs it;
/// everything else is called by the device actor only.
class sim_device final : public device {
public:
  sim_device(sim_params params, std::unique_ptr<memory::device_memory> mem);
  ~sim_device() override;

  // -- fault injection --------------------------------------------------------

  /// Loses the device now; `permanent` makes reset() fail too.
  void lose(bool permanent = false);

  /// Loses the device once `when` has passed.
  void lose_at(std::chrono::steady_clock::time_point when,
               bool permanent = false);

  /// Fails the next `n` allocations with out_of_memory.
  void fail_next_allocations(uint32_t n);

  /// Raises an Xid, counted. Application-level codes fail a launch with
  /// kernel_fault: N raised fail the next N launches (at most
  /// max_pending_xids wait; a reset clears them). Then the Xid policy acts:
  /// a warning (degrade), a loss (reset), an isolation (the device ends
  /// with device_offline), or nothing (ignore).
  void raise_xid(uint32_t xid);
  static constexpr size_t max_pending_xids = 4096;

  /// Makes the next launch on `stream` never complete.
  void hang_stream(uint32_t stream);

  /// Multiplies modeled run times by `factor` (1.0 restores full speed).
  void slow_down(double factor);

  /// Poisons the context with a sticky error: the device is lost, reset()
  /// fails with context_poisoned, and only recreate() brings it back.
  void poison();

  /// Reports a warning that degrades the device without taking it down
  /// (a corrected ECC error, thermal throttling).
  void warn(std::string what);

  /// Raises its simulated temperature by `degrees` (negative: cools it)
  /// on top of its model, until changed again.
  void heat(int32_t degrees);

  // -- health -----------------------------------------------------------------

  /// A simulated GPU's modeled counters, source "simulated": utilization
  /// from its launches in flight over its streams, temperature 35 C plus
  /// 45 C at full use (plus heat()), power 60 W plus 240 W at full use of a
  /// 300 W limit. Its memory is in the memory views, not here. A
  /// simulated CPU worker has none.
  health::gpu_sample telemetry() const override;

  memory::device_memory* memory() override {
    return params_.cpu ? nullptr : memory_.get();
  }

private:
  struct held_block {
    void* p = nullptr;
    uint64_t bytes = 0;
    uint32_t stream = 0;
  };

  caf::expected<launch_result>
  do_launch(uint32_t stream, uint64_t ticket, kernels::kernel_id id,
            const kernels::kernel_args& args, kernels::typed_inputs inputs,
            const memory::owner_tag& owner) override;
  caf::expected<launch_result>
  do_launch_chain(uint32_t stream, uint64_t ticket,
                  std::span<const stage_view> chain,
                  const memory::owner_tag& owner) override;
  void do_finish(uint64_t ticket) override;
  caf::error do_health() override;
  caf::error do_reset() override;
  void do_release_memory() override;
  caf::error do_recreate() override;
  std::vector<std::string> do_take_warnings() override;

  // Requires mtx_ held.
  caf::error lost_error_locked();

  sim_params params_;
  std::unique_ptr<memory::device_memory> memory_;
  /// Blocks of launches until their modeled completion, by ticket.
  std::pmr::unsynchronized_pool_resource nodes_;
  std::pmr::unordered_map<uint64_t, held_block> held_{&nodes_};
  /// held_.size(), for telemetry() from other threads.
  std::atomic<uint32_t> held_now_{0};
  std::atomic<int32_t> heat_{0};
  void note_held() {
    held_now_.store(uint32_t(held_.size()), std::memory_order_relaxed);
  }
  mutable std::mutex mtx_;
  bool lost_ = false;
  bool permanent_ = false;
  bool poisoned_ = false;
  /// Lost because the Xid policy isolates it: health says device_offline.
  bool isolated_ = false;
  std::vector<std::string> warnings_;
  std::string lost_reason_;
  std::chrono::steady_clock::time_point lose_at_ =
      std::chrono::steady_clock::time_point::max();
  bool lose_at_permanent_ = false;
  /// Application-level Xids raised and not yet met by a launch: each fails
  /// one launch, in the order raised (at most max_pending_xids).
  std::deque<uint32_t> pending_xids_;
  std::set<uint32_t> hung_streams_;
  double slow_factor_ = 1.0;
  /// Launches so far (picks the spiked ones).
  uint64_t launches_ = 0;
  uint64_t spike_seed_ = 0;
  input_cache inputs_;
};

/// Makes a simulated GPU; malformed_config when its memory cannot be set up
/// (bad pool options, a reservation above its memory).
caf::expected<std::shared_ptr<sim_device>> make_sim_device(sim_params params);

} // namespace cohort::devices::sim
