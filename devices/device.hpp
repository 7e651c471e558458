// The small device interface every backend implements: memory, launches,
// health and reset. A device is owned by exactly one device actor.
#pragma once

#include <chrono>
#include <cstdint>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "kernels/catalog.hpp"
#include "messages/device_info.hpp"

namespace cohort::devices {

/// What one launch produced.
struct launch_result {
  kernels::kernel_output output;
  /// Time the device spent (measured on real hardware, modeled on simulated).
  std::chrono::nanoseconds device_time{0};
  /// True if the launch will never complete (a hung stream). The device actor's
  /// watchdog turns this into a kernel_timeout.
  bool hung = false;
};

/// One compute device. Not thread-safe except where a backend says so: only
/// its device actor calls it. Launch arguments must have been validated.
class device {
public:
  virtual ~device() = default;

  /// Static facts about the device.
  const device_info& info() const { return info_; }

  /// Reserves `bytes` of device memory for one launch; out_of_memory when the
  /// device refuses, device_lost when it is gone.
  caf::error allocate(uint64_t bytes) { return do_allocate(bytes); }

  /// Returns memory reserved by `allocate`.
  void deallocate(uint64_t bytes) { do_deallocate(bytes); }

  /// Runs one kernel on `stream` (0 <= stream < info().streams).
  caf::expected<launch_result> launch(uint32_t stream, kernels::kernel_id id,
                                      const kernels::kernel_args& args,
                                      kernels::input_views inputs) {
    return do_launch(stream, id, args, inputs);
  }

  /// Polled by the device actor: none while the device is usable, device_lost
  /// (with what happened) once it is not.
  caf::error health() { return do_health(); }

  /// Tries to bring a lost device back into service; none on success.
  caf::error reset() { return do_reset(); }

protected:
  explicit device(device_info info) : info_(std::move(info)) {
    // nop
  }

private:
  virtual caf::error do_allocate(uint64_t bytes) = 0;
  virtual void do_deallocate(uint64_t bytes) = 0;
  virtual caf::expected<launch_result>
  do_launch(uint32_t stream, kernels::kernel_id id,
            const kernels::kernel_args& args, kernels::input_views inputs) = 0;
  virtual caf::error do_health() = 0;
  virtual caf::error do_reset() = 0;

  device_info info_;
};

} // namespace cohort::devices
