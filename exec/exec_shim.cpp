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
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

#include "exec/exec_wire.hpp"

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
    for (auto* version : {"GLIBC_2.34", "GLIBC_2.2.5"})
      if (auto* p = dlvsym(RTLD_NEXT, "dlsym", version))
        return reinterpret_cast<dlsym_fn>(p);
    return dlsym_fn{nullptr};
  }();
  return fn;
}

// What dlsym(RTLD_NEXT, `name`) answers the object at `caller`: the first
// definition in an object loaded after it. (Forwarding RTLD_NEXT to glibc
// from here would search after this library instead.)
void* next_after(const void* caller, const char* name) {
  Dl_info info;
  link_map* self = nullptr;
  auto* lookup = real_dlsym();
  if (lookup == nullptr ||
      dladdr1(caller, &info, reinterpret_cast<void**>(&self),
              RTLD_DL_LINKMAP) == 0 ||
      self == nullptr)
    return nullptr;
  for (auto* lm = self->l_next; lm != nullptr; lm = lm->l_next) {
    if (lm->l_name == nullptr || *lm->l_name == '\0')
      continue;
    void* h = dlopen(lm->l_name, RTLD_LAZY | RTLD_NOLOAD);
    if (h == nullptr)
      continue;
    void* p = lookup(h, name);
    dlclose(h);
    link_map* owner = nullptr;
    if (p != nullptr &&
        dladdr1(p, &info, reinterpret_cast<void**>(&owner), RTLD_DL_LINKMAP) !=
            0 &&
        owner == lm)
      return p;
  }
  return nullptr;
}

template <class F> F next(const char* name) {
  auto* lookup = real_dlsym();
  return lookup ? reinterpret_cast<F>(lookup(RTLD_NEXT, name)) : nullptr;
}

// Inside a runtime API call: its driver calls are not charged again.
thread_local int runtime_depth = 0;

struct runtime_call {
  runtime_call() { ++runtime_depth; }
  ~runtime_call() { --runtime_depth; }
  runtime_call(const runtime_call&) = delete;
  runtime_call& operator=(const runtime_call&) = delete;
};

// -- The credit book ---------------------------------------------------------

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

  void remember(bool handle, uint64_t key, uint64_t n) {
    std::lock_guard<std::mutex> guard{mtx_};
    (handle ? handles_ : ptrs_)[key] = n;
  }

  /// The size of allocation `key`, forgotten; 0 when it was not made here.
  uint64_t forget(bool handle, uint64_t key) {
    std::lock_guard<std::mutex> guard{mtx_};
    auto& map = handle ? handles_ : ptrs_;
    auto i = map.find(key);
    if (i == map.end())
      return 0;
    auto n = i->second;
    map.erase(i);
    return n;
  }

private:
  /// Joins the session once per process; false when it cannot be reached.
  bool connect_locked();
  bool round_trip_locked(exec::wire_op op, uint64_t bytes,
                         exec::wire_reply& reply);
  void close_locked(const std::string& why);
  void warn_locked(const std::string& what);

  std::mutex mtx_;
  int fd_ = -1;
  pid_t pid_ = 0;
  /// Set when the session cannot be reached: no new credit, ever.
  bool closed_ = false;
  bool warned_ = false;
  uint64_t credit_ = 0;
  uint64_t chunk_ = 0;
  uint64_t limit_ = 0;
  std::unordered_map<uint64_t, uint64_t> ptrs_;
  std::unordered_map<uint64_t, uint64_t> handles_;
};

credit_book& book() {
  static auto* b = new credit_book;
  return *b;
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

bool credit_book::round_trip_locked(exec::wire_op op, uint64_t bytes,
                                    exec::wire_reply& reply) {
  exec::wire_request req;
  req.op = static_cast<uint16_t>(op);
  req.bytes = bytes;
  ssize_t n;
  do
    n = ::send(fd_, &req, sizeof req, MSG_NOSIGNAL);
  while (n < 0 && errno == EINTR);
  if (n != ssize_t(sizeof req)) {
    close_locked("the node's session socket broke");
    return false;
  }
  do
    n = ::recv(fd_, &reply, sizeof reply, 0);
  while (n < 0 && errno == EINTR);
  if (n != ssize_t(sizeof reply) || reply.magic != exec::wire_magic ||
      reply.version != exec::wire_version) {
    close_locked(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)
                     ? "the node did not answer within 10 s"
                     : "the node's session socket broke");
    return false;
  }
  return true;
}

bool credit_book::connect_locked() {
  if (pid_ == ::getpid())
    return fd_ >= 0;
  // First use, or a child after fork: the parent's connection and
  // allocations are not this process's.
  if (fd_ >= 0)
    ::close(fd_);
  fd_ = -1;
  pid_ = ::getpid();
  closed_ = false;
  credit_ = 0;
  ptrs_.clear();
  handles_.clear();
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
  if (::send(fd_, &hello, sizeof hello, MSG_NOSIGNAL) != sizeof hello ||
      ::recv(fd_, &reply, sizeof reply, 0) != sizeof reply ||
      reply.magic != exec::wire_magic) {
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
  limit_ = reply.limit;
  return true;
}

bool credit_book::charge(uint64_t n) {
  if (n == 0)
    return true;
  std::lock_guard<std::mutex> guard{mtx_};
  connect_locked();
  if (credit_ >= n) {
    credit_ -= n;
    return true;
  }
  if (closed_ || fd_ < 0) {
    warn_locked("an allocation of " + std::to_string(n) +
                " bytes was refused: the session cannot be reached");
    return false;
  }
  auto need = n - credit_;
  // A chunk when it fits, else exactly what is missing.
  for (auto ask : {std::max(need, chunk_), need}) {
    exec::wire_reply reply;
    if (!round_trip_locked(exec::wire_op::lease, ask, reply))
      return false;
    if (reply.status == uint16_t(exec::wire_status::ok)) {
      credit_ += ask;
      credit_ -= n;
      return true;
    }
    if (ask == need) {
      warn_locked("an allocation of " + std::to_string(n) +
                  " bytes was refused (" +
                  exec::to_string(exec::wire_status{reply.status}) +
                  "): " + exec::text_of(reply.text));
      return false;
    }
  }
  return false;
}

void credit_book::refund(uint64_t n) {
  if (n == 0)
    return;
  std::lock_guard<std::mutex> guard{mtx_};
  if (pid_ != ::getpid())
    return; // the parent's, before fork
  credit_ += n;
  if (fd_ < 0 || closed_ || credit_ <= 2 * chunk_)
    return;
  auto surplus = credit_ - chunk_;
  exec::wire_reply reply;
  if (round_trip_locked(exec::wire_op::give_back, surplus, reply) &&
      reply.status == uint16_t(exec::wire_status::ok))
    credit_ -= surplus;
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

// Frees `key` with `call`; its credit returns once the free succeeded.
template <class R, class Call>
R uncharged(bool handle, uint64_t key, R ok, Call&& call) {
  auto rc = call();
  if (rc == ok)
    book().refund(book().forget(handle, key));
  return rc;
}

// A pitched allocation: `w * h` bytes charged first, what the pitch adds
// after the call (freed again when that is refused).
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
    free(key);
    book().refund(n);
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
using proc_address_t = CUresult (*)(const char*, void**, int,
                                    unsigned long long);
using proc_address_v2_t = CUresult (*)(const char*, void**, int,
                                       unsigned long long, void*);

// With `real` null the call cannot be made: an unknown entry point.
CUresult do_mem_alloc(mem_alloc_t real, CUdeviceptr* p, size_t n) {
  if (real == nullptr)
    return CUDA_ERROR_NOT_FOUND;
  if (runtime_depth > 0)
    return real(p, n);
  return charged(n, CUDA_SUCCESS, CUDA_ERROR_OUT_OF_MEMORY, false,
                 [&](uint64_t& key) {
                   auto rc = real(p, n);
                   key = p != nullptr ? *p : 0;
                   return rc;
                 });
}

CUresult do_mem_free(mem_free_t real, CUdeviceptr p) {
  if (real == nullptr)
    return CUDA_ERROR_NOT_FOUND;
  if (runtime_depth > 0)
    return real(p);
  return uncharged(false, p, CUDA_SUCCESS, [&] { return real(p); });
}

CUresult do_mem_alloc_pitch(mem_alloc_pitch_t real, CUdeviceptr* p,
                            size_t* pitch, size_t w, size_t h,
                            unsigned int element) {
  if (real == nullptr)
    return CUDA_ERROR_NOT_FOUND;
  if (runtime_depth > 0)
    return real(p, pitch, w, h, element);
  static auto free = next<mem_free_t>("cuMemFree_v2");
  return charged_pitch(
      w, h, pitch, CUDA_SUCCESS, CUDA_ERROR_OUT_OF_MEMORY,
      [&](uint64_t key) {
        if (free != nullptr)
          free(key);
      },
      [&](uint64_t& key) {
        auto rc = real(p, pitch, w, h, element);
        key = p != nullptr ? *p : 0;
        return rc;
      });
}

CUresult do_mem_alloc_managed(mem_alloc_managed_t real, CUdeviceptr* p,
                              size_t n, unsigned int flags) {
  if (real == nullptr)
    return CUDA_ERROR_NOT_FOUND;
  if (runtime_depth > 0)
    return real(p, n, flags);
  return charged(n, CUDA_SUCCESS, CUDA_ERROR_OUT_OF_MEMORY, false,
                 [&](uint64_t& key) {
                   auto rc = real(p, n, flags);
                   key = p != nullptr ? *p : 0;
                   return rc;
                 });
}

CUresult do_mem_alloc_async(mem_alloc_async_t real, CUdeviceptr* p, size_t n,
                            stream_t s) {
  if (real == nullptr)
    return CUDA_ERROR_NOT_FOUND;
  if (runtime_depth > 0)
    return real(p, n, s);
  return charged(n, CUDA_SUCCESS, CUDA_ERROR_OUT_OF_MEMORY, false,
                 [&](uint64_t& key) {
                   auto rc = real(p, n, s);
                   key = p != nullptr ? *p : 0;
                   return rc;
                 });
}

CUresult do_mem_alloc_pool(mem_alloc_pool_t real, CUdeviceptr* p, size_t n,
                           pool_t pool, stream_t s) {
  if (real == nullptr)
    return CUDA_ERROR_NOT_FOUND;
  if (runtime_depth > 0)
    return real(p, n, pool, s);
  return charged(n, CUDA_SUCCESS, CUDA_ERROR_OUT_OF_MEMORY, false,
                 [&](uint64_t& key) {
                   auto rc = real(p, n, pool, s);
                   key = p != nullptr ? *p : 0;
                   return rc;
                 });
}

CUresult do_mem_free_async(mem_free_async_t real, CUdeviceptr p, stream_t s) {
  if (real == nullptr)
    return CUDA_ERROR_NOT_FOUND;
  if (runtime_depth > 0)
    return real(p, s);
  return uncharged(false, p, CUDA_SUCCESS, [&] { return real(p, s); });
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

CUresult do_mem_release(mem_release_t real, CUmemGenericAllocationHandle h) {
  if (real == nullptr)
    return CUDA_ERROR_NOT_FOUND;
  if (runtime_depth > 0)
    return real(h);
  return uncharged(true, h, CUDA_SUCCESS, [&] { return real(h); });
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
using proc_sig = CUresult(const char*, void**, int, unsigned long long);
using proc_v2_sig = CUresult(const char*, void**, int, unsigned long long,
                             void*);

// The 64-bit size_t entry points came with CUDA 3.2 (version 3020);
// cuGetProcAddress_v2 with 12.5.
const wrapped_entry wrapped[] = {
    entry<&do_mem_alloc, alloc_sig>("cuMemAlloc_v2", "cuMemAlloc", 3020,
                                    &cuMemAlloc_v2),
    entry<&do_mem_alloc_pitch, pitch_sig>(
        "cuMemAllocPitch_v2", "cuMemAllocPitch", 3020, &cuMemAllocPitch_v2),
    entry<&do_mem_alloc_managed, managed_sig>(
        "cuMemAllocManaged", "cuMemAllocManaged", 0, &cuMemAllocManaged),
    entry<&do_mem_free, free_sig>("cuMemFree_v2", "cuMemFree", 3020,
                                  &cuMemFree_v2),
    entry<&do_mem_alloc_async, async_sig>("cuMemAllocAsync", "cuMemAllocAsync",
                                          0, &cuMemAllocAsync),
    entry<&do_mem_alloc_async, async_sig>("cuMemAllocAsync_ptsz", "", 0),
    entry<&do_mem_alloc_pool, pool_sig>("cuMemAllocFromPoolAsync",
                                        "cuMemAllocFromPoolAsync", 0,
                                        &cuMemAllocFromPoolAsync),
    entry<&do_mem_alloc_pool, pool_sig>("cuMemAllocFromPoolAsync_ptsz", "", 0),
    entry<&do_mem_free_async, free_async_sig>(
        "cuMemFreeAsync", "cuMemFreeAsync", 0, &cuMemFreeAsync),
    entry<&do_mem_free_async, free_async_sig>("cuMemFreeAsync_ptsz", "", 0),
    entry<&do_mem_create, create_sig>("cuMemCreate", "cuMemCreate", 0,
                                      &cuMemCreate),
    entry<&do_mem_release, release_sig>("cuMemRelease", "cuMemRelease", 0,
                                        &cuMemRelease),
    entry<&do_proc_address, proc_sig>("cuGetProcAddress", "", 0,
                                      &cuGetProcAddress),
    entry<&do_proc_address_v2, proc_v2_sig>("cuGetProcAddress_v2", "", 0,
                                            &cuGetProcAddress_v2),
};

// What cuGetProcAddress answers for "cuGetProcAddress" from 12.5 on.
constexpr int proc_address_v2_since = 12050;

// The entry that `p`, found for `symbol`, is to be answered with: `p`
// itself when it is not wrapped (or is one of this library's own); null
// when a wrapped one cannot be (every trampoline taken: fail closed).
void* answer(const char* symbol, bool base, int version, void* p) {
  if (p == nullptr || symbol == nullptr)
    return p;
  const wrapped_entry* hit = nullptr;
  for (auto& e : wrapped) {
    if (e.owns(p) || e.self == p)
      return p;
    if (base ? (*e.base != '\0' && std::strcmp(symbol, e.base) == 0 &&
                version >= e.since)
             : std::strcmp(symbol, e.symbol) == 0)
      hit = &e;
  }
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

} // namespace

// Built with hidden visibility: these alone are exported.
#define COHORT_SHIM_EXPORT __attribute__((visibility("default")))

extern "C" {

// -- Exported: the driver API ------------------------------------------------

COHORT_SHIM_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t n) {
  static auto real = next<mem_alloc_t>("cuMemAlloc_v2");
  return do_mem_alloc(real, p, n);
}

COHORT_SHIM_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr* p, size_t* pitch,
                                               size_t w, size_t h,
                                               unsigned int element) {
  static auto real = next<mem_alloc_pitch_t>("cuMemAllocPitch_v2");
  return do_mem_alloc_pitch(real, p, pitch, w, h, element);
}

COHORT_SHIM_EXPORT CUresult cuMemAllocManaged(CUdeviceptr* p, size_t n,
                                              unsigned int flags) {
  static auto real = next<mem_alloc_managed_t>("cuMemAllocManaged");
  return do_mem_alloc_managed(real, p, n, flags);
}

COHORT_SHIM_EXPORT CUresult cuMemFree_v2(CUdeviceptr p) {
  static auto real = next<mem_free_t>("cuMemFree_v2");
  return do_mem_free(real, p);
}

COHORT_SHIM_EXPORT CUresult cuMemAllocAsync(CUdeviceptr* p, size_t n,
                                            stream_t s) {
  static auto real = next<mem_alloc_async_t>("cuMemAllocAsync");
  return do_mem_alloc_async(real, p, n, s);
}

COHORT_SHIM_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr* p, size_t n,
                                                    pool_t pool, stream_t s) {
  static auto real = next<mem_alloc_pool_t>("cuMemAllocFromPoolAsync");
  return do_mem_alloc_pool(real, p, n, pool, s);
}

COHORT_SHIM_EXPORT CUresult cuMemFreeAsync(CUdeviceptr p, stream_t s) {
  static auto real = next<mem_free_async_t>("cuMemFreeAsync");
  return do_mem_free_async(real, p, s);
}

COHORT_SHIM_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle* h,
                                        size_t n, const void* prop,
                                        unsigned long long flags) {
  static auto real = next<mem_create_t>("cuMemCreate");
  return do_mem_create(real, h, n, prop, flags);
}

COHORT_SHIM_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle h) {
  static auto real = next<mem_release_t>("cuMemRelease");
  return do_mem_release(real, h);
}

COHORT_SHIM_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn,
                                             int version,
                                             unsigned long long flags) {
  static auto real = next<proc_address_t>("cuGetProcAddress");
  return do_proc_address(real, symbol, pfn, version, flags);
}

COHORT_SHIM_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn,
                                                int version,
                                                unsigned long long flags,
                                                void* status) {
  static auto real = next<proc_address_v2_t>("cuGetProcAddress_v2");
  return do_proc_address_v2(real, symbol, pfn, version, flags, status);
}

// -- Exported: the runtime API -----------------------------------------------
// Charged here, once: the driver calls the runtime makes inside are not.

COHORT_SHIM_EXPORT cudaError_t cudaMalloc(void** p, size_t n) {
  static auto real = next<cuda_malloc_t>("cudaMalloc");
  if (real == nullptr)
    return cudaErrorInitializationError;
  runtime_call inside;
  return charged(n, cudaSuccess, cudaErrorMemoryAllocation, false,
                 [&](uint64_t& key) {
                   auto rc = real(p, n);
                   key = p != nullptr ? key_of(*p) : 0;
                   return rc;
                 });
}

COHORT_SHIM_EXPORT cudaError_t cudaMallocManaged(void** p, size_t n,
                                                 unsigned int flags) {
  static auto real = next<cuda_malloc_managed_t>("cudaMallocManaged");
  if (real == nullptr)
    return cudaErrorInitializationError;
  runtime_call inside;
  return charged(n, cudaSuccess, cudaErrorMemoryAllocation, false,
                 [&](uint64_t& key) {
                   auto rc = real(p, n, flags);
                   key = p != nullptr ? key_of(*p) : 0;
                   return rc;
                 });
}

COHORT_SHIM_EXPORT cudaError_t cudaMallocPitch(void** p, size_t* pitch,
                                               size_t w, size_t h) {
  static auto real = next<cuda_malloc_pitch_t>("cudaMallocPitch");
  static auto free = next<cuda_free_t>("cudaFree");
  if (real == nullptr)
    return cudaErrorInitializationError;
  runtime_call inside;
  return charged_pitch(
      w, h, pitch, cudaSuccess, cudaErrorMemoryAllocation,
      [&](uint64_t key) {
        if (free != nullptr)
          free(reinterpret_cast<void*>(key));
      },
      [&](uint64_t& key) {
        auto rc = real(p, pitch, w, h);
        key = p != nullptr ? key_of(*p) : 0;
        return rc;
      });
}

COHORT_SHIM_EXPORT cudaError_t cudaMallocAsync(void** p, size_t n, stream_t s) {
  static auto real = next<cuda_malloc_async_t>("cudaMallocAsync");
  if (real == nullptr)
    return cudaErrorInitializationError;
  runtime_call inside;
  return charged(n, cudaSuccess, cudaErrorMemoryAllocation, false,
                 [&](uint64_t& key) {
                   auto rc = real(p, n, s);
                   key = p != nullptr ? key_of(*p) : 0;
                   return rc;
                 });
}

COHORT_SHIM_EXPORT cudaError_t cudaMallocFromPoolAsync(void** p, size_t n,
                                                       pool_t pool,
                                                       stream_t s) {
  static auto real = next<cuda_malloc_pool_t>("cudaMallocFromPoolAsync");
  if (real == nullptr)
    return cudaErrorInitializationError;
  runtime_call inside;
  return charged(n, cudaSuccess, cudaErrorMemoryAllocation, false,
                 [&](uint64_t& key) {
                   auto rc = real(p, n, pool, s);
                   key = p != nullptr ? key_of(*p) : 0;
                   return rc;
                 });
}

COHORT_SHIM_EXPORT cudaError_t cudaFree(void* p) {
  static auto real = next<cuda_free_t>("cudaFree");
  if (real == nullptr)
    return cudaErrorInitializationError;
  runtime_call inside;
  return uncharged(false, key_of(p), cudaSuccess, [&] { return real(p); });
}

COHORT_SHIM_EXPORT cudaError_t cudaFreeAsync(void* p, stream_t s) {
  static auto real = next<cuda_free_async_t>("cudaFreeAsync");
  if (real == nullptr)
    return cudaErrorInitializationError;
  runtime_call inside;
  return uncharged(false, key_of(p), cudaSuccess, [&] { return real(p, s); });
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
