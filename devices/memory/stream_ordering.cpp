#include "devices/memory/stream_ordering.hpp"

#include <cstring>

#include "messages/errc.hpp"

namespace cohort::devices::memory {

host_stream_ordering::host_stream_ordering(uint32_t streams, bool writes_memory)
    : streams_(streams), writes_memory_(writes_memory), next_(streams, 0) {
  // nop
}

caf::expected<uint64_t> host_stream_ordering::record(stream_ref s) {
  if (s.index >= next_.size())
    return make_error(errc::invalid_arguments,
                      "no stream " + std::to_string(s.index));
  return ++next_[s.index];
}

bool host_stream_ordering::reached(stream_ref, uint64_t) {
  return true;
}

caf::error host_stream_ordering::wait(stream_ref, stream_ref, uint64_t) {
  return caf::none;
}

caf::error host_stream_ordering::zero(void* p, size_t bytes, stream_ref) {
  if (writes_memory_)
    std::memset(p, 0, bytes);
  zeroed_ += bytes;
  return caf::none;
}

} // namespace cohort::devices::memory
