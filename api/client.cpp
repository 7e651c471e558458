// The client library of shared objects (include/cohort/client.hpp): one
// SOCK_SEQPACKET connection per attachment, so that closing it (or this
// process dying) is a detach the node sees at once.
#include "cohort/client.hpp"

#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>

#include "devices/gpu/discover.hpp"
#include "kernels/dtype.hpp"
#include "objects/share.pb.h"

namespace cohort::client {

namespace {

[[noreturn]] void fail(errc code, const std::string& why) {
  throw cohort::error{code, why};
}

[[noreturn]] void fail_errno(const std::string& what) {
  fail(errc::io_error, what + ": " + std::strerror(errno));
}

errc code_named(const std::string& name) {
  for (int i = 0; i <= int(errc::over_fallback_budget); ++i)
    if (to_string(errc(i)) == name)
      return errc(i);
  return errc::io_error;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return char(std::tolower(c)); });
  return s;
}

// Sends `req` and receives the reply with the descriptor beside it, if any.
share::Reply exchange(int sock, const share::Request& req, int& fd) {
  auto bytes = req.SerializeAsString();
  for (;;) {
    auto n = ::send(sock, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n >= 0)
      break;
    if (errno != EINTR)
      fail_errno("sending to the share socket");
  }
  char buf[8192];
  iovec iov{buf, sizeof buf};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n;
  do
    n = ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
  while (n < 0 && errno == EINTR);
  if (n < 0)
    fail_errno("reading from the share socket");
  if (n == 0)
    fail(errc::io_error, "the share socket closed the connection");
  fd = -1;
  for (auto* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
      std::memcpy(&fd, CMSG_DATA(c), sizeof(int));
  share::Reply reply;
  if ((msg.msg_flags & MSG_TRUNC) != 0 || !reply.ParseFromArray(buf, int(n))) {
    if (fd >= 0)
      ::close(fd);
    fail(errc::io_error, "the share socket's reply is malformed");
  }
  if (!reply.error().empty()) {
    if (fd >= 0)
      ::close(fd);
    fail(code_named(reply.error()), reply.detail());
  }
  return reply;
}

} // namespace

struct attachment::impl {
  int sock = -1;
  uint64_t id = 0;
  uint64_t object = 0;
  std::string tenant;
  dtype type = dtype::f32;
  size_t size = 0;
  memory_kind where = memory_kind::host;
  std::string device;
  std::string pci_bus_id;
  bool writable = false;
  /// Host: the mapping (page-aligned) and the object in it.
  void* map = nullptr;
  size_t map_bytes = 0;
  /// GPU: the opened allocation and its runtime.
  void* base = nullptr;
  std::shared_ptr<devices::gpu::api> rt;
  char* data = nullptr;

  void release() {
    if (map != nullptr)
      ::munmap(map, map_bytes);
    if (base != nullptr && rt)
      rt->ipc_close_handle(base);
    if (sock >= 0 && id != 0) {
      // A detach the node counts as one; a connection that closes without
      // it (a process that died) is reclaimed.
      share::Request req;
      req.mutable_detach()->set_attachment(id);
      int fd = -1;
      try {
        exchange(sock, req, fd);
      } catch (const cohort::error&) {
        // The node is gone or stopped: nothing to detach from.
      }
      if (fd >= 0)
        ::close(fd);
    }
    if (sock >= 0)
      ::close(sock);
    map = base = nullptr;
    data = nullptr;
    sock = -1;
  }
};

attachment attachment::attach(const std::string& socket_path,
                              const std::string& token, bool write) {
  auto p = std::make_unique<impl>();
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path.empty() || socket_path.size() >= sizeof addr.sun_path)
    fail(errc::invalid_arguments, "a share socket's path has 1 to " +
                                      std::to_string(sizeof addr.sun_path - 1) +
                                      " characters");
  std::memcpy(addr.sun_path, socket_path.data(), socket_path.size());
  p->sock = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (p->sock < 0)
    fail_errno("a socket");
  if (::connect(p->sock, reinterpret_cast<sockaddr*>(&addr), sizeof addr) !=
      0) {
    auto why = std::string{std::strerror(errno)};
    p->release();
    fail(errc::io_error,
         "no runtime shares objects at '" + socket_path + "': " + why);
  }
  share::Request req;
  req.mutable_attach()->set_token(token);
  req.mutable_attach()->set_write(write);
  int fd = -1;
  share::Reply r;
  try {
    r = exchange(p->sock, req, fd);
  } catch (...) {
    p->release();
    throw;
  }
  p->id = r.attachment();
  p->object = r.object();
  p->tenant = r.tenant();
  auto t = kernels::parse_dtype(r.dtype());
  p->type = t ? dtype(*t) : dtype::u8;
  p->size = r.elements();
  p->device = r.device();
  p->pci_bus_id = r.pci_bus_id();
  p->writable = r.writable();
  auto bytes = p->size * element_size(p->type);
  if (r.kind() == "memfd") {
    if (fd < 0) {
      p->release();
      fail(errc::io_error, "the share socket sent no descriptor");
    }
    if (r.offset() > r.region_bytes() ||
        bytes > r.region_bytes() - r.offset()) {
      ::close(fd);
      p->release();
      fail(errc::io_error, "the share socket's reply names memory outside "
                           "its region");
    }
    auto page = uint64_t(::sysconf(_SC_PAGESIZE));
    auto start = r.offset() / page * page;
    p->map_bytes = std::max<size_t>(r.offset() - start + bytes, 1);
    auto prot = PROT_READ | (p->writable ? PROT_WRITE : 0);
    p->map = ::mmap(nullptr, p->map_bytes, prot, MAP_SHARED, fd, off_t(start));
    auto why = errno;
    ::close(fd);
    if (p->map == MAP_FAILED) {
      p->map = nullptr;
      p->release();
      errno = why;
      fail_errno("mapping a shared object");
    }
    p->where = memory_kind::host;
    p->data = static_cast<char*>(p->map) + (r.offset() - start);
  } else if (r.kind() == "cuda_ipc" || r.kind() == "hip_ipc") {
    if (fd >= 0)
      ::close(fd);
    bool cuda = r.kind() == "cuda_ipc";
    p->where = cuda ? memory_kind::cuda : memory_kind::hip;
    p->rt = cuda ? devices::gpu::cuda_runtime() : devices::gpu::hip_runtime();
    if (!p->rt) {
      p->release();
      fail(errc::invalid_arguments,
           std::string{"the object is on a "} + (cuda ? "CUDA" : "HIP") +
               " GPU, and this process has no " + (cuda ? "CUDA" : "HIP") +
               " runtime (its plugin did not load)");
    }
    int n = 0, ordinal = -1;
    p->rt->device_count(n);
    for (int i = 0; i < n && ordinal < 0; ++i) {
      devices::gpu::properties props;
      if (!p->rt->get_properties(i, props).failed() &&
          lower(props.pci_bus_id) == lower(r.pci_bus_id()))
        ordinal = i;
    }
    std::array<uint8_t, 64> handle{};
    if (ordinal < 0 || r.ipc_handle().size() != handle.size()) {
      p->release();
      fail(errc::invalid_arguments, "the GPU holding the object (PCI " +
                                        r.pci_bus_id() +
                                        ") is not visible to this process");
    }
    std::memcpy(handle.data(), r.ipc_handle().data(), handle.size());
    p->rt->set_device(ordinal);
    if (auto rc = p->rt->ipc_open_handle(handle, p->base); rc.failed()) {
      p->base = nullptr;
      auto why = p->rt->describe(rc.raw);
      p->release();
      fail(errc::io_error, "opening the GPU memory's IPC handle: " + why);
    }
    p->data = static_cast<char*>(p->base) + r.offset();
  } else {
    if (fd >= 0)
      ::close(fd);
    p->release();
    fail(errc::io_error,
         "the share socket sent memory of an unknown kind '" + r.kind() + "'");
  }
  return attachment{std::move(p)};
}

attachment::attachment(std::unique_ptr<impl> p) : impl_(std::move(p)) {
  // nop
}

attachment::attachment(attachment&& other) noexcept = default;

attachment& attachment::operator=(attachment&& other) noexcept {
  if (this != &other) {
    detach();
    impl_ = std::move(other.impl_);
  }
  return *this;
}

attachment::~attachment() {
  detach();
}

void attachment::detach() {
  if (impl_)
    impl_->release();
}

bool attachment::attached() const {
  return impl_ && impl_->data != nullptr;
}

uint64_t attachment::id() const {
  return impl_ ? impl_->id : 0;
}
uint64_t attachment::object() const {
  return impl_ ? impl_->object : 0;
}
const std::string& attachment::tenant() const {
  return impl_->tenant;
}
dtype attachment::type() const {
  return impl_->type;
}
size_t attachment::size() const {
  return impl_ ? impl_->size : 0;
}
size_t attachment::bytes() const {
  return impl_ ? impl_->size * element_size(impl_->type) : 0;
}
memory_kind attachment::where() const {
  return impl_->where;
}
const std::string& attachment::device() const {
  return impl_->device;
}
const std::string& attachment::pci_bus_id() const {
  return impl_->pci_bus_id;
}
bool attachment::writable() const {
  return impl_ && impl_->writable;
}

const void* attachment::data() const {
  return impl_ ? impl_->data : nullptr;
}

void* attachment::mutable_data() {
  if (!writable())
    fail(errc::not_granted, "the attachment is read-only");
  return impl_->data;
}

void attachment::check_view(dtype t) const {
  if (!attached())
    fail(errc::invalid_arguments, "the attachment was detached");
  if (impl_->where != memory_kind::host)
    fail(errc::invalid_arguments, "the object is in GPU memory (" +
                                      impl_->device +
                                      "): data() is a device pointer");
  if (t != impl_->type)
    fail(errc::invalid_arguments, std::string{"the object holds "} +
                                      to_string(impl_->type) + ", not " +
                                      to_string(t));
}

} // namespace cohort::client
