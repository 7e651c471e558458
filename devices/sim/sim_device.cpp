#include "devices/sim/sim_device.hpp"

#include <algorithm>

#include "messages/errc.hpp"

namespace cohort::devices::sim {

namespace {

device_info make_info(const sim_params& p) {
  device_info info;
  info.name = p.name;
  info.kind = device_kind::sim_gpu;
  info.simulated = true;
  info.model = "simulated GPU";
  info.memory_bytes = p.memory_bytes;
  info.streams = p.streams;
  info.speed = p.speed;
  return info;
}

} // namespace

sim_device::sim_device(sim_params params)
    : device(make_info(params)), params_(std::move(params)) {
  // nop
}

void sim_device::lose(bool permanent) {
  std::lock_guard<std::mutex> guard{mtx_};
  lost_ = true;
  permanent_ = permanent_ || permanent;
  lost_reason_ = permanent ? "lost permanently (injected)" : "lost (injected)";
}

void sim_device::lose_at(std::chrono::steady_clock::time_point when,
                         bool permanent) {
  std::lock_guard<std::mutex> guard{mtx_};
  lose_at_ = when;
  lose_at_permanent_ = permanent;
}

void sim_device::fail_next_allocations(uint32_t n) {
  std::lock_guard<std::mutex> guard{mtx_};
  failing_allocations_ += n;
}

void sim_device::raise_xid(uint32_t xid) {
  std::lock_guard<std::mutex> guard{mtx_};
  if (is_device_level_xid(xid)) {
    lost_ = true;
    lost_reason_ = "Xid " + std::to_string(xid) + " (device-level, injected)";
  } else {
    pending_xid_ = xid;
  }
}

void sim_device::hang_stream(uint32_t stream) {
  std::lock_guard<std::mutex> guard{mtx_};
  hung_streams_.insert(stream);
}

void sim_device::slow_down(double factor) {
  std::lock_guard<std::mutex> guard{mtx_};
  slow_factor_ = factor > 0 ? factor : 1.0;
}

uint64_t sim_device::memory_used() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return used_;
}

caf::error sim_device::lost_error_locked() {
  if (!lost_ && std::chrono::steady_clock::now() >= lose_at_) {
    lost_ = true;
    permanent_ = permanent_ || lose_at_permanent_;
    lost_reason_ = "lost at its scheduled time (injected)";
    lose_at_ = std::chrono::steady_clock::time_point::max();
  }
  if (!lost_)
    return caf::none;
  return make_error(errc::device_lost, info().name + ": " + lost_reason_);
}

caf::error sim_device::do_allocate(uint64_t bytes) {
  std::lock_guard<std::mutex> guard{mtx_};
  if (auto err = lost_error_locked())
    return err;
  if (failing_allocations_ > 0) {
    --failing_allocations_;
    return make_error(errc::out_of_memory, info().name + ": allocation of " +
                                               std::to_string(bytes) +
                                               " bytes refused (injected)");
  }
  if (bytes > params_.memory_bytes - used_)
    return make_error(
        errc::out_of_memory,
        info().name + ": " + std::to_string(bytes) + " bytes requested, " +
            std::to_string(params_.memory_bytes - used_) + " free");
  used_ += bytes;
  return caf::none;
}

void sim_device::do_deallocate(uint64_t bytes) {
  std::lock_guard<std::mutex> guard{mtx_};
  used_ -= std::min(used_, bytes);
}

caf::expected<launch_result>
sim_device::do_launch(uint32_t stream, uint64_t, kernels::kernel_id id,
                      const kernels::kernel_args& args,
                      kernels::input_views inputs) {
  double slow = 1.0;
  bool hung = false;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    if (auto err = lost_error_locked())
      return err;
    if (pending_xid_ != 0) {
      auto xid = pending_xid_;
      pending_xid_ = 0;
      return make_error(errc::kernel_fault,
                        info().name + ": Xid " + std::to_string(xid) + " in " +
                            std::string{kernels::name(id)} +
                            " (application-level, injected)");
    }
    slow = slow_factor_;
    hung = hung_streams_.erase(stream) > 0;
  }
  launch_result res;
  res.output = kernels::run_cpu(id, args, inputs);
  auto c = kernels::cost(id, args, inputs);
  double seconds = std::max(c.flops / (params_.gflops * 1e9),
                            c.bytes / (params_.gbytes_per_s * 1e9)) /
                   params_.speed;
  res.device_time = std::chrono::duration_cast<std::chrono::nanoseconds>(
      (params_.launch_latency +
       std::chrono::nanoseconds{int64_t(seconds * 1e9)}) *
      slow);
  res.hung = hung;
  return res;
}

caf::error sim_device::do_health() {
  std::lock_guard<std::mutex> guard{mtx_};
  return lost_error_locked();
}

caf::error sim_device::do_reset() {
  std::lock_guard<std::mutex> guard{mtx_};
  if (permanent_)
    return make_error(errc::device_lost,
                      info().name + ": reset failed, the device is gone");
  lost_ = false;
  lost_reason_.clear();
  used_ = 0;
  pending_xid_ = 0;
  hung_streams_.clear();
  return caf::none;
}

std::shared_ptr<sim_device> make_sim_device(sim_params params) {
  return std::make_shared<sim_device>(std::move(params));
}

} // namespace cohort::devices::sim
