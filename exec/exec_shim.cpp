// The allocation shim of `cohort exec` (docs/exec.md), preloaded into a
// program Cohort did not build: it holds the program's device memory to
// its session's limit. Every allocation of the CUDA runtime and driver APIs
// is charged against credit leased from the node in chunks, so most make no
// round trip; a free returns credit, and surplus credit goes back to the
// node. Without a session (no node, an unknown token, a broken connection)
// it fails closed: an allocation that needs new credit is refused as out of
// memory.
//
// It catches allocations three ways: by interposing the exported symbols
// (a program linked with libcudart or libcuda), by answering dlsym (a
// program, or libcudart, that loads libcuda itself), and by answering
// cuGetProcAddress (how CUDA 11.3+ runtimes, static ones included, reach
// the driver). An allocation made through the runtime is charged once: the
// driver calls it makes are not charged again.
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "exec/exec_wire.hpp"
#include "exec/ptr_table.hpp"

// This library's exports (defined at the end), which its tables name.
extern "C" {
int cuMemAlloc_v2(unsigned long long*, size_t);
int cuMemAllocPitch_v2(unsigned long long*, size_t*, size_t, size_t,
                       unsigned int);
int cuMemAllocManaged(unsigned long long*, size_t, unsigned int);
int cuMemFree_v2(unsigned long long);
int cuMemAllocAsync(unsigned long long*, size_t, void*);
int cuMemAllocFromPoolAsync(unsigned long long*, size_t, void*, void*);
int cuMemFreeAsync(unsigned long long, void*);
int cuMemCreate(unsigned long long*, size_t, const void*, unsigned long long);
int cuMemRelease(unsigned long long);
int cuMemMap(unsigned long long, size_t, size_t, unsigned long long,
             unsigned long long);
int cuMemUnmap(unsigned long long, size_t);
int cuMemRetainAllocationHandle(unsigned long long*, void*);
int cuGetProcAddress(const char*, void**, int, unsigned long long);
int cuGetProcAddress_v2(const char*, void**, int, unsigned long long, void*);
}

namespace {

namespace exec = cohort::exec;

// -- The CUDA ABI, as far as it is used --------------------------------------

using cudaError_t = int;
using CUresult = int;
using CUdeviceptr = unsigned long long;
using CUmemGenericAllocationHandle = unsigned long long;
using stream_t = void*;
using pool_t = void*;

constexpr cudaError_t cudaSuccess = 0;
constexpr cudaError_t cudaErrorMemoryAllocation = 2;
constexpr cudaError_t cudaErrorInitializationError = 3;
constexpr CUresult CUDA_SUCCESS = 0;
constexpr CUresult CUDA_ERROR_OUT_OF_MEMORY = 2;
constexpr CUresult CUDA_ERROR_NOT_FOUND = 500;
constexpr CUresult CUDA_ERROR_NOT_SUPPORTED = 801;

// -- The real functions ------------------------------------------------------

using dlsym_fn = void* (*)(void*, const char*);

// glibc's dlsym: this library defines its own.
dlsym_fn real_dlsym() {
  static dlsym_fn fn = [] {
    // 2.34 moved it into libc; before, each architecture's first version.
    for (auto* version : {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17",
                          "GLIBC_2.3", "GLIBC_2.2", "GLIBC_2.1", "GLIBC_2.0"})
      if (auto* p = dlvsym(RTLD_NEXT, "dlsym", version))
        return reinterpret_cast<dlsym_fn>(p);
    return dlsym_fn{nullptr};
  }();
  return fn;
}

// The definition of `name` in the loaded object `lm` itself (not one of
// its dependencies'); null when it has none.
void* defined_in(link_map* lm, const char* name) {
  auto* lookup = real_dlsym();
  if (lookup == nullptr || lm->l_name == nullptr || *lm->l_name == '\0')
    return nullptr;
  void* h = dlopen(lm->l_name, RTLD_LAZY | RTLD_NOLOAD);
  if (h == nullptr)
    return nullptr;
  void* p = lookup(h, name);
  dlclose(h);
  Dl_info info;
  link_map* owner = nullptr;
  if (p == nullptr ||
      dladdr1(p, &info, reinterpret_cast<void**>(&owner), RTLD_DL_LINKMAP) ==
          0 ||
      owner != lm)
    return nullptr;
  return p;
}

// The loaded object holding `addr`; null for none (generated code).
link_map* object_of(const void* addr) {
  Dl_info info;
  link_map* lm = nullptr;
  if (dladdr1(addr, &info, reinterpret_cast<void**>(&lm), RTLD_DL_LINKMAP) == 0)
    return nullptr;
  return lm;
}

// What dlsym(RTLD_NEXT, `name`) answers the object at `caller`: the first
// definition in an object loaded after it. (Forwarding RTLD_NEXT to glibc
// from here would search after this library instead.)
void* next_after(const void* caller, const char* name) {
  auto* lookup = real_dlsym();
  if (lookup == nullptr)
    return nullptr;
  auto* self = object_of(caller);
  // A caller in no object (generated code) gets what glibc gives it: the
  // search from the program on.
  if (self == nullptr)
    return lookup(RTLD_DEFAULT, name);
  for (auto* lm = self->l_next; lm != nullptr; lm = lm->l_next)
    if (void* p = defined_in(lm, name))
      return p;
  return nullptr;
}

// The real `name`: the next definition after this library in the global
// scope, else one in an object loaded locally (RTLD_LOCAL, as a Python
// extension loads its libcudart), never this library's own.
void* find_real(const char* name) {
  auto* lookup = real_dlsym();
  if (lookup == nullptr)
    return nullptr;
  if (void* p = lookup(RTLD_NEXT, name))
    return p;
  auto* self = object_of(reinterpret_cast<void*>(&find_real));
  if (self == nullptr)
    return nullptr;
  auto* lm = self;
  while (lm->l_prev != nullptr)
    lm = lm->l_prev;
  for (; lm != nullptr; lm = lm->l_next)
    if (lm != self)
      if (void* p = defined_in(lm, name))
        return p;
  return nullptr;
}

// `name` from the object that defines `fn` (a free beside its allocation,
// from the same copy of the library); null when that object has none.
void* sibling(void* fn, const char* name) {
  auto* lookup = real_dlsym();
  Dl_info info;
  if (lookup == nullptr || fn == nullptr || dladdr(fn, &info) == 0 ||
      info.dli_fname == nullptr)
    return nullptr;
  void* h = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
  if (h == nullptr)
    return nullptr;
  void* p = lookup(h, name);
  dlclose(h);
  return p;
}

// A real function, found at its first call and kept once found (a library
// loaded later may bring it).
template <class F> struct real_fn {
  const char* name;
  std::atomic<F> fn{nullptr};

  F get() {
    auto f = fn.load(std::memory_order_acquire);
    if (f == nullptr) {
      f = reinterpret_cast<F>(find_real(name));
      if (f != nullptr)
        fn.store(f, std::memory_order_release);
    }
    return f;
  }
};

// Inside a runtime API call: its driver calls are not charged again.
// Initial-exec: read on every call, without a __tls_get_addr each time.
// The shim is loaded by LD_PRELOAD, at start-up, where static TLS is
// certain (a dlopen of it would take glibc's spare static TLS, or fail
// saying so).
__attribute__((tls_model("initial-exec"))) thread_local int runtime_depth = 0;

struct runtime_call {
  runtime_call() { ++runtime_depth; }
  ~runtime_call() { --runtime_depth; }
  runtime_call(const runtime_call&) = delete;
  runtime_call& operator=(const runtime_call&) = delete;
};

// -- The credit book ---------------------------------------------------------

/// The smallest lease ahead of use (credit_book::charge).
constexpr uint64_t min_lease = uint64_t{1} << 20;

// A lock for the few instructions of a table lookup: spins a while, then
// yields the CPU until it is free.
class spin_lock {
public:
  void lock() {
    for (unsigned spins = 0; held_.exchange(true, std::memory_order_acquire);)
      while (held_.load(std::memory_order_relaxed))
        if (++spins > 100)
          sched_yield();
  }
  void unlock() { held_.store(false, std::memory_order_release); }
  /// In a child after fork, where the holder may have been another thread.
  void reset() { held_.store(false, std::memory_order_relaxed); }

private:
  std::atomic<bool> held_{false};
};

// The session's credit in this process: what the node leased and no
// allocation holds yet, and the size of each allocation made. Never
// destroyed: frees may come from other libraries' destructors after exit.
class credit_book {
public:
  /// Takes `n` bytes of credit, leasing more from the node when short
  /// (connecting first, in each process).
  bool charge(uint64_t n);
  /// Gives `n` bytes back to the credit; surplus goes back to the node.
  void refund(uint64_t n);

  /// Records allocation `key` (a device pointer, or with `handle` a VMM
  /// allocation's handle, which starts with one reference) of `n` bytes.
  /// A record it replaces is of memory freed behind the shim's back (a
  /// context destroyed with it): its credit returns.
  void remember(bool handle, uint64_t key, uint64_t n);

  /// The size of allocation `key`, forgotten; 0 when it was not made here.
  uint64_t forget(bool handle, uint64_t key);

  /// VMM allocations live while a reference holds them: their handle (from
  /// cuMemCreate or cuMemRetainAllocationHandle) or a mapping (cuMemMap,
  /// until cuMemUnmap). `release` drops one and returns the bytes to
  /// refund when it was the last.
  void retain(uint64_t handle);
  uint64_t release(uint64_t handle);
  /// `handle` mapped at `va`: a reference unless `counted` is false (a
  /// mapping put back after a failed unmap, still holding its own).
  void mapped(uint64_t va, uint64_t handle, bool counted = true);
  /// The mappings in [va, va + size), forgotten (their references are the
  /// caller's to release).
  std::vector<std::pair<uint64_t, uint64_t>> unmapped(uint64_t va,
                                                      uint64_t size);

  /// In a child after fork: nothing of the parent's is the child's, and
  /// another thread may have held a lock at the fork.
  void after_fork();

private:
  /// Takes `n` bytes from the credit when it holds them, without a lock.
  bool take(uint64_t n);
  /// Joins the session once per process; false when it cannot be reached.
  bool connect_locked();
  /// One request and its answer; false when the socket broke, timed out
  /// or answered something else.
  bool exchange_locked(const exec::wire_request& req, exec::wire_reply& reply);
  bool round_trip_locked(exec::wire_op op, uint64_t bytes,
                         exec::wire_reply& reply);
  void close_locked(const std::string& why);
  void warn_locked(const std::string& what);

  // The connection, under mtx_. The credit is taken and given back
  // without it, as long as it suffices and holds no surplus: most
  // allocations take no lock for it.
  std::mutex mtx_;
  int fd_ = -1;
  /// The process that joined (0: none yet, or a child after fork).
  std::atomic<pid_t> pid_ = 0;
  /// Set when the session cannot be reached: no new credit, ever.
  bool closed_ = false;
  bool warned_ = false;
  std::atomic<uint64_t> credit_ = 0;
  std::atomic<uint64_t> chunk_ = 0;
  /// What the node leased this process and it has not given back (the
  /// credit and what allocations hold), under mtx_.
  uint64_t leased_ = 0;
  // The allocations, under their own locks: a lease waiting on the node
  // holds up no free.
  // Device pointers, on every allocation and free: a table that does not
  // allocate, under a lock that makes no system call unless contended.
  spin_lock ptrs_lock_;
  exec::ptr_table ptrs_;
  // VMM handles and mappings, rarer: under map_mtx_.
  struct vmm {
    uint64_t bytes = 0;
    uint32_t refs = 0;
  };
  std::mutex map_mtx_;
  std::unordered_map<uint64_t, vmm> handles_;
  std::map<uint64_t, uint64_t> mappings_; // va -> handle
};

// Set once book() made it: the fork handler reads it here, not through
// book(), whose first call may be under way in another thread at a fork.
credit_book* the_book = nullptr;

credit_book& book() {
  static auto* b = [] {
    auto* made = new credit_book;
    the_book = made;
    pthread_atfork(nullptr, nullptr, [] { the_book->after_fork(); });
    return made;
  }();
  return *b;
}

void credit_book::remember(bool handle, uint64_t key, uint64_t n) {
  uint64_t stale = 0;
  if (handle) {
    std::lock_guard<std::mutex> guard{map_mtx_};
    auto& v = handles_[key];
    stale = v.bytes;
    v = {n, 1};
  } else {
    // Unrecorded when the table cannot grow (no host memory left): the
    // allocation stays charged after its free, erring toward refusing.
    bool ok = true;
    {
      std::lock_guard<spin_lock> guard{ptrs_lock_};
      stale = ptrs_.put(key, n, ok);
    }
    if (!ok) {
      std::lock_guard<std::mutex> guard{mtx_};
      warn_locked("out of host memory for the table of allocations: " +
                  std::to_string(n) + " bytes stay charged after their free");
    }
  }
  refund(stale);
}

uint64_t credit_book::forget(bool handle, uint64_t key) {
  if (!handle) {
    std::lock_guard<spin_lock> guard{ptrs_lock_};
    return ptrs_.take(key);
  }
  std::lock_guard<std::mutex> guard{map_mtx_};
  auto i = handles_.find(key);
  if (i == handles_.end())
    return 0;
  auto n = i->second.bytes;
  handles_.erase(i);
  return n;
}

void credit_book::retain(uint64_t handle) {
  std::lock_guard<std::mutex> guard{map_mtx_};
  if (auto i = handles_.find(handle); i != handles_.end())
    ++i->second.refs;
}

uint64_t credit_book::release(uint64_t handle) {
  std::lock_guard<std::mutex> guard{map_mtx_};
  auto i = handles_.find(handle);
  if (i == handles_.end() || --i->second.refs > 0)
    return 0;
  auto n = i->second.bytes;
  handles_.erase(i);
  return n;
}

void credit_book::mapped(uint64_t va, uint64_t handle, bool counted) {
  std::lock_guard<std::mutex> guard{map_mtx_};
  if (auto i = handles_.find(handle); i != handles_.end()) {
    if (counted)
      ++i->second.refs;
    mappings_[va] = handle;
  }
}

std::vector<std::pair<uint64_t, uint64_t>>
credit_book::unmapped(uint64_t va, uint64_t size) {
  std::lock_guard<std::mutex> guard{map_mtx_};
  std::vector<std::pair<uint64_t, uint64_t>> out;
  auto end = size > UINT64_MAX - va ? UINT64_MAX : va + size;
  for (auto i = mappings_.lower_bound(va);
       i != mappings_.end() && i->first < end;) {
    out.emplace_back(*i);
    i = mappings_.erase(i);
  }
  return out;
}

void credit_book::after_fork() {
  new (&mtx_) std::mutex;
  new (&map_mtx_) std::mutex;
  if (fd_ >= 0)
    ::close(fd_);
  fd_ = -1;
  // Joined on the child's first allocation.
  pid_ = 0;
  closed_ = false;
  warned_ = false;
  credit_ = 0;
  leased_ = 0;
  // Made anew, the parent's left behind (a thread may have been changing
  // them at the fork): nothing of them is the child's.
  ptrs_lock_.reset();
  new (&ptrs_) exec::ptr_table;
  new (&handles_) std::unordered_map<uint64_t, vmm>;
  new (&mappings_) std::map<uint64_t, uint64_t>;
}

void credit_book::warn_locked(const std::string& what) {
  if (warned_)
    return;
  warned_ = true;
  std::fprintf(stderr, "cohort exec: %s\n", what.c_str());
}

void credit_book::close_locked(const std::string& why) {
  if (fd_ >= 0)
    ::close(fd_);
  fd_ = -1;
  closed_ = true;
  warn_locked("device memory refused from now on (fail-closed): " + why);
}

bool credit_book::exchange_locked(const exec::wire_request& req,
                                  exec::wire_reply& reply) {
  ssize_t n;
  do
    n = ::send(fd_, &req, sizeof req, MSG_NOSIGNAL);
  while (n < 0 && errno == EINTR);
  if (n != ssize_t(sizeof req))
    return false;
  // A signal (a profiler's timer) may cut the wait short: wait again, up
  // to the socket's timeout each time.
  do
    n = ::recv(fd_, &reply, sizeof reply, 0);
  while (n < 0 && errno == EINTR);
  return n == ssize_t(sizeof reply) && reply.magic == exec::wire_magic &&
         reply.version == exec::wire_version;
}

bool credit_book::round_trip_locked(exec::wire_op op, uint64_t bytes,
                                    exec::wire_reply& reply) {
  exec::wire_request req;
  req.op = static_cast<uint16_t>(op);
  req.bytes = bytes;
  if (!exchange_locked(req, reply)) {
    close_locked("the node's session socket broke or did not answer within "
                 "10 s");
    return false;
  }
  return true;
}

bool credit_book::connect_locked() {
  // Set once per process (a fork's child clears it, after_fork): getpid()
  // on every allocation would be a system call each.
  if (pid_ != 0)
    return fd_ >= 0;
  // First use, or a child after fork: the parent's connection and
  // allocations are not this process's.
  if (fd_ >= 0)
    ::close(fd_);
  fd_ = -1;
  pid_ = ::getpid();
  closed_ = false;
  credit_ = 0;
  leased_ = 0;
  auto* path = std::getenv(exec::socket_env);
  auto* token = std::getenv(exec::token_env);
  if (path == nullptr || token == nullptr) {
    close_locked(std::string{"no session: "} + exec::socket_env + " and " +
                 exec::token_env + " are set by cohort exec");
    return false;
  }
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (std::strlen(path) >= sizeof addr.sun_path) {
    close_locked(std::string{"the socket path in "} + exec::socket_env +
                 " is too long");
    return false;
  }
  std::memcpy(addr.sun_path, path, std::strlen(path));
  fd_ = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd_ < 0 ||
      ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    close_locked(std::string{"cannot reach the node at "} + path + ": " +
                 std::strerror(errno));
    return false;
  }
  timeval tv{10, 0};
  ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  exec::wire_request hello;
  hello.op = static_cast<uint16_t>(exec::wire_op::hello);
  exec::set_text(hello.text, token);
  exec::wire_reply reply;
  if (!exchange_locked(hello, reply)) {
    close_locked(std::string{"the node at "} + path + " did not answer");
    return false;
  }
  if (reply.status != uint16_t(exec::wire_status::ok)) {
    close_locked("the node refused the session (" +
                 std::string{exec::to_string(exec::wire_status{reply.status})} +
                 "): " + exec::text_of(reply.text));
    return false;
  }
  chunk_ = reply.chunk > 0 ? reply.chunk : uint64_t{64} << 20;
  return true;
}

bool credit_book::take(uint64_t n) {
  auto c = credit_.load();
  while (c >= n)
    if (credit_.compare_exchange_weak(c, c - n))
      return true;
  return false;
}

bool credit_book::charge(uint64_t n) {
  if (n == 0 || take(n))
    return true;
  std::lock_guard<std::mutex> guard{mtx_};
  connect_locked();
  if (take(n)) // another thread leased meanwhile
    return true;
  if (closed_ || fd_ < 0) {
    warn_locked("an allocation of " + std::to_string(n) +
                " bytes was refused: the session cannot be reached");
    return false;
  }
  // All the credit left is this allocation's, with what is leased: the
  // other threads short of credit wait on the lock meanwhile.
  auto have = credit_.exchange(0);
  if (have >= n) { // given back meanwhile
    credit_.fetch_add(have - n);
    return true;
  }
  auto need = n - have;
  // Credit ahead in proportion to what the process uses: as much again as
  // it leased so far (at least 1 MiB, at most a chunk), so that a program
  // with a large limit that allocates little holds little of its tenant's
  // quota; else exactly what is missing.
  // Why, as the first refusal is printed: "(over_limit): ...".
  std::string refused = ": the session cannot be reached";
  auto ahead = std::min(chunk_.load(), std::max(leased_, min_lease));
  for (auto ask : {std::max(need, ahead), need}) {
    exec::wire_reply reply;
    if (!round_trip_locked(exec::wire_op::lease, ask, reply))
      break;
    if (reply.status == uint16_t(exec::wire_status::ok)) {
      leased_ += ask;
      credit_.fetch_add(have + ask - n);
      return true;
    }
    refused = " (" +
              std::string{exec::to_string(exec::wire_status{reply.status})} +
              "): " + exec::text_of(reply.text);
    if (ask == need)
      break;
  }
  // Frees may have given back enough meanwhile.
  credit_.fetch_add(have);
  if (take(n))
    return true;
  warn_locked("an allocation of " + std::to_string(n) + " bytes was refused" +
              refused);
  return false;
}

void credit_book::refund(uint64_t n) {
  if (n == 0)
    return;
  if (pid_ == 0)
    return; // not joined in this process: nothing was charged here
  auto now = credit_.fetch_add(n) + n;
  if (now <= 2 * chunk_)
    return;
  // Surplus: all but a chunk goes back to the node.
  std::lock_guard<std::mutex> guard{mtx_};
  if (fd_ < 0 || closed_)
    return;
  auto chunk = chunk_.load();
  auto c = credit_.load();
  do
    if (c <= 2 * chunk)
      return; // taken meanwhile, or given back by another thread
  while (!credit_.compare_exchange_weak(c, chunk));
  auto surplus = c - chunk;
  exec::wire_reply reply;
  // Kept when the node said no. When it did not answer, it may have taken
  // it back: not kept, erring toward refusing.
  bool answered = round_trip_locked(exec::wire_op::give_back, surplus, reply);
  if (answered && reply.status != uint16_t(exec::wire_status::ok))
    credit_.fetch_add(surplus);
  else
    leased_ -= std::min(leased_, surplus);
}

// -- Accounting around the calls ---------------------------------------------

uint64_t key_of(const void* p) {
  return reinterpret_cast<uintptr_t>(p);
}

// An allocation of `n` bytes made by `call` (which returns `ok` on success
// and then the key of what it made): charged first, refunded when it fails.
template <class R, class Call>
R charged(uint64_t n, R ok, R oom, bool handle, Call&& call) {
  if (!book().charge(n))
    return oom;
  uint64_t key = 0;
  auto rc = call(key);
  if (rc != ok) {
    book().refund(n);
    return rc;
  }
  book().remember(handle, key, n);
  return rc;
}

// Frees `key` with `call`; its credit returns once the free succeeded. The
// record goes first: once freed, the address may come back at once to
// another thread's allocation, whose record this must not take.
template <class R, class Call>
R uncharged(bool handle, uint64_t key, R ok, Call&& call) {
  auto n = book().forget(handle, key);
  auto rc = call();
  if (rc == ok)
    book().refund(n);
  else if (n > 0)
    book().remember(handle, key, n);
  return rc;
}

// A pitched allocation: `w * h` bytes charged first, what the pitch adds
// after the call (freed again with `free`, which says whether it could,
// when that is refused).
template <class R, class Free, class Call>
R charged_pitch(size_t w, size_t h, size_t* pitch, R ok, R oom, Free&& free,
                Call&& call) {
  if (h != 0 && w > SIZE_MAX / h)
    return oom;
  uint64_t n = uint64_t(w) * h;
  if (!book().charge(n))
    return oom;
  uint64_t key = 0;
  auto rc = call(key);
  if (rc != ok) {
    book().refund(n);
    return rc;
  }
  uint64_t made = pitch != nullptr && *pitch >= w ? uint64_t(*pitch) * h : n;
  if (made > n && !book().charge(made - n)) {
    // Freed again, or, when that fails, kept charged for what was asked:
    // never held uncharged.
    if (free(key))
      book().refund(n);
    else
      book().remember(false, key, n);
    return oom;
  }
  book().remember(false, key, std::max(made, n));
  return rc;
}

// -- Driver API --------------------------------------------------------------

using mem_alloc_t = CUresult (*)(CUdeviceptr*, size_t);
using mem_alloc_pitch_t = CUresult (*)(CUdeviceptr*, size_t*, size_t, size_t,
                                       unsigned int);
using mem_alloc_managed_t = CUresult (*)(CUdeviceptr*, size_t, unsigned int);
using mem_free_t = CUresult (*)(CUdeviceptr);
using mem_alloc_async_t = CUresult (*)(CUdeviceptr*, size_t, stream_t);
using mem_alloc_pool_t = CUresult (*)(CUdeviceptr*, size_t, pool_t, stream_t);
using mem_free_async_t = CUresult (*)(CUdeviceptr, stream_t);
using mem_create_t = CUresult (*)(CUmemGenericAllocationHandle*, size_t,
                                  const void*, unsigned long long);
using mem_release_t = CUresult (*)(CUmemGenericAllocationHandle);
using mem_map_t = CUresult (*)(CUdeviceptr, size_t, size_t,
                               CUmemGenericAllocationHandle,
                               unsigned long long);
using mem_unmap_t = CUresult (*)(CUdeviceptr, size_t);
using mem_retain_t = CUresult (*)(CUmemGenericAllocationHandle*, void*);
using proc_address_t = CUresult (*)(const char*, void**, int,
                                    unsigned long long);
using proc_address_v2_t = CUresult (*)(const char*, void**, int,
                                       unsigned long long, void*);

// An allocation through the driver: `real(p, n, rest...)`, charged `n`.
// With `real` null the call cannot be made: an unknown entry point.
template <class... A>
CUresult do_mem_alloc(CUresult (*real)(CUdeviceptr*, size_t, A...),
                      CUdeviceptr* p, size_t n, A... rest) {
  if (real == nullptr)
    return CUDA_ERROR_NOT_FOUND;
  if (runtime_depth > 0)
    return real(p, n, rest...);
  return charged(n, CUDA_SUCCESS, CUDA_ERROR_OUT_OF_MEMORY, false,
                 [&](uint64_t& key) {
                   auto rc = real(p, n, rest...);
                   key = p != nullptr ? *p : 0;
                   return rc;
                 });
}

// A free through the driver: `real(p, rest...)`, refunding what `p` held.
template <class... A>
CUresult do_mem_free(CUresult (*real)(CUdeviceptr, A...), CUdeviceptr p,
                     A... rest) {
  if (real == nullptr)
    return CUDA_ERROR_NOT_FOUND;
  if (runtime_depth > 0)
    return real(p, rest...);
  return uncharged(false, p, CUDA_SUCCESS, [&] { return real(p, rest...); });
}

CUresult do_mem_alloc_pitch(mem_alloc_pitch_t real, CUdeviceptr* p,
                            size_t* pitch, size_t w, size_t h,
                            unsigned int element) {
  if (real == nullptr)
    return CUDA_ERROR_NOT_FOUND;
  if (runtime_depth > 0)
    return real(p, pitch, w, h, element);
  return charged_pitch(
      w, h, pitch, CUDA_SUCCESS, CUDA_ERROR_OUT_OF_MEMORY,
      [&](uint64_t key) {
        auto free = reinterpret_cast<mem_free_t>(
            sibling(reinterpret_cast<void*>(real), "cuMemFree_v2"));
        return free != nullptr && free(key) == CUDA_SUCCESS;
      },
      [&](uint64_t& key) {
        auto rc = real(p, pitch, w, h, element);
        key = p != nullptr ? *p : 0;
        return rc;
      });
}

CUresult do_mem_create(mem_create_t real, CUmemGenericAllocationHandle* h,
                       size_t n, const void* prop, unsigned long long flags) {
  if (real == nullptr)
    return CUDA_ERROR_NOT_FOUND;
  if (runtime_depth > 0)
    return real(h, n, prop, flags);
  return charged(n, CUDA_SUCCESS, CUDA_ERROR_OUT_OF_MEMORY, true,
                 [&](uint64_t& key) {
                   auto rc = real(h, n, prop, flags);
                   key = h != nullptr ? *h : 0;
                   return rc;
                 });
}

// A VMM allocation's credit returns with its last reference: a mapping
// keeps it alive past cuMemRelease (create, map, release is the usual way).
CUresult do_mem_release(mem_release_t real, CUmemGenericAllocationHandle h) {
  if (real == nullptr)
    return CUDA_ERROR_NOT_FOUND;
  if (runtime_depth > 0)
    return real(h);
  auto freed = book().release(h);
  auto rc = real(h);
  if (rc == CUDA_SUCCESS)
    book().refund(freed);
  else if (freed > 0)
    book().remember(true, h, freed);
  else
    book().retain(h);
  return rc;
}

CUresult do_mem_map(mem_map_t real, CUdeviceptr va, size_t size, size_t offset,
                    CUmemGenericAllocationHandle h, unsigned long long flags) {
  if (real == nullptr)
    return CUDA_ERROR_NOT_FOUND;
  auto rc = real(va, size, offset, h, flags);
  if (rc == CUDA_SUCCESS && runtime_depth == 0)
    book().mapped(va, h);
  return rc;
}

CUresult do_mem_unmap(mem_unmap_t real, CUdeviceptr va, size_t size) {
  if (real == nullptr)
    return CUDA_ERROR_NOT_FOUND;
  if (runtime_depth > 0)
    return real(va, size);
  auto gone = book().unmapped(va, size);
  auto rc = real(va, size);
  for (auto& [at, h] : gone) {
    if (rc != CUDA_SUCCESS)
      book().mapped(at, h, false);
    else
      book().refund(book().release(h));
  }
  return rc;
}

CUresult do_mem_retain(mem_retain_t real, CUmemGenericAllocationHandle* h,
                       void* addr) {
  if (real == nullptr)
    return CUDA_ERROR_NOT_FOUND;
  auto rc = real(h, addr);
  if (rc == CUDA_SUCCESS && h != nullptr && runtime_depth == 0)
    book().retain(*h);
  return rc;
}

CUresult do_proc_address(proc_address_t real, const char* symbol, void** pfn,
                         int version, unsigned long long flags);
CUresult do_proc_address_v2(proc_address_v2_t real, const char* symbol,
                            void** pfn, int version, unsigned long long flags,
                            void* status);

// A driver entry point reached through a pointer (dlsym, cuGetProcAddress)
// is answered with a trampoline bound to the real one: several real ones
// of one signature (the per-thread-stream variants) each get their own.
constexpr size_t trampolines_per_call = 8;

template <auto Impl, class Sig> struct trampolines;

template <auto Impl, class R, class... A> struct trampolines<Impl, R(A...)> {
  using fn = R (*)(A...);
  static inline std::atomic<fn> reals[trampolines_per_call];

  template <size_t I> static R call(A... a) {
    return Impl(reals[I].load(std::memory_order_acquire), a...);
  }

  template <size_t... I>
  static constexpr std::array<fn, sizeof...(I)>
  table(std::index_sequence<I...>) {
    return {&call<I>...};
  }

  /// The trampoline calling `real`; null when every one is taken.
  static void* bind(void* real) {
    static constexpr auto calls =
        table(std::make_index_sequence<trampolines_per_call>{});
    auto want = reinterpret_cast<fn>(real);
    for (size_t i = 0; i < trampolines_per_call; ++i) {
      fn cur = reals[i].load(std::memory_order_acquire);
      if (cur == nullptr && reals[i].compare_exchange_strong(
                                cur, want, std::memory_order_acq_rel))
        cur = want;
      if (cur == want)
        return reinterpret_cast<void*>(calls[i]);
    }
    return nullptr;
  }

  /// Whether `p` is one of these trampolines.
  static bool owns(void* p) {
    static constexpr auto calls =
        table(std::make_index_sequence<trampolines_per_call>{});
    for (auto c : calls)
      if (reinterpret_cast<void*>(c) == p)
        return true;
    return false;
  }
};

struct wrapped_entry {
  /// As dlsym names it ("cuMemAlloc_v2"), and as cuGetProcAddress does
  /// ("cuMemAlloc", from CUDA version `since`).
  const char* symbol;
  const char* base;
  int since;
  void* (*bind)(void*);
  bool (*owns)(void*);
  /// This library's own export of `symbol` (null when it has none): a
  /// driver that hands out its entry points by address may hand out these,
  /// the definitions its own references bind to, which already charge.
  void* self;
};

template <auto Impl, class Sig>
wrapped_entry entry(const char* symbol, const char* base, int since,
                    Sig* self = nullptr) {
  return {symbol,
          base,
          since,
          &trampolines<Impl, Sig>::bind,
          &trampolines<Impl, Sig>::owns,
          reinterpret_cast<void*>(self)};
}

using alloc_sig = CUresult(CUdeviceptr*, size_t);
using pitch_sig = CUresult(CUdeviceptr*, size_t*, size_t, size_t, unsigned int);
using managed_sig = CUresult(CUdeviceptr*, size_t, unsigned int);
using free_sig = CUresult(CUdeviceptr);
using async_sig = CUresult(CUdeviceptr*, size_t, stream_t);
using pool_sig = CUresult(CUdeviceptr*, size_t, pool_t, stream_t);
using free_async_sig = CUresult(CUdeviceptr, stream_t);
using create_sig = CUresult(CUmemGenericAllocationHandle*, size_t, const void*,
                            unsigned long long);
using release_sig = CUresult(CUmemGenericAllocationHandle);
using map_sig = CUresult(CUdeviceptr, size_t, size_t,
                         CUmemGenericAllocationHandle, unsigned long long);
using unmap_sig = CUresult(CUdeviceptr, size_t);
using retain_sig = CUresult(CUmemGenericAllocationHandle*, void*);
using proc_sig = CUresult(const char*, void**, int, unsigned long long);
using proc_v2_sig = CUresult(const char*, void**, int, unsigned long long,
                             void*);

// The 64-bit size_t entry points came with CUDA 3.2 (version 3020);
// cuGetProcAddress_v2 with 12.5.
const wrapped_entry wrapped[] = {
    entry<&do_mem_alloc<>, alloc_sig>("cuMemAlloc_v2", "cuMemAlloc", 3020,
                                      &cuMemAlloc_v2),
    entry<&do_mem_alloc_pitch, pitch_sig>(
        "cuMemAllocPitch_v2", "cuMemAllocPitch", 3020, &cuMemAllocPitch_v2),
    entry<&do_mem_alloc<unsigned int>, managed_sig>(
        "cuMemAllocManaged", "cuMemAllocManaged", 0, &cuMemAllocManaged),
    entry<&do_mem_free<>, free_sig>("cuMemFree_v2", "cuMemFree", 3020,
                                    &cuMemFree_v2),
    entry<&do_mem_alloc<stream_t>, async_sig>(
        "cuMemAllocAsync", "cuMemAllocAsync", 0, &cuMemAllocAsync),
    entry<&do_mem_alloc<stream_t>, async_sig>("cuMemAllocAsync_ptsz", "", 0),
    entry<&do_mem_alloc<pool_t, stream_t>, pool_sig>(
        "cuMemAllocFromPoolAsync", "cuMemAllocFromPoolAsync", 0,
        &cuMemAllocFromPoolAsync),
    entry<&do_mem_alloc<pool_t, stream_t>, pool_sig>(
        "cuMemAllocFromPoolAsync_ptsz", "", 0),
    entry<&do_mem_free<stream_t>, free_async_sig>(
        "cuMemFreeAsync", "cuMemFreeAsync", 0, &cuMemFreeAsync),
    entry<&do_mem_free<stream_t>, free_async_sig>("cuMemFreeAsync_ptsz", "", 0),
    entry<&do_mem_create, create_sig>("cuMemCreate", "cuMemCreate", 0,
                                      &cuMemCreate),
    entry<&do_mem_release, release_sig>("cuMemRelease", "cuMemRelease", 0,
                                        &cuMemRelease),
    entry<&do_mem_map, map_sig>("cuMemMap", "cuMemMap", 0, &cuMemMap),
    entry<&do_mem_unmap, unmap_sig>("cuMemUnmap", "cuMemUnmap", 0, &cuMemUnmap),
    entry<&do_mem_retain, retain_sig>("cuMemRetainAllocationHandle",
                                      "cuMemRetainAllocationHandle", 0,
                                      &cuMemRetainAllocationHandle),
    entry<&do_proc_address, proc_sig>("cuGetProcAddress", "", 0,
                                      &cuGetProcAddress),
    entry<&do_proc_address_v2, proc_v2_sig>("cuGetProcAddress_v2", "", 0,
                                            &cuGetProcAddress_v2),
};

// What cuGetProcAddress answers for "cuGetProcAddress" from 12.5 on.
constexpr int proc_address_v2_since = 12050;

// The entry that `p`, found for `symbol`, is to be answered with: `p`
// itself when it is not wrapped (or is one of this library's own); null
// when an allocation cannot be held (every trampoline taken, the 32-bit
// entry points of CUDA before 3.2): fail closed.
void* answer(const char* symbol, bool base, int version, void* p) {
  if (p == nullptr || symbol == nullptr)
    return p;
  const wrapped_entry* hit = nullptr;
  for (auto& e : wrapped) {
    if (e.owns(p) || e.self == p)
      return p;
    bool named = base ? *e.base != '\0' && std::strcmp(symbol, e.base) == 0
                      : std::strcmp(symbol, e.symbol) == 0;
    // The 32-bit allocations of CUDA before 3.2 are not held: refused.
    if (named && base && version < e.since)
      return nullptr;
    if (named)
      hit = &e;
  }
  if (!base && (std::strcmp(symbol, "cuMemAlloc") == 0 ||
                std::strcmp(symbol, "cuMemAllocPitch") == 0))
    return nullptr;
  if (base && std::strcmp(symbol, "cuGetProcAddress") == 0)
    hit = &wrapped[version >= proc_address_v2_since ? std::size(wrapped) - 1
                                                    : std::size(wrapped) - 2];
  return hit != nullptr ? hit->bind(p) : p;
}

CUresult do_proc_address(proc_address_t real, const char* symbol, void** pfn,
                         int version, unsigned long long flags) {
  if (real == nullptr)
    return CUDA_ERROR_NOT_FOUND;
  auto rc = real(symbol, pfn, version, flags);
  if (rc != CUDA_SUCCESS || pfn == nullptr || *pfn == nullptr)
    return rc;
  *pfn = answer(symbol, true, version, *pfn);
  return *pfn != nullptr ? rc : CUDA_ERROR_NOT_SUPPORTED;
}

CUresult do_proc_address_v2(proc_address_v2_t real, const char* symbol,
                            void** pfn, int version, unsigned long long flags,
                            void* status) {
  if (real == nullptr)
    return CUDA_ERROR_NOT_FOUND;
  auto rc = real(symbol, pfn, version, flags, status);
  if (rc != CUDA_SUCCESS || pfn == nullptr || *pfn == nullptr)
    return rc;
  *pfn = answer(symbol, true, version, *pfn);
  return *pfn != nullptr ? rc : CUDA_ERROR_NOT_SUPPORTED;
}

// -- Runtime API -------------------------------------------------------------

using cuda_malloc_t = cudaError_t (*)(void**, size_t);
using cuda_free_t = cudaError_t (*)(void*);
using cuda_malloc_managed_t = cudaError_t (*)(void**, size_t, unsigned int);
using cuda_malloc_pitch_t = cudaError_t (*)(void**, size_t*, size_t, size_t);
using cuda_malloc_async_t = cudaError_t (*)(void**, size_t, stream_t);
using cuda_malloc_pool_t = cudaError_t (*)(void**, size_t, pool_t, stream_t);
using cuda_free_async_t = cudaError_t (*)(void*, stream_t);

// An allocation through the runtime: `real(p, n, rest...)`, charged `n`
// here, once: the driver calls the runtime makes inside are not.
template <class... A>
cudaError_t runtime_alloc(cudaError_t (*real)(void**, size_t, A...), void** p,
                          size_t n, A... rest) {
  if (real == nullptr)
    return cudaErrorInitializationError;
  runtime_call inside;
  return charged(n, cudaSuccess, cudaErrorMemoryAllocation, false,
                 [&](uint64_t& key) {
                   auto rc = real(p, n, rest...);
                   key = p != nullptr ? key_of(*p) : 0;
                   return rc;
                 });
}

// A free through the runtime: `real(p, rest...)`.
template <class... A>
cudaError_t runtime_free(cudaError_t (*real)(void*, A...), void* p, A... rest) {
  if (real == nullptr)
    return cudaErrorInitializationError;
  runtime_call inside;
  return uncharged(false, key_of(p), cudaSuccess,
                   [&] { return real(p, rest...); });
}

} // namespace

// Built with hidden visibility: these alone are exported.
#define COHORT_SHIM_EXPORT __attribute__((visibility("default")))

extern "C" {

// -- Exported: the driver API ------------------------------------------------

COHORT_SHIM_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t n) {
  static real_fn<mem_alloc_t> real_of{"cuMemAlloc_v2"};
  auto real = real_of.get();
  return do_mem_alloc(real, p, n);
}

COHORT_SHIM_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr* p, size_t* pitch,
                                               size_t w, size_t h,
                                               unsigned int element) {
  static real_fn<mem_alloc_pitch_t> real_of{"cuMemAllocPitch_v2"};
  auto real = real_of.get();
  return do_mem_alloc_pitch(real, p, pitch, w, h, element);
}

COHORT_SHIM_EXPORT CUresult cuMemAllocManaged(CUdeviceptr* p, size_t n,
                                              unsigned int flags) {
  static real_fn<mem_alloc_managed_t> real_of{"cuMemAllocManaged"};
  auto real = real_of.get();
  return do_mem_alloc(real, p, n, flags);
}

COHORT_SHIM_EXPORT CUresult cuMemFree_v2(CUdeviceptr p) {
  static real_fn<mem_free_t> real_of{"cuMemFree_v2"};
  auto real = real_of.get();
  return do_mem_free(real, p);
}

COHORT_SHIM_EXPORT CUresult cuMemAllocAsync(CUdeviceptr* p, size_t n,
                                            stream_t s) {
  static real_fn<mem_alloc_async_t> real_of{"cuMemAllocAsync"};
  auto real = real_of.get();
  return do_mem_alloc(real, p, n, s);
}

COHORT_SHIM_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr* p, size_t n,
                                                    pool_t pool, stream_t s) {
  static real_fn<mem_alloc_pool_t> real_of{"cuMemAllocFromPoolAsync"};
  auto real = real_of.get();
  return do_mem_alloc(real, p, n, pool, s);
}

COHORT_SHIM_EXPORT CUresult cuMemFreeAsync(CUdeviceptr p, stream_t s) {
  static real_fn<mem_free_async_t> real_of{"cuMemFreeAsync"};
  auto real = real_of.get();
  return do_mem_free(real, p, s);
}

COHORT_SHIM_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle* h,
                                        size_t n, const void* prop,
                                        unsigned long long flags) {
  static real_fn<mem_create_t> real_of{"cuMemCreate"};
  auto real = real_of.get();
  return do_mem_create(real, h, n, prop, flags);
}

COHORT_SHIM_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle h) {
  static real_fn<mem_release_t> real_of{"cuMemRelease"};
  auto real = real_of.get();
  return do_mem_release(real, h);
}

COHORT_SHIM_EXPORT CUresult cuMemMap(CUdeviceptr va, size_t size, size_t offset,
                                     CUmemGenericAllocationHandle h,
                                     unsigned long long flags) {
  static real_fn<mem_map_t> real_of{"cuMemMap"};
  return do_mem_map(real_of.get(), va, size, offset, h, flags);
}

COHORT_SHIM_EXPORT CUresult cuMemUnmap(CUdeviceptr va, size_t size) {
  static real_fn<mem_unmap_t> real_of{"cuMemUnmap"};
  return do_mem_unmap(real_of.get(), va, size);
}

COHORT_SHIM_EXPORT CUresult
cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* h, void* addr) {
  static real_fn<mem_retain_t> real_of{"cuMemRetainAllocationHandle"};
  return do_mem_retain(real_of.get(), h, addr);
}

COHORT_SHIM_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn,
                                             int version,
                                             unsigned long long flags) {
  static real_fn<proc_address_t> real_of{"cuGetProcAddress"};
  auto real = real_of.get();
  return do_proc_address(real, symbol, pfn, version, flags);
}

COHORT_SHIM_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn,
                                                int version,
                                                unsigned long long flags,
                                                void* status) {
  static real_fn<proc_address_v2_t> real_of{"cuGetProcAddress_v2"};
  auto real = real_of.get();
  return do_proc_address_v2(real, symbol, pfn, version, flags, status);
}

// -- Exported: the runtime API -----------------------------------------------
// Charged here, once: the driver calls the runtime makes inside are not.

COHORT_SHIM_EXPORT cudaError_t cudaMalloc(void** p, size_t n) {
  static real_fn<cuda_malloc_t> real_of{"cudaMalloc"};
  return runtime_alloc(real_of.get(), p, n);
}

COHORT_SHIM_EXPORT cudaError_t cudaMallocManaged(void** p, size_t n,
                                                 unsigned int flags) {
  static real_fn<cuda_malloc_managed_t> real_of{"cudaMallocManaged"};
  return runtime_alloc(real_of.get(), p, n, flags);
}

COHORT_SHIM_EXPORT cudaError_t cudaMallocPitch(void** p, size_t* pitch,
                                               size_t w, size_t h) {
  static real_fn<cuda_malloc_pitch_t> real_of{"cudaMallocPitch"};
  auto real = real_of.get();
  if (real == nullptr)
    return cudaErrorInitializationError;
  runtime_call inside;
  return charged_pitch(
      w, h, pitch, cudaSuccess, cudaErrorMemoryAllocation,
      [&](uint64_t key) {
        auto free = reinterpret_cast<cuda_free_t>(
            sibling(reinterpret_cast<void*>(real), "cudaFree"));
        return free != nullptr && free(reinterpret_cast<void*>(key)) == 0;
      },
      [&](uint64_t& key) {
        auto rc = real(p, pitch, w, h);
        key = p != nullptr ? key_of(*p) : 0;
        return rc;
      });
}

COHORT_SHIM_EXPORT cudaError_t cudaMallocAsync(void** p, size_t n, stream_t s) {
  static real_fn<cuda_malloc_async_t> real_of{"cudaMallocAsync"};
  return runtime_alloc(real_of.get(), p, n, s);
}

COHORT_SHIM_EXPORT cudaError_t cudaMallocFromPoolAsync(void** p, size_t n,
                                                       pool_t pool,
                                                       stream_t s) {
  static real_fn<cuda_malloc_pool_t> real_of{"cudaMallocFromPoolAsync"};
  return runtime_alloc(real_of.get(), p, n, pool, s);
}

COHORT_SHIM_EXPORT cudaError_t cudaFree(void* p) {
  static real_fn<cuda_free_t> real_of{"cudaFree"};
  return runtime_free(real_of.get(), p);
}

COHORT_SHIM_EXPORT cudaError_t cudaFreeAsync(void* p, stream_t s) {
  static real_fn<cuda_free_async_t> real_of{"cudaFreeAsync"};
  return runtime_free(real_of.get(), p, s);
}

// -- Exported: dlsym ---------------------------------------------------------
// A program or runtime that loads libcuda itself finds the driver's entry
// points here: the wrapped ones come back as trampolines.

COHORT_SHIM_EXPORT void* dlsym(void* handle, const char* symbol) {
  auto* lookup = real_dlsym();
  if (lookup == nullptr)
    return nullptr;
  void* p = handle == RTLD_NEXT
                ? next_after(__builtin_return_address(0), symbol)
                : lookup(handle, symbol);
  return answer(symbol, false, 0, p);
}

} // extern "C"
