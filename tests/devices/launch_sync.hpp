// Runs launches on a device directly (no actor) and waits for asynchronous
// completions, for tests of the device interface.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>

#include "devices/device.hpp"
#include "messages/errc.hpp"

namespace cohort::test {

/// Installs itself as the device's completion handler and records which
/// tickets completed (and how often).
class completions {
public:
  explicit completions(devices::device& dev) : dev_(dev) {
    dev.on_completion([this](uint64_t ticket) {
      std::lock_guard<std::mutex> guard{mtx_};
      ++count_[ticket];
      cv_.notify_all();
    });
  }

  ~completions() { dev_.on_completion({}); }

  /// Waits until `ticket` completed; false after `timeout`.
  bool wait(uint64_t ticket,
            std::chrono::milliseconds timeout = std::chrono::seconds{20}) {
    std::unique_lock<std::mutex> guard{mtx_};
    return cv_.wait_for(guard, timeout, [&] { return count_[ticket] > 0; });
  }

  /// How often `ticket` completed.
  int count(uint64_t ticket) {
    std::lock_guard<std::mutex> guard{mtx_};
    return count_[ticket];
  }

  /// Launches and, for an asynchronous device, waits and collects; a
  /// synchronous device is told the launch finished.
  caf::expected<devices::launch_result> run(uint64_t ticket,
                                            kernels::kernel_id id,
                                            const kernels::kernel_args& args,
                                            kernels::input_views inputs) {
    auto res = dev_.launch(dev_.pick_stream(0), ticket, id, args, inputs,
                           {"test", ticket, std::string{kernels::name(id)}});
    if (!res)
      return res;
    if (!res->pending) {
      dev_.finish(ticket);
      return res;
    }
    if (!wait(ticket))
      return make_error(errc::kernel_timeout,
                        "no completion for launch " + std::to_string(ticket));
    return dev_.collect(ticket);
  }

private:
  devices::device& dev_;
  std::mutex mtx_;
  std::condition_variable cv_;
  std::map<uint64_t, int> count_;
};

} // namespace cohort::test
