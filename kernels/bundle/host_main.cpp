// cohort-kernel-host: runs a kernel bundle's CPU code in a process of its
// own (docs/kernels.md, "Kernel hosts"), one call at a time. It reads a
// KernelHostStart on standard input, limits its address space, opens the
// bundle's shared objects from the descriptors it inherited, says it is
// ready, then answers calls on its socket (host_protocol.hpp) until the
// node closes it. A kernel that crashes, aborts, exits or spins ends this
// process, not the node: the node kills it past the call's time limit.
#include <dlfcn.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ipc/child.hpp"
#include "kernels/bundle/host_protocol.hpp"
#include "messages/bundle.pb.h"

namespace {

namespace host = cohort::kernels::bundle::host;

/// What it may write to standard error (a memory file the node reads).
constexpr rlim_t stderr_limit = 64 << 10;

[[noreturn]] void die(const std::string& why) {
  std::fprintf(stderr, "cohort-kernel-host: %s\n", why.c_str());
  std::fflush(stderr);
  ::_exit(4);
}

void say(const host::answer& a) {
  if (::send(host::socket_fd, &a, sizeof a, MSG_NOSIGNAL) != ssize_t(sizeof a))
    ::_exit(0); // the node is gone
}

void refuse(host::outcome how, const std::string& why) {
  host::answer a;
  a.how = how;
  std::snprintf(a.error, sizeof a.error, "%s", why.c_str());
  say(a);
}

struct region {
  uint8_t* base = nullptr;
  uint64_t size = 0;

  bool map(uint64_t bytes, std::string& why) {
    if (bytes == size)
      return true;
    if (base != nullptr)
      ::munmap(base, size);
    base = nullptr;
    size = 0;
    if (bytes == 0)
      return true;
    void* m = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED,
                     host::region_fd, 0);
    if (m == MAP_FAILED) {
      why = "cannot map " + std::to_string(bytes) +
            " bytes: " + std::strerror(errno);
      return false;
    }
    base = static_cast<uint8_t*>(m);
    size = bytes;
    return true;
  }

  bool holds(const host::span& s) const {
    if (s.dtype < COHORT_F32 || s.dtype > COHORT_U8)
      return false;
    static constexpr uint64_t widths[] = {4, 8, 4, 8, 1};
    auto w = widths[s.dtype];
    return s.offset <= size && s.length <= (size - s.offset) / w;
  }
};

} // namespace

int main(int argc, char** argv) {
  if (int status = cohort::ipc::enter_helper(
          argc, argv, " < KernelHostStart",
          "cohort-kernel-host is started by a Cohort node to run a kernel "
          "bundle's CPU code in a process of its own; it is not meant to be "
          "run by hand.");
      status >= 0)
    return status;

  cohort::pb::KernelHostStart start;
  if (!start.ParseFromFileDescriptor(0))
    die("the start message does not parse");
  // Before any of the bundle's code runs (its constructors included).
  if (auto limit = start.memory_limit_bytes(); limit > 0) {
    rlimit as{rlim_t(limit), rlim_t(limit)};
    if (::setrlimit(RLIMIT_AS, &as) != 0)
      die(std::string{"cannot limit its memory: "} + std::strerror(errno));
  }
  // Standard error is a memory file of the node: bounded, and a write past
  // the bound fails instead of killing the host.
  std::signal(SIGXFSZ, SIG_IGN);
  rlimit fsize{stderr_limit, stderr_limit};
  ::setrlimit(RLIMIT_FSIZE, &fsize);

  std::vector<void*> objects;
  for (auto& o : start.object()) {
    auto where = "/proc/self/fd/" + std::to_string(o.fd());
    void* h = ::dlopen(where.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
      auto* err = ::dlerror();
      die("blob '" + o.path() +
          "' does not load: " + (err != nullptr ? err : "dlopen failed"));
    }
    objects.push_back(h);
  }
  std::vector<cohort_cpu_kernel> kernels;
  for (auto& k : start.kernel()) {
    if (k.object() >= objects.size())
      die("kernel '" + k.name() + "' names no shared object");
    auto* sym = ::dlsym(objects[k.object()], k.symbol().c_str());
    if (sym == nullptr)
      die("kernel '" + k.name() + "': no symbol '" + k.symbol() + "'");
    kernels.push_back(reinterpret_cast<cohort_cpu_kernel>(sym));
  }
  // A kernel that calls exit(N) ends the host with N at once: not the
  // bundle's destructors (registered while it loaded, so they would run
  // before a handler registered earlier), not a sanitizer's leak check at
  // exit (which would change the status the node reports).
  ::on_exit([](int status, void*) { ::_exit(status); }, nullptr);
  say(host::answer{});

  region mem;
  for (;;) {
    host::call c;
    auto n = ::recv(host::socket_fd, &c, sizeof c, 0);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      ::_exit(0); // the node closed its end, or is gone
    if (n != ssize_t(sizeof c) || c.magic != host::magic) {
      refuse(host::outcome::bad_call, "a call of another Cohort build");
      continue;
    }
    std::string why;
    if (!mem.map(c.region_bytes, why)) {
      refuse(host::outcome::no_region, why);
      continue;
    }
    bool ok = c.kernel < kernels.size() && c.input_count <= COHORT_MAX_INPUTS &&
              mem.holds(c.output);
    for (uint32_t i = 0; ok && i < c.input_count; ++i)
      ok = mem.holds(c.inputs[i]);
    if (!ok) {
      refuse(host::outcome::bad_call, "a kernel or buffer it does not have");
      continue;
    }
    cohort_buffer bufs[COHORT_MAX_INPUTS];
    for (uint32_t i = 0; i < c.input_count; ++i)
      bufs[i] = {mem.base + c.inputs[i].offset, c.inputs[i].length,
                 c.inputs[i].dtype};
    static constexpr uint64_t widths[] = {4, 8, 4, 8, 1};
    void* out = mem.base + c.output.offset;
    if (auto bytes = c.output.length * widths[c.output.dtype]; bytes > 0)
      std::memset(out, 0, bytes);
    host::answer a;
    cohort_kernel_call call{};
    call.abi_version = COHORT_KERNEL_ABI_VERSION;
    call.input_count = c.input_count;
    call.inputs = bufs;
    call.output = out;
    call.output_length = c.output.length;
    call.output_dtype = c.output.dtype;
    call.alpha = c.alpha;
    call.m = c.m;
    call.n = c.n;
    call.k = c.k;
    call.top_k = c.top_k;
    call.error = a.error;
    call.error_size = sizeof a.error;
    a.rc = kernels[c.kernel](&call);
    a.error[sizeof a.error - 1] = '\0';
    say(a);
  }
}
