// The interface of every device-memory resource and adaptor, in the manner of
// RMM's device_memory_resource: a public non-virtual allocate / deallocate
// forwarding to private virtuals. Every call is ordered on one stream of the
// device and names the owner of the memory, so that resources can reuse
// memory in stream order, enforce per-tenant limits and report leaks.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include <caf/error.hpp>
#include <caf/expected.hpp>

namespace cohort::devices::memory {

/// Alignment of every block a resource hands out (what GPU kernels and
/// vectorized copies want).
inline constexpr size_t block_alignment = 256;

/// A stream of the device, by index. Work ordered on one stream runs in
/// order; memory freed on a stream may be reused at once by later work on the
/// same stream, and by other streams only after a fence.
struct stream_ref {
  uint32_t index = 0;

  friend bool operator==(stream_ref, stream_ref) = default;
};

/// Who holds an allocation: shown in leak reports, used by per-tenant limits.
struct owner_tag {
  std::string tenant;
  /// The work item's id (0 for memory that belongs to no item).
  uint64_t work_id = 0;
  /// What the memory is for: a kernel name from the catalog, or a label.
  std::string what;
};

/// Hands out and takes back device memory. Not thread-safe unless a
/// resource says otherwise: one device actor owns a device's resources.
/// Where another process can map memory a resource handed out
/// (docs/objects.md, "Sharing across processes"): the region holding it
/// and its offset there.
struct shared_region {
  enum class kind : uint8_t {
    /// A memfd (a simulated GPU's slab): `fd` is a descriptor the caller
    /// owns and closes.
    memfd,
    /// A CUDA or HIP IPC handle of the allocation holding it (`ipc`).
    cuda_ipc,
    hip_ipc,
  };
  kind how = kind::memfd;
  int fd = -1;
  std::array<uint8_t, 64> ipc{};
  /// Of the pointer from the start of the region, and the region's size.
  uint64_t offset = 0;
  uint64_t region_bytes = 0;
};

class memory_resource {
public:
  virtual ~memory_resource() = default;

  /// At least `bytes` (> 0) of device memory for `owner`, aligned to
  /// `block_alignment`, usable by work ordered on `stream`. Errors:
  /// invalid_arguments for 0 bytes; out_of_memory when the device cannot hold
  /// it (hard OOM); memory_limit or over_memory_quota when a configured limit
  /// refuses it (soft OOM); device_lost.
  caf::expected<void*> allocate(size_t bytes, stream_ref stream,
                                const owner_tag& owner) {
    return do_allocate(bytes, stream, owner);
  }

  /// Takes back `p`, which `allocate` of this resource returned for `bytes`.
  /// The memory may be reused by work ordered after everything enqueued on
  /// `stream` so far. Errors: invalid_free for a pointer this resource did not
  /// hand out, already took back, or handed out with another size; nothing
  /// changes then.
  caf::error deallocate(void* p, size_t bytes, stream_ref stream) {
    return do_deallocate(p, bytes, stream);
  }

  /// The device's memory went away with a reset (a destroyed context took
  /// it): forgets everything handed out, without returning it.
  void forget_all() { do_forget_all(); }

  /// True when what this resource hands out is the process's own host
  /// memory (a simulated GPU's slabs), which AddressSanitizer can watch.
  bool host_memory() const { return do_host_memory(); }

  /// How another process maps the memory at `p` (inside a block this
  /// resource handed out). Errors: invalid_arguments for a pointer it did
  /// not hand out or a resource whose memory cannot be shared.
  caf::expected<shared_region> share(const void* p) { return do_share(p); }

private:
  virtual caf::expected<void*> do_allocate(size_t bytes, stream_ref stream,
                                           const owner_tag& owner) = 0;
  virtual caf::error do_deallocate(void* p, size_t bytes,
                                   stream_ref stream) = 0;
  /// Resources that keep no record of what they handed out do nothing.
  virtual void do_forget_all() {}
  /// Device memory, or address space only, unless a resource says otherwise.
  virtual bool do_host_memory() const { return false; }
  virtual caf::expected<shared_region> do_share(const void* p);
};

/// Rounds `x` up to a multiple of `a` (a power of two), saturating instead
/// of wrapping for sizes near the top of the range.
constexpr uint64_t align_up(uint64_t x, uint64_t a) {
  return x > UINT64_MAX - (a - 1) ? UINT64_MAX & ~(a - 1)
                                  : (x + a - 1) & ~(a - 1);
}

} // namespace cohort::devices::memory
