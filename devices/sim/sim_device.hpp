// A simulated GPU: memory capacity, streams, a speed factor and a modeled
// clock, computing with the CPU kernels. It is how balancing, device loss and
// chaos are tested without GPUs, and it always says it is simulated.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "devices/device.hpp"

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
};

/// A simulated GPU. The fault-injection calls are thread-safe and may come
/// from any thread (tests, the chaos harness) while its device actor runs it;
/// everything else is called by the device actor only.
class sim_device final : public device {
public:
  explicit sim_device(sim_params params);

  // -- fault injection --------------------------------------------------------

  /// Loses the device now; `permanent` makes reset() fail too.
  void lose(bool permanent = false);

  /// Loses the device once `when` has passed.
  void lose_at(std::chrono::steady_clock::time_point when,
               bool permanent = false);

  /// Fails the next `n` allocations with out_of_memory.
  void fail_next_allocations(uint32_t n);

  /// Raises an Xid: device-level codes lose the device, others fail the next
  /// launch with kernel_fault.
  void raise_xid(uint32_t xid);

  /// Makes the next launch on `stream` never complete.
  void hang_stream(uint32_t stream);

  /// Multiplies modeled run times by `factor` (1.0 restores full speed).
  void slow_down(double factor);

  /// Bytes currently allocated.
  uint64_t memory_used() const;

private:
  caf::error do_allocate(uint64_t bytes) override;
  void do_deallocate(uint64_t bytes) override;
  caf::expected<launch_result> do_launch(uint32_t stream, uint64_t ticket,
                                         kernels::kernel_id id,
                                         const kernels::kernel_args& args,
                                         kernels::input_views inputs) override;
  caf::error do_health() override;
  caf::error do_reset() override;

  // Requires mtx_ held.
  caf::error lost_error_locked();

  sim_params params_;
  mutable std::mutex mtx_;
  uint64_t used_ = 0;
  bool lost_ = false;
  bool permanent_ = false;
  std::string lost_reason_;
  std::chrono::steady_clock::time_point lose_at_ =
      std::chrono::steady_clock::time_point::max();
  bool lose_at_permanent_ = false;
  uint32_t failing_allocations_ = 0;
  uint32_t pending_xid_ = 0;
  std::set<uint32_t> hung_streams_;
  double slow_factor_ = 1.0;
};

/// Makes a simulated GPU.
std::shared_ptr<sim_device> make_sim_device(sim_params params);

} // namespace cohort::devices::sim
