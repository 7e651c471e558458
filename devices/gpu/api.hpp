// The GPU runtime calls the host-side GPU device makes, without any vendor
// header: CUDA (devices/cuda) and HIP (devices/hip) implement it over their
// runtimes, and tests implement it over host memory to drive the host logic
// (error mapping, stream bookkeeping, the completion path) without hardware.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/gpu/launch.hpp"

namespace cohort::devices::gpu {

/// What a runtime call returned, sorted into what the host logic acts on.
enum class status : uint8_t {
  ok,
  /// The driver refused an allocation; other work on the device is fine.
  out_of_memory,
  /// A call's arguments were wrong (a bug on our side, or a kernel limit).
  invalid_value,
  /// No such device, or no device at all.
  no_device,
  /// The driver is missing or older than the runtime.
  driver_missing,
  /// Sticky: a kernel failed (trap, timeout by the driver); the context is
  /// lost for the rest of the process.
  launch_failure,
  /// Sticky: a kernel touched an illegal address.
  illegal_address,
  /// Sticky: uncorrectable ECC error.
  ecc_uncorrectable,
  /// Sticky: the device stopped (hardware stop, fell off the bus).
  hardware_stop,
  /// Anything else.
  other,
};

/// Returns "ok", "out_of_memory", ...
const char* to_string(status x);

/// True for the errors after which the device context is unusable until
/// the process (or, with a new context, the device) is reset.
bool is_sticky(status x);

/// One call's outcome: the sorted status and the vendor's own code.
struct result {
  status code = status::ok;
  /// The vendor error code (cudaError_t, hipError_t; 0 for success).
  int raw = 0;

  bool failed() const { return code != status::ok; }
};

/// Static facts of one GPU.
struct properties {
  std::string name;
  int cc_major = 0;
  int cc_minor = 0;
  uint64_t memory_bytes = 0;
  int multiprocessors = 0;
  /// "0000:3b:00.0" (as the vendor prints it).
  std::string pci_bus_id;
  /// "GPU-xxxxxxxx-...." for CUDA; the HIP UUID where the runtime has one.
  std::string uuid;
  /// Architecture name where the vendor has one ("gfx90a"); empty for CUDA.
  std::string arch;
};

using stream_t = void*;
using event_t = void*;
/// A loaded code module (CUmodule, hipModule_t) and one of its functions.
using module_t = void*;
using function_t = void*;

/// Called by the runtime (from one of its threads) once everything enqueued
/// on a stream before it has finished.
using host_fn = void (*)(void* user);

/// The runtime calls of one vendor. Every call but `device_count` and
/// `describe` acts on the device made current with `set_device` on the
/// calling thread.
class api {
public:
  virtual ~api() = default;

  /// "CUDA", "HIP", or a fake's name.
  virtual const char* vendor() const = 0;

  /// The vendor's name and text for `raw` ("cudaErrorIllegalAddress: an
  /// illegal memory access was encountered").
  virtual std::string describe(int raw) const = 0;

  virtual result device_count(int& n) = 0;
  virtual result get_properties(int dev, properties& out) = 0;
  virtual result set_device(int dev) = 0;

  virtual result stream_create(stream_t& s) = 0;
  virtual result stream_destroy(stream_t s) = 0;
  /// Blocks until the stream is idle (used only on shutdown and in tests).
  virtual result stream_synchronize(stream_t s) = 0;
  /// Polls the stream without blocking: ok while it works or idles, the
  /// device's error once it has failed (a fault a kernel hit).
  virtual result stream_query(stream_t s) = 0;

  virtual result malloc_device(void*& p, size_t bytes) = 0;
  virtual result free_device(void* p) = 0;
  /// Page-locks host memory the caller allocated (NUMA-local staging).
  virtual result host_register(void* p, size_t bytes) = 0;
  virtual result host_unregister(void* p) = 0;

  virtual result copy_to_device(void* dst, const void* src, size_t bytes,
                                stream_t s) = 0;
  virtual result copy_to_host(void* dst, const void* src, size_t bytes,
                              stream_t s) = 0;
  /// Fills device memory with zero bytes, ordered on `s`.
  virtual result zero_device(void* p, size_t bytes, stream_t s) = 0;

  /// `timing`: the event can time work (event_elapsed_ns); fences are
  /// cheaper without.
  virtual result event_create(event_t& e, bool timing) = 0;
  virtual result event_destroy(event_t e) = 0;
  virtual result event_record(event_t e, stream_t s) = 0;
  /// Polls `e` without blocking: `done` once the work enqueued before its
  /// record has finished; the device's error if that work failed.
  virtual result event_query(event_t e, bool& done) = 0;
  /// Makes work enqueued on `s` from now on wait, on the device, until the
  /// work before `e`'s record has finished. The host does not wait.
  virtual result stream_wait_event(stream_t s, event_t e) = 0;
  /// Device time between two recorded, completed events.
  virtual result event_elapsed_ns(event_t start, event_t stop, int64_t& ns) = 0;

  /// Device scratch a launch of `a` needs.
  virtual result scratch_bytes(const kernels::gpu::launch_args& a,
                               size_t& bytes) = 0;
  /// Enqueues the kernel of `a` on stream `s` (index `stream` of the device).
  virtual result launch(const kernels::gpu::launch_args& a, stream_t s) = 0;

  /// Loads a module image into the current device's context: CUDA PTX
  /// (compiled by the driver's JIT), cubin or fatbin; a HIP code object.
  /// On failure `log` holds what the loader or JIT said, when it said
  /// anything.
  virtual result module_load(const void* image, size_t bytes, module_t& m,
                             std::string& log) = 0;
  /// The entry point `name` of a loaded module.
  virtual result module_function(module_t m, const char* name,
                                 function_t& f) = 0;
  virtual result module_unload(module_t m) = 0;
  /// Enqueues `f` on `s` over `grid` blocks of `block` threads, with one
  /// argument: the `bytes` at `args` (a struct passed by value).
  virtual result launch_function(function_t f, uint32_t grid, uint32_t block,
                                 const void* args, size_t bytes,
                                 stream_t s) = 0;

  /// Enqueues `fn(user)` on `s`: it runs once earlier work there is done.
  /// `fn` must not call the runtime.
  virtual result on_stream_done(stream_t s, host_fn fn, void* user) = 0;

  /// The first asynchronous error of the device since the last call, if any
  /// (sticky errors are returned again and again).
  virtual result last_error() = 0;

  /// Destroys the device's context and everything in it.
  virtual result device_reset() = 0;

  /// Interprocess sharing (docs/objects.md): the IPC handle of the
  /// allocation that starts at `base` (made by malloc_device), which
  /// another process opens. Runtimes without it answer invalid_value.
  virtual result ipc_get_handle(void* base, std::array<uint8_t, 64>& out) {
    (void)base;
    (void)out;
    return {status::invalid_value, 0};
  }
  /// In a consumer process: maps the allocation of `handle` on the current
  /// device, and unmaps it.
  virtual result ipc_open_handle(const std::array<uint8_t, 64>& handle,
                                 void*& base) {
    (void)handle;
    (void)base;
    return {status::invalid_value, 0};
  }
  virtual result ipc_close_handle(void* base) {
    (void)base;
    return {status::invalid_value, 0};
  }
};

} // namespace cohort::devices::gpu
