#include "devices/memory/virtual_resource.hpp"

#include "messages/errc.hpp"

namespace cohort::devices::memory {

namespace {

// Far above anything the host maps, so that a stray write faults.
constexpr uintptr_t virtual_base = uintptr_t{1} << 56;

} // namespace

virtual_resource::virtual_resource(std::string device, uint64_t capacity)
    : device_(std::move(device)), capacity_(capacity), next_(virtual_base) {
  // nop
}

caf::expected<void*> virtual_resource::do_allocate(size_t bytes, stream_ref,
                                                   const owner_tag&) {
  if (bytes == 0)
    return make_error(errc::invalid_arguments,
                      device_ + ": an allocation of 0 bytes");
  if (bytes > capacity_ - used_ ||
      bytes > UINTPTR_MAX - next_ - block_alignment)
    return make_error(errc::out_of_memory,
                      device_ + ": " + std::to_string(bytes) +
                          " bytes requested, " +
                          std::to_string(capacity_ - used_) + " of " +
                          std::to_string(capacity_) + " free");
  auto at = next_;
  next_ = align_up(next_ + bytes, uint64_t{2} << 20);
  ranges_.emplace(at, bytes);
  used_ += bytes;
  return reinterpret_cast<void*>(at);
}

caf::error virtual_resource::do_deallocate(void* p, size_t bytes, stream_ref) {
  auto i = ranges_.find(reinterpret_cast<uintptr_t>(p));
  if (i == ranges_.end() || i->second != bytes)
    return make_error(errc::invalid_free,
                      device_ + ": " + std::to_string(bytes) +
                          " bytes returned that were not handed out here");
  used_ -= bytes;
  ranges_.erase(i);
  return caf::none;
}

} // namespace cohort::devices::memory
