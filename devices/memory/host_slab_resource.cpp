#include "devices/memory/host_slab_resource.hpp"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "devices/memory/asan_poison.hpp"
#include "messages/errc.hpp"

namespace cohort::devices::memory {

host_slab_resource::host_slab_resource(std::string device, uint64_t capacity)
    : device_(std::move(device)), capacity_(capacity) {
  // nop
}

host_slab_resource::~host_slab_resource() {
  for (auto& [p, s] : maps_) {
    // A later mapping at this address must not inherit the pool's poison.
    asan_unpoison(p, s.bytes);
    ::munmap(p, s.bytes);
    if (s.fd >= 0)
      ::close(s.fd);
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
  // A memfd, so that another process can map the slab (objects shared
  // across processes); pages are only backed once touched, so a 16 GiB
  // simulated GPU costs only what its work touches. MAP_NORESERVE for the
  // anonymous fallback.
  //
  // A process the slab is shared with must neither shrink it (the pages
  // under this process's mapping would vanish: SIGBUS here) nor get more
  // rights than its descriptor has: the size is sealed, and the inode's
  // mode is 0400, so that reopening a descriptor through /proc (which
  // checks the inode's mode, 0777 for a new memfd) gives read access at
  // most, never write (root aside). This process keeps its own mapping.
  int fd = ::memfd_create(device_.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd >= 0 && (::ftruncate(fd, static_cast<off_t>(bytes)) != 0 ||
                  ::fcntl(fd, F_ADD_SEALS,
                          F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0 ||
                  ::fchmod(fd, S_IRUSR) != 0)) {
    ::close(fd);
    fd = -1;
  }
  void* p =
      fd >= 0
          ? ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
          : ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    auto why = errno;
    if (fd >= 0)
      ::close(fd);
    return make_error(
        errc::out_of_memory,
        device_ + ": mapping " + std::to_string(bytes) +
            " bytes of host memory failed: " + std::strerror(why));
  }
  maps_.emplace(static_cast<char*>(p), slab{bytes, fd});
  used_ += bytes;
  return p;
}

caf::error host_slab_resource::do_deallocate(void* p, size_t bytes,
                                             stream_ref) {
  auto i = maps_.find(static_cast<char*>(p));
  if (i == maps_.end() || i->second.bytes != bytes)
    return make_error(errc::invalid_free,
                      device_ + ": " + std::to_string(bytes) +
                          " bytes returned that were not mapped here");
  asan_unpoison(p, bytes);
  ::munmap(p, bytes);
  if (i->second.fd >= 0)
    ::close(i->second.fd);
  used_ -= bytes;
  maps_.erase(i);
  return caf::none;
}

caf::expected<shared_region> host_slab_resource::do_share(const void* p) {
  auto* c = static_cast<char*>(const_cast<void*>(p));
  auto i = maps_.upper_bound(c);
  if (i == maps_.begin())
    return make_error(errc::invalid_arguments,
                      device_ + ": no slab holds that address");
  --i;
  if (c >= i->first + i->second.bytes)
    return make_error(errc::invalid_arguments,
                      device_ + ": no slab holds that address");
  if (i->second.fd < 0)
    return make_error(errc::invalid_arguments,
                      device_ + ": its memory is not a memfd "
                                "(memfd_create was refused) and cannot be "
                                "shared");
  int fd = ::fcntl(i->second.fd, F_DUPFD_CLOEXEC, 0);
  if (fd < 0)
    return make_error(errc::io_error, device_ + ": dup of a slab's memfd: " +
                                          std::strerror(errno));
  shared_region r;
  r.how = shared_region::kind::memfd;
  r.fd = fd;
  r.offset = static_cast<uint64_t>(c - i->first);
  r.region_bytes = i->second.bytes;
  return r;
}

} // namespace cohort::devices::memory
