#include "kernels/bundle/kernel_host.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "ipc/child.hpp"
#include "kernels/bundle/host_protocol.hpp"

namespace cohort::kernels::bundle {

namespace {

std::atomic<uint64_t> started_count{0};
std::atomic<uint64_t> crashed_count{0};
std::atomic<uint64_t> timed_out_count{0};

constexpr uint64_t region_align = 64;
constexpr uint64_t min_region = uint64_t{1} << 20;
/// A region this large is given back when calls need a quarter of it.
constexpr uint64_t shrink_above = uint64_t{64} << 20;
/// Bytes of a host's standard error kept for messages (RLIMIT_FSIZE there
/// bounds the file).
constexpr size_t stderr_tail = 1024;

uint64_t round_up(uint64_t n, uint64_t to) {
  return (n + to - 1) / to * to;
}

std::string mib(uint64_t bytes) {
  return std::to_string(bytes >> 20) + " MiB";
}

// Sanitizers that reserve more address space than any limit.
bool sanitized() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) ||   \
    __has_feature(memory_sanitizer)
  return true;
#else
  return false;
#endif
#else
  return false;
#endif
}

// The last bytes a host wrote to its standard error, on one line.
std::string tail_of(int fd) {
  auto out = ipc::file_tail(fd, stderr_tail);
  std::replace(out.begin(), out.end(), '\n', ' ');
  return out;
}

// How a host that is gone ended, in words.
std::string ending(std::optional<int> status) {
  if (!status)
    return "its kernel host process ended in an unknown way";
  if (WIFSIGNALED(*status))
    return "it crashed its kernel host process (" +
           ipc::signal_name(WTERMSIG(*status)) + ")";
  if (WIFEXITED(*status))
    return "it ended its kernel host process (exit status " +
           std::to_string(WEXITSTATUS(*status)) + ")";
  return "its kernel host process ended in an unknown way";
}

} // namespace

host_counts hosts_counted() {
  return {started_count.load(), crashed_count.load(), timed_out_count.load()};
}

std::string kernel_hosts::notes() {
  if (sanitized())
    return "this build uses a sanitizer (AddressSanitizer or another that "
           "reserves its shadow memory): kernel hosts run without their "
           "memory limit";
  return {};
}

/// One cohort-kernel-host process and what the node holds of it.
struct kernel_hosts::process {
  pid_t pid = -1;
  int sock = -1;
  int region = -1;
  int err = -1;
  void* map = nullptr;
  uint64_t mapped = 0;

  ~process() {
    if (map != nullptr)
      ::munmap(map, mapped);
    for (int fd : {sock, region, err})
      if (fd >= 0)
        ::close(fd);
    end();
  }

  // Kills and reaps it now: how it ended (it may have ended already).
  std::optional<int> end() {
    if (pid <= 0)
      return std::nullopt;
    auto st = ipc::kill_and_reap(pid);
    pid = -1;
    return st;
  }

  // The region holds `bytes` at least, mapped here; it grows, doubling up
  // to `cap` (the host maps all of it, within its memory limit), and never
  // shrinks (it is sealed against shrinking: a host that cut it would make
  // this process's copies fault).
  bool fit(uint64_t bytes, uint64_t cap, std::string& why) {
    if (bytes <= mapped && mapped > 0)
      return true;
    uint64_t want = std::max({round_up(bytes, 4096), min_region, mapped * 2});
    if (cap > 0 && want > cap)
      want = std::max(round_up(bytes, 4096), mapped);
    if (map != nullptr)
      ::munmap(map, mapped);
    map = nullptr;
    mapped = 0;
    if (::ftruncate(region, off_t(want)) != 0) {
      why = "cannot size the call's memory file to " + mib(want) + ": " +
            std::strerror(errno);
      return false;
    }
    void* m = ::mmap(nullptr, want, PROT_READ | PROT_WRITE, MAP_SHARED,
                     region, 0);
    if (m == MAP_FAILED) {
      why = "cannot map the call's memory file (" + mib(want) +
            "): " + std::strerror(errno);
      return false;
    }
    map = m;
    mapped = want;
    return true;
  }

  // Still running (a host killed while idle is reaped here).
  bool alive() {
    int st = 0;
    if (::waitpid(pid, &st, WNOHANG) == 0)
      return true;
    pid = -1;
    return false;
  }
};

kernel_hosts::kernel_hosts(std::string bundle, host_settings settings)
    : bundle_(std::move(bundle)), settings_(std::move(settings)) {
  // nop
}

std::shared_ptr<kernel_hosts> kernel_hosts::make(
    const std::string& bundle,
    const std::vector<std::pair<std::string, std::string>>& objects,
    const std::vector<pb::KernelHostStart::Kernel>& kernels,
    host_settings settings, std::string& why) {
  std::shared_ptr<kernel_hosts> h{
      new kernel_hosts(bundle, std::move(settings))};
  pb::KernelHostStart start;
  start.set_bundle(bundle);
  if (!sanitized())
    start.set_memory_limit_bytes(h->settings_.memory_limit);
  for (auto& [path, bytes] : objects) {
    auto label = "cohort-kernel-host:" + bundle + ":" + path;
    // Sealed: a host (which runs the bundle's code) cannot change what the
    // hosts after it load.
    int fd = ipc::memory_file(label.c_str(), bytes, why, /*sealed=*/true);
    if (fd < 0) {
      why = "blob '" + path + "': " + why;
      return nullptr;
    }
    auto* o = start.add_object();
    o->set_path(path);
    o->set_kind(pb::BundleBlob::CPU_SHARED_OBJECT);
    o->set_fd(host::first_object_fd + int(h->object_fds_.size()));
    h->object_fds_.push_back(fd);
  }
  for (auto& k : kernels) {
    *start.add_kernel() = k;
    h->names_.push_back(k.name());
  }
  h->start_ = start.SerializeAsString();
  return h;
}

kernel_hosts::~kernel_hosts() {
  // Each idle host is killed and reaped with its process object.
  idle_.clear();
  for (int fd : object_fds_)
    ::close(fd);
}

size_t kernel_hosts::running() const {
  return running_.load();
}

void kernel_hosts::fail(const std::string& kernel, const std::string& what) {
  throw kernel_failure(kernel + ": " + what);
}

std::unique_ptr<kernel_hosts::process> kernel_hosts::start(std::string& why) {
  auto p = std::make_unique<process>();
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) {
    why = std::string{"socketpair: "} + std::strerror(errno);
    return nullptr;
  }
  p->sock = pair[0];
  int theirs = pair[1];
  p->region = ::memfd_create("cohort-kernel-host:region",
                             MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (p->region >= 0 &&
      ::fcntl(p->region, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_SEAL) != 0) {
    why = std::string{"cannot seal the call's memory file: "} +
          std::strerror(errno);
    ::close(theirs);
    return nullptr;
  }
  p->err = ::memfd_create("cohort-kernel-host:stderr", MFD_CLOEXEC);
  int in = ipc::memory_file("cohort-kernel-host:start", start_, why);
  if (p->region < 0 || p->err < 0 || in < 0) {
    if (why.empty())
      why = std::string{"memfd_create: "} + std::strerror(errno);
    ::close(theirs);
    if (in >= 0)
      ::close(in);
    return nullptr;
  }
  std::vector<int> fds{in, -1, p->err, theirs, p->region};
  fds.insert(fds.end(), object_fds_.begin(), object_fds_.end());
  p->pid = ipc::start_helper(
      settings_.program, {"--parent", std::to_string(::getpid())}, fds, why);
  ::close(theirs);
  ::close(in);
  if (p->pid < 0)
    return nullptr;
  ++started_count;
  // It says it is ready once the bundle's objects loaded there.
  pollfd pfd{p->sock, POLLIN, 0};
  int n = 0;
  do
    n = ::poll(&pfd, 1, int(settings_.start_timeout.count()));
  while (n < 0 && errno == EINTR);
  host::answer ready;
  if (n == 1 &&
      ::recv(p->sock, &ready, sizeof ready, 0) == ssize_t(sizeof ready) &&
      ready.magic == host::magic && ready.how == host::outcome::ran)
    return p;
  auto said = tail_of(p->err);
  if (n == 0) {
    p->end();
    why = "it did not start in " +
          std::to_string(settings_.start_timeout.count()) + " ms";
  } else {
    auto st = p->end();
    why = st && WIFEXITED(*st)
              ? "it exited with status " + std::to_string(WEXITSTATUS(*st))
          : st && WIFSIGNALED(*st)
              ? "it crashed (" + ipc::signal_name(WTERMSIG(*st)) + ")"
              : "it did not say it was ready";
  }
  if (!said.empty())
    why += "; it wrote: " + said;
  return nullptr;
}

std::unique_ptr<kernel_hosts::process> kernel_hosts::take(bool& fresh,
                                                          std::string& why) {
  fresh = false;
  for (;;) {
    std::unique_ptr<process> p;
    {
      std::lock_guard guard{mtx_};
      if (idle_.empty())
        break;
      p = std::move(idle_.back());
      idle_.pop_back();
    }
    if (p->alive())
      return p;
    --running_;
  }
  fresh = true;
  auto p = start(why);
  if (p)
    ++running_;
  return p;
}

void kernel_hosts::give_back(std::unique_ptr<process> p) {
  std::lock_guard guard{mtx_};
  idle_.push_back(std::move(p));
}

void kernel_hosts::call(uint32_t index, const kernel_args& args,
                        typed_inputs in, kernel_output& out,
                        std::chrono::milliseconds limit) {
  auto& name = index < names_.size() ? names_[index] : bundle_;
  if (in.size() > COHORT_MAX_INPUTS)
    fail(name, "takes at most " + std::to_string(COHORT_MAX_INPUTS) +
                   " inputs in a kernel host");
  host::call c;
  c.kernel = index;
  c.alpha = args.alpha;
  c.m = args.m;
  c.n = args.n;
  c.k = args.k;
  c.top_k = args.top_k;
  c.input_count = uint32_t(in.size());
  uint64_t at = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    c.inputs[i] = {at, in[i].size, int32_t(in[i].type), 0};
    at = round_up(at + in[i].bytes(), region_align);
  }
  auto ov = out.view();
  c.output = {at, ov.size, int32_t(ov.type), 0};
  uint64_t total = at + ov.bytes();
  // Hosts that died while idle (killed from outside) are passed over before
  // anything runs: the call reaches one host, at most once.
  for (;;) {
    std::string why;
    bool fresh = false;
    auto p = take(fresh, why);
    if (!p)
      fail(name, "cannot start a kernel host process: " + why);
    auto drop = [&] {
      --running_;
      return p->end();
    };
    if (!p->fit(total, settings_.memory_limit, why)) {
      drop();
      fail(name, why);
    }
    auto* base = static_cast<uint8_t*>(p->map);
    for (size_t i = 0; i < in.size(); ++i)
      if (in[i].bytes() > 0)
        std::memcpy(base + c.inputs[i].offset, in[i].data, in[i].bytes());
    c.region_bytes = p->mapped;
    auto sent = ::send(p->sock, &c, sizeof c, MSG_NOSIGNAL);
    if (sent != ssize_t(sizeof c)) {
      auto err = errno;
      drop();
      if (!fresh)
        continue;
      fail(name, std::string{"cannot reach its kernel host process: "} +
                     std::strerror(err));
    }
    // Sent: the kernel runs. Whatever happens from here ends the call with
    // a kernel_failure, never with an error the item would be retried for
    // (it would run again).
    try {
      finish(*p, name, c, total, out, limit);
    } catch (const kernel_failure&) {
      drop();
      throw;
    } catch (const std::exception& e) {
      drop();
      fail(name, std::string{"its kernel host call failed: "} + e.what());
    }
    give_back(std::move(p));
    return;
  }
}

void kernel_hosts::finish(process& p, const std::string& name,
                          const host::call& c, uint64_t total,
                          kernel_output& out, std::chrono::milliseconds limit) {
  pollfd pfd{p.sock, POLLIN, 0};
  auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      p.end();
      ++timed_out_count;
      fail(name, "ran past its " + std::to_string(limit.count()) +
                     " ms kernel timeout; its kernel host process was killed");
    }
    // At most a minute per poll: a limit past INT_MAX ms must not wrap.
    int n = ::poll(&pfd, 1, int(std::min<int64_t>(left.count(), 60'000)));
    if (n > 0)
      break;
    if (n < 0 && errno != EINTR)
      fail(name, std::string{"cannot wait for its kernel host process: "} +
                     std::strerror(errno));
  }
  host::answer a;
  ssize_t got = 0;
  do
    got = ::recv(p.sock, &a, sizeof a, 0);
  while (got < 0 && errno == EINTR);
  if (got != ssize_t(sizeof a) || a.magic != host::magic) {
    auto said = tail_of(p.err);
    auto how = p.end();
    ++crashed_count;
    fail(name, ending(how) + (said.empty() ? "" : "; it wrote: " + said));
  }
  a.error[sizeof a.error - 1] = '\0';
  switch (a.how) {
  case host::outcome::ran:
    break;
  case host::outcome::no_region:
    fail(name, "its inputs and output (" + std::to_string(total) +
                   " bytes) do not fit its kernel host process's memory "
                   "limit (" +
                   mib(settings_.memory_limit) + "): " + a.error);
  default:
    fail(name, std::string{"its kernel host process refused the call: "} +
                   a.error);
  }
  // A host whose kernel failed is not used again (the caller drops it):
  // what a failing kernel leaves behind (memory it leaked up to the limit,
  // state it broke) must not fail the calls after it.
  if (a.rc != 0)
    fail(name, a.error[0] != '\0' ? std::string{a.error}
                                   : "failed with code " + std::to_string(a.rc));
  auto ov = out.view();
  void* dest = out.type == dtype::f32 ? static_cast<void*>(out.values.data())
                                      : static_cast<void*>(out.raw.data());
  if (ov.bytes() > 0)
    std::memcpy(dest, static_cast<uint8_t*>(p.map) + c.output.offset,
                ov.bytes());
}

} // namespace cohort::kernels::bundle
