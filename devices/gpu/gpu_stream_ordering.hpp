// Fences on a GPU's streams for the memory pool: a fence is an event recorded
// on the stream; reaching it is polled with an event query; a stream waits
// for another's fence on the device (cudaStreamWaitEvent /
// hipStreamWaitEvent), never on the host. Zero fills are memsets on the
// stream.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "devices/gpu/api.hpp"
#include "devices/memory/stream_ordering.hpp"

namespace cohort::devices::gpu {

/// Reads the streams of its device through `streams` (the device recreates
/// them after a reset). Not thread-safe; only the device's owner calls it.
class gpu_stream_ordering final : public memory::stream_ordering {
public:
  /// `count` is the device's number of streams, its fill stream (the last)
  /// included.
  gpu_stream_ordering(std::shared_ptr<api> rt, int ordinal, std::string device,
                      const std::vector<stream_t>* streams, uint32_t count);
  ~gpu_stream_ordering() override;

  uint32_t streams() const override;
  caf::expected<uint64_t> record(memory::stream_ref s) override;
  uint64_t recorded(memory::stream_ref s) const override {
    return s.index < lanes_.size() ? lanes_[s.index].next : 0;
  }
  bool reached(memory::stream_ref s, uint64_t seq) override;
  caf::error wait(memory::stream_ref waiter, memory::stream_ref s,
                  uint64_t seq) override;
  caf::error zero(void* p, size_t bytes, memory::stream_ref s) override;
  /// Forgets the events (they died with the context) without destroying
  /// them.
  void reset() override;
  /// The last stream: the device's fill stream, apart from its launches.
  memory::stream_ref fill_stream() const override {
    return memory::stream_ref{count_ - 1};
  }

  /// Destroys every event (the context is alive and about to be torn down).
  void destroy_events();

  /// Fences recorded and not yet known reached.
  size_t pending() const;

private:
  struct lane {
    uint64_t next = 0;
    uint64_t reached = 0;
    std::deque<std::pair<uint64_t, event_t>> pending;
  };

  caf::error check(result rc, const char* what, int line);
  stream_t stream(memory::stream_ref s) const;

  std::shared_ptr<api> rt_;
  int ordinal_;
  std::string device_;
  const std::vector<stream_t>* streams_;
  uint32_t count_;
  std::vector<lane> lanes_;
  std::vector<event_t> free_events_;
};

} // namespace cohort::devices::gpu
