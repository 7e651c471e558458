#include "devices/memory/host_slab_resource.hpp"

#include <cerrno>
#include <cstring>
#include <sys/mman.h>

#include "devices/memory/asan_poison.hpp"
#include "messages/errc.hpp"

namespace cohort::devices::memory {

host_slab_resource::host_slab_resource(std::string device, uint64_t capacity)
    : device_(std::move(device)), capacity_(capacity) {
  // nop
}

host_slab_resource::~host_slab_resource() {
  for (auto& [p, bytes] : maps_) {
    // A later mapping at this address must not inherit the pool's poison.
    asan_unpoison(p, bytes);
    ::munmap(p, bytes);
  }
}

caf::expected<void*> host_slab_resource::do_allocate(size_t bytes, stream_ref,
                                                     const owner_tag&) {
  if (bytes == 0)
    return make_error(errc::invalid_arguments,
                      device_ + ": an allocation of 0 bytes");
  if (bytes > capacity_ - used_)
    return make_error(errc::out_of_memory,
                      device_ + ": " + std::to_string(bytes) +
                          " bytes requested, " +
                          std::to_string(capacity_ - used_) + " of " +
                          std::to_string(capacity_) + " free");
  // MAP_NORESERVE: a 16 GiB simulated GPU costs only what its work touches.
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED)
    return make_error(
        errc::out_of_memory,
        device_ + ": mapping " + std::to_string(bytes) +
            " bytes of host memory failed: " + std::strerror(errno));
  maps_.emplace(p, bytes);
  used_ += bytes;
  return p;
}

caf::error host_slab_resource::do_deallocate(void* p, size_t bytes,
                                             stream_ref) {
  auto i = maps_.find(p);
  if (i == maps_.end() || i->second != bytes)
    return make_error(errc::invalid_free,
                      device_ + ": " + std::to_string(bytes) +
                          " bytes returned that were not mapped here");
  asan_unpoison(p, bytes);
  ::munmap(p, bytes);
  used_ -= bytes;
  maps_.erase(i);
  return caf::none;
}

} // namespace cohort::devices::memory
