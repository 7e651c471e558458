// What the memory layer needs of a device's streams: fences that order the
// reuse of freed memory across streams, and zero fills ordered on a stream.
// GPU devices implement it with events (devices/gpu/gpu_stream_ordering.hpp);
// devices whose work completes on the host at once use host_stream_ordering.
#pragma once

#include <cstdint>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "devices/memory/memory_resource.hpp"

namespace cohort::devices::memory {

/// Fences and zero fills on the streams of one device. Fences of one stream
/// are numbered 1, 2, ... in the order they are recorded. Only the device's
/// owner calls it.
class stream_ordering {
public:
  virtual ~stream_ordering() = default;

  /// Number of streams (indices 0 .. streams() - 1).
  virtual uint32_t streams() const = 0;

  /// Records a fence after everything enqueued on `s` so far; returns its
  /// number on `s`.
  virtual caf::expected<uint64_t> record(stream_ref s) = 0;

  /// How many fences were recorded on `s` so far (the last one's number).
  virtual uint64_t recorded(stream_ref s) const = 0;

  /// True once `s` has passed its fence `seq`. Polls; never blocks.
  virtual bool reached(stream_ref s, uint64_t seq) = 0;

  /// Makes work enqueued on `waiter` from now on wait, on the device, until
  /// `s` has passed its fence `seq`. The host does not wait.
  virtual caf::error wait(stream_ref waiter, stream_ref s, uint64_t seq) = 0;

  /// Fills `bytes` at `p` with zeros, ordered on `s`.
  virtual caf::error zero(void* p, size_t bytes, stream_ref s) = 0;

  /// Forgets every fence (the device was reset: its streams and events are
  /// gone); numbering goes on where it was.
  virtual void reset() = 0;

  /// The stream the memory layer's own zero fills go on (new slabs; freed
  /// blocks of devices that free only idle blocks). A GPU keeps one apart
  /// from its launches, so that reusing memory never waits for a launch.
  virtual stream_ref fill_stream() const { return stream_ref{0}; }
};

/// Streams whose work is done on the host by the time it is enqueued
/// (simulated GPUs, dry runs): every fence is reached as it is recorded.
/// Zero fills write host memory, or nothing for memory that is only address
/// space (`writes_memory` false).
class host_stream_ordering final : public stream_ordering {
public:
  host_stream_ordering(uint32_t streams, bool writes_memory);

  uint32_t streams() const override { return streams_; }
  caf::expected<uint64_t> record(stream_ref s) override;
  uint64_t recorded(stream_ref s) const override {
    return s.index < next_.size() ? next_[s.index] : 0;
  }
  bool reached(stream_ref s, uint64_t seq) override;
  caf::error wait(stream_ref waiter, stream_ref s, uint64_t seq) override;
  caf::error zero(void* p, size_t bytes, stream_ref s) override;
  void reset() override {}

  /// Bytes zeroed so far.
  uint64_t zeroed_bytes() const { return zeroed_; }

private:
  uint32_t streams_;
  bool writes_memory_;
  /// Fences recorded per stream.
  std::vector<uint64_t> next_;
  uint64_t zeroed_ = 0;
};

} // namespace cohort::devices::memory
