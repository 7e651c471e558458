#include "devices/memory/statistics_adaptor.hpp"

#include <algorithm>

#include "messages/errc.hpp"

namespace cohort::devices::memory {

statistics_adaptor::statistics_adaptor(memory_resource& upstream)
    : upstream_(upstream) {
  // nop
}

allocation_counts statistics_adaptor::counts() const {
  allocation_counts out;
  out.allocations = allocations_;
  out.deallocations = deallocations_;
  out.failed_deallocations = failed_deallocations_;
  out.current_bytes = current_;
  out.peak_bytes = peak_;
  out.total_bytes = total_;
  for (size_t code = 0; code < refused_.size(); ++code)
    if (refused_[code] > 0)
      out.refused[to_string(static_cast<errc>(code))] = refused_[code];
  return out;
}

caf::expected<void*> statistics_adaptor::do_allocate(size_t bytes,
                                                     stream_ref stream,
                                                     const owner_tag& owner) {
  auto p = upstream_.allocate(bytes, stream, owner);
  if (!p) {
    ++refused_[static_cast<uint8_t>(code_of(p.error()))];
    return p;
  }
  ++allocations_;
  current_ += bytes;
  total_ += bytes;
  peak_ = std::max(peak_, current_);
  return p;
}

caf::error statistics_adaptor::do_deallocate(void* p, size_t bytes,
                                             stream_ref stream) {
  auto err = upstream_.deallocate(p, bytes, stream);
  if (code_of(err) == errc::invalid_free) {
    ++failed_deallocations_;
    return err;
  }
  ++deallocations_;
  current_ -= std::min(current_, uint64_t(bytes));
  return err;
}

} // namespace cohort::devices::memory
