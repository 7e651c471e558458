// Cohort's public C++ API: a runtime behind one handle, typed work, results
// and errors, futures and callbacks. Standard C++20 only: no CAF, protobuf,
// CUDA or internal headers. CAF users who want the typed actor interface use
// the runtime facade of the source tree, actors/runtime.hpp
// (docs/embedding.md, "The internal interface"); it is not installed.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "cohort/errc.hpp"

namespace cohort {

/// The library's version, "MAJOR.MINOR.PATCH".
const char* version();

// -- buffers ----------------------------------------------------------------

/// Element types of buffers.
enum class dtype : uint8_t { f32, f64, i32, i64, u8 };

/// Bytes per element.
size_t element_size(dtype t);

/// "f32", "f64", "i32", "i64" or "u8".
const char* to_string(dtype t);

/// The dtype of a C++ element type (float, double, int32_t, int64_t,
/// uint8_t); other types do not compile.
template <class T> struct dtype_of;
template <>
struct dtype_of<float> : std::integral_constant<dtype, dtype::f32> {};
template <>
struct dtype_of<double> : std::integral_constant<dtype, dtype::f64> {};
template <>
struct dtype_of<int32_t> : std::integral_constant<dtype, dtype::i32> {};
template <>
struct dtype_of<int64_t> : std::integral_constant<dtype, dtype::i64> {};
template <>
struct dtype_of<uint8_t> : std::integral_constant<dtype, dtype::u8> {};

/// What Cohort throws from calls that cannot return an error (`start`,
/// `future::get`, `buffer::view` of the wrong type): an errc and a message.
class error : public std::runtime_error {
public:
  error(errc code, const std::string& message)
      : std::runtime_error(message), code_(code) {
    // nop
  }

  errc code() const { return code_; }

private:
  errc code_;
};

namespace detail {
struct object_state;
struct object_access;
} // namespace detail

/// A handle of a device-resident object (docs/objects.md): an immutable
/// buffer a runtime keeps in a device's memory between items, owned by a
/// tenant and charged to its device-memory quota. Made by `runtime::put`
/// or by an item kept on a device (`work::keep_on_device`). Items read it
/// as an input (`buffer{ref}`); `runtime::get` copies it to the host.
/// Copies share one handle; the runtime frees the object once the last
/// copy is gone and no item that reads it is in flight. Thread-safe as a
/// shared_ptr is.
class object_ref {
public:
  object_ref() = default;

  bool valid() const { return state_ != nullptr; }
  explicit operator bool() const { return valid(); }

  /// Its id in the runtime that made it (0 for an empty handle).
  uint64_t id() const;
  /// Its tenant, element type and number of elements.
  const std::string& tenant() const;
  dtype type() const;
  size_t size() const;
  size_t bytes() const { return size() * element_size(type()); }

private:
  friend struct detail::object_access;
  std::shared_ptr<const detail::object_state> state_;
};

/// An immutable array of one element type, shared by reference count:
/// copies are cheap and never copy the elements. It either owns its
/// elements (made from a std::vector, moved in) or wraps the caller's
/// memory, kept alive by an owner the caller gives (a shared_ptr to
/// anything: the container, a NumPy array, a mapped file). CPU workers read
/// wrapped memory in place; a GPU copies it to the device.
class buffer {
public:
  /// An empty f32 buffer.
  buffer() = default;

  /// An input that reads object `obj` where it is (on its device); it has
  /// the object's type and size but no host elements (`view` throws), and
  /// holds the object while it lives. Throws cohort::error
  /// (invalid_arguments) for an empty handle.
  explicit buffer(const object_ref& obj);

  /// Owns `values` (moved, not copied).
  template <class T>
  explicit buffer(std::vector<T> values) : type_(dtype_of<T>::value) {
    auto held = std::make_shared<const std::vector<T>>(std::move(values));
    data_ = held->data();
    size_ = held->size();
    owner_ = std::move(held);
  }

  /// Copies `values`.
  template <class T> static buffer copy(std::span<const T> values) {
    return buffer{std::vector<T>(values.begin(), values.end())};
  }

  /// Wraps `count` elements at `data` without copying them. `keep_alive`
  /// is held by every copy of the buffer, so the elements live as long as
  /// Cohort may read them; pass null only when the caller keeps them alive
  /// and unchanged until every item using them has ended.
  template <class T>
  static buffer wrap(const T* data, size_t count,
                     std::shared_ptr<const void> keep_alive) {
    buffer b;
    b.type_ = dtype_of<T>::value;
    b.owner_ = std::move(keep_alive);
    b.data_ = data;
    b.size_ = data != nullptr ? count : 0;
    return b;
  }

  dtype type() const { return type_; }
  size_t size() const { return size_; }
  size_t bytes() const { return size_ * element_size(type_); }
  bool empty() const { return size_ == 0; }
  const void* data() const { return data_; }

  /// The id of the object it reads (buffer(object_ref)); 0 for host data.
  uint64_t object() const { return object_; }

  /// The elements as `T`; throws cohort::error (invalid_arguments) when
  /// the buffer holds another type or names an object.
  template <class T> std::span<const T> view() const {
    if (object_ != 0)
      throw error{errc::invalid_arguments,
                  "the buffer names object " + std::to_string(object_) +
                      ", whose elements are on a device: runtime::get "
                      "copies them to the host"};
    if (dtype_of<T>::value != type_)
      throw error{errc::invalid_arguments, std::string{"the buffer holds "} +
                                               to_string(type_) + ", not " +
                                               to_string(dtype_of<T>::value)};
    return {static_cast<const T*>(data_), size_};
  }

  /// A copy of the elements as a vector of `T` (same type rule as view).
  template <class T> std::vector<T> to_vector() const {
    auto v = view<T>();
    return {v.begin(), v.end()};
  }

  /// Whoever keeps the elements alive (null for an empty buffer, or a
  /// wrapped one without an owner).
  const std::shared_ptr<const void>& owner() const { return owner_; }

private:
  std::shared_ptr<const void> owner_;
  const void* data_ = nullptr;
  size_t size_ = 0;
  dtype type_ = dtype::f32;
  uint64_t object_ = 0;
};

// -- work -------------------------------------------------------------------

/// A kernel: one of the built-in catalog (the named values, docs/kernels.md;
/// their inputs and outputs are f32, topk_cosine's row indices i64), or one
/// registered at run time (`register_kernel`, `kernel_named`), whose value
/// holds in this process only.
enum class kernel : uint8_t {
  axpy = 1,
  dot = 2,
  nrm2 = 3,
  reduce_sum = 4,
  inclusive_scan = 5,
  gemv = 6,
  gemm = 7,
  topk_cosine = 8,
};

/// The kernel's name ("gemm", ...; "unknown" for a value no kernel has).
const char* to_string(kernel k);

/// The kernel named `name`, built in or registered, if there is one.
std::optional<kernel> kernel_named(std::string_view name);

/// Scalars and shapes; which fields a kernel reads is in docs/kernels.md.
struct kernel_args {
  float alpha = 1.0f;
  uint64_t m = 0;
  uint64_t n = 0;
  uint64_t k = 0;
  uint32_t top_k = 0;
};

/// One buffer a registered kernel takes or produces.
struct kernel_param {
  std::string name;
  dtype type = dtype::f32;
};

/// What a kernel takes and produces, as registered.
struct kernel_signature {
  std::vector<kernel_param> inputs;
  kernel_param output;
  /// The kernel_args fields it reads ("alpha", "m", ...).
  std::vector<std::string> scalars;
  /// "built-in", "application", "bundle NAME VERSION (key ID)".
  std::string origin;
};

/// The signature of `k`; empty for a value no kernel has.
std::optional<kernel_signature> signature_of(kernel k);

/// Where a registered kernel's CPU implementation writes its output: the
/// elements the output rule asked for, zeroed, of the declared type.
class output_span {
public:
  output_span(void* data, size_t size, dtype type)
      : data_(data), size_(size), type_(type) {
    // nop
  }

  dtype type() const { return type_; }
  size_t size() const { return size_; }

  /// The elements as `T`; throws cohort::error (invalid_arguments) when
  /// the output has another type.
  template <class T> std::span<T> as() const {
    if (dtype_of<T>::value != type_)
      throw error{errc::invalid_arguments, std::string{"the output holds "} +
                                               to_string(type_) + ", not " +
                                               to_string(dtype_of<T>::value)};
    return {static_cast<T*>(data_), size_};
  }

private:
  void* data_;
  size_t size_;
  dtype type_;
};

/// GPU code of a kernel for one backend (docs/kernels.md, "GPU code"): a
/// module image the driver loads (CUDA PTX, a cubin or a fatbin; a HIP code
/// object) and its entry point, `extern "C" __global__ void
/// NAME(cohort_gpu_call)` (<cohort/kernel_abi.h>), launched over `threads`
/// threads in blocks of `block`.
struct gpu_module {
  enum class format : uint8_t { none, ptx, cubin, fatbin, hip_code_object };
  format kind = format::none;
  /// The image (PTX may leave out its terminating NUL).
  std::vector<uint8_t> image;
  std::string function;
  /// Threads per block, 1 to 1024.
  uint32_t block = 256;
  /// Threads the launch needs; one per output element when empty.
  std::function<uint64_t(const kernel_args&, std::span<const uint64_t>)>
      threads;
};

/// A kernel an application brings (docs/kernels.md, "Your own kernels").
/// CPU workers, simulated GPUs and CPU fallback run `cpu`; a real GPU runs
/// only kernels with code for it, so an item of a kernel without GPU code
/// is never placed on one. An exception from any of its functions (`check`,
/// `output_size`, `flops`, `cpu`, `threads`) ends that item with
/// kernel_error naming the kernel, and nothing else.
struct kernel_definition {
  /// 1 to 64 characters of a-z, 0-9, '_' and '.', starting with a letter;
  /// unique in the process.
  std::string name;
  /// Input buffers, in order (1 to 8), and the output.
  std::vector<kernel_param> inputs;
  kernel_param output{"out", dtype::f32};
  /// The kernel_args fields it reads ("alpha", "m", "n", "k", "top_k").
  std::vector<std::string> scalars;
  /// Checks the inputs' element counts and the arguments (the count and
  /// types of the inputs are checked before): empty when valid, otherwise
  /// what is wrong (the item is refused with invalid_arguments). Optional.
  std::function<std::string(const kernel_args&, std::span<const uint64_t>)>
      check;
  /// Elements of the output, from the arguments and the inputs' element
  /// counts. Required.
  std::function<uint64_t(const kernel_args&, std::span<const uint64_t>)>
      output_size;
  /// Floating-point operations of a call, for placement; optional (the
  /// measured model learns the kernel's run time).
  std::function<double(const kernel_args&, std::span<const uint64_t>)> flops;
  /// The CPU implementation; required. Called from several threads at once.
  /// An exception it throws ends the item with kernel_error.
  std::function<void(const kernel_args&, std::span<const buffer> inputs,
                     output_span out)>
      cpu;
  /// GPU code; a real GPU of a backend without it never gets the kernel's
  /// items. Optional.
  gpu_module cuda;
  gpu_module hip;
};

/// Registers `def` with the process's kernel registry and returns its
/// handle (use it in `work::kernel`; `kernel_named` finds it too). Tenants
/// use it where their grant lists its name or "*". Throws cohort::error
/// (invalid_arguments) for a bad definition or a name already taken.
/// Thread-safe; registered kernels stay for the life of the process.
kernel register_kernel(kernel_definition def);

/// A kernel chained after an item's on the same device: the previous
/// output fills input `input_slot`, `inputs` are the others in order.
struct stage {
  cohort::kernel kernel = cohort::kernel::axpy;
  kernel_args args;
  std::vector<buffer> inputs;
  uint32_t input_slot = 0;
};

/// One unit of work.
struct work {
  /// The caller's name for it: results and errors carry it back, and
  /// `runtime::cancel(id)` finds it by it. Two items in flight may share
  /// one (cancel then reaches both).
  uint64_t id = 0;
  /// Who it runs as; tenants are granted in the config (default-deny).
  std::string tenant = "default";
  cohort::kernel kernel = cohort::kernel::axpy;
  kernel_args args;
  std::vector<buffer> inputs;
  /// Kernels run after this one on the same device; the result is the
  /// last one's output.
  std::vector<stage> then;
  /// Devices it needs at once (a gang gemm, split by rows): 0 or 1 for one.
  uint32_t gang = 0;
  /// Keep the output on the device that computes it, as a new object
  /// (result::object) that later items read without a copy; a CPU worker
  /// keeps it in host memory. Not for gangs.
  bool keep_on_device = false;
  /// Its priority within its tenant: a higher one goes ahead of the
  /// tenant's items of lower priority that still wait (held back, queued,
  /// or placed on a device and not sent to it yet); items of equal priority
  /// keep the order they were submitted in. It does not stop running items
  /// or take turns from other tenants (they share devices by their
  /// weights). Any int32; 0 by default. See docs/jobs.md.
  int32_t priority = 0;
};

/// An item's result.
struct result {
  uint64_t id = 0;
  /// The output (f32 for the built-in kernels; a registered kernel's
  /// output type otherwise).
  buffer values;
  /// topk_cosine's row indices (i64); empty for the other kernels.
  buffer indices;
  /// The device that produced it ("cpu0", "cuda0", "sim1", ...).
  std::string device;
  /// Placements it took (1 unless a device failed under it).
  uint32_t attempts = 0;
  /// True if it ended on a CPU worker after a GPU placement failed.
  bool fallback = false;
  /// The object its output became (work::keep_on_device; `values` is then
  /// empty); an empty handle otherwise.
  object_ref object;
};

/// An item's end: its result, or the error it ended with.
class outcome {
public:
  outcome(result r) : result_(std::move(r)) {
    // nop
  }

  outcome(errc code, std::string message)
      : code_(code), message_(std::move(message)) {
    // nop
  }

  bool ok() const { return code_ == errc::none; }
  explicit operator bool() const { return ok(); }

  /// errc::none when it has a result.
  errc code() const { return code_; }

  /// What went wrong, "name: detail" (empty when ok).
  const std::string& message() const { return message_; }

  /// The result; throws cohort::error when the item ended with an error.
  result& value() & {
    check();
    return result_;
  }
  const result& value() const& {
    check();
    return result_;
  }
  result&& value() && {
    check();
    return std::move(result_);
  }

  result* operator->() { return &value(); }
  const result* operator->() const { return &value(); }

private:
  void check() const {
    if (!ok())
      throw error{code_, message_};
  }

  result result_;
  errc code_ = errc::none;
  std::string message_;
};

namespace detail {
struct slot_access;
} // namespace detail

/// The end of one submitted item, delivered exactly once. Move-only; not
/// thread-safe (one thread uses a future at a time). Dropping it does not
/// cancel the item: it still ends, and its end is discarded.
class future {
public:
  future() = default;
  future(future&& other) noexcept;
  future& operator=(future&& other) noexcept;
  future(const future&) = delete;
  future& operator=(const future&) = delete;
  ~future();

  /// False for a default-constructed future and after get/wait.
  bool valid() const { return slot_ != nullptr; }

  /// The item's id.
  uint64_t id() const;

  /// True once the item has ended (get will not wait).
  bool ready() const;

  /// Waits at most `timeout`; true if the end is in.
  bool wait_for(std::chrono::nanoseconds timeout) const;

  /// Waits for the end and returns it; the future is then empty. On an
  /// empty future: an outcome with invalid_arguments.
  outcome wait();

  /// As wait(), but returns the result or throws cohort::error.
  result get() { return wait().value(); }

private:
  friend struct detail::slot_access;
  void* slot_ = nullptr;
};

/// The handle of one item submitted with a callback: runtime::cancel(ticket)
/// cancels that item and no other, even after it ended (then nothing
/// happens). Move-only; dropping it changes nothing for the item.
class ticket {
public:
  ticket() = default;
  ticket(ticket&& other) noexcept;
  ticket& operator=(ticket&& other) noexcept;
  ticket(const ticket&) = delete;
  ticket& operator=(const ticket&) = delete;
  ~ticket();

  /// False for a default-constructed ticket and for an item refused before
  /// it was sent (an input naming another runtime's object: its callback
  /// has run already).
  bool valid() const { return slot_ != nullptr; }

private:
  friend struct detail::slot_access;
  void* slot_ = nullptr;
};

/// Called once with an item's end, on the runtime's callback thread, one
/// callback at a time in the order items end. It may submit more work and
/// may block (delaying the callbacks after it); an exception it throws is
/// dropped. What it submits is sent when it returns, together with what
/// the callbacks ending in the same batch submit, or before it waits for a
/// future, runs, cancels or stops the runtime.
using callback = std::function<void(outcome)>;

/// As `callback`, with the item's id, for submit_many.
using batch_callback = std::function<void(uint64_t id, outcome)>;

// -- the runtime ------------------------------------------------------------

/// How to start a runtime. With `config_file` or `config_text` (a
/// text-format cohort.pb.RuntimeConfig, docs/config.md) the config says
/// which devices and tenants there are, and cpu_workers, simulated_gpus and
/// gpus must stay at their defaults; without either, those fields make one:
/// CPU workers, simulated GPUs, real GPUs, and tenant "default" granted
/// every kernel on every device. `audit_path`, when set, overrides the
/// config's.
struct options {
  std::string config_file;
  std::string config_text;
  /// CPU workers; unset: one per core.
  std::optional<uint32_t> cpu_workers;
  /// Simulated GPUs sim0, sim1, ... (16 GiB, 4 streams, speeds 1, 1, 2, 4).
  uint32_t simulated_gpus = 0;
  /// Use the machine's real GPUs (CUDA, HIP) when there are any.
  bool gpus = true;
  /// The audit log; empty: cohort-audit.log in the working directory.
  std::string audit_path;
  /// The Unix domain socket through which other processes of the node
  /// attach to exported objects (docs/objects.md, "Sharing across
  /// processes"); overrides the config's `share_socket`. Empty: not shared.
  std::string share_socket;
};

/// What an export lets the processes holding its token do
/// (runtime::share).
struct share_options {
  /// Attach read-write (write the object in place); read-only otherwise.
  bool write = false;
  /// Only processes of this user id may attach; -1: the runtime's own.
  int64_t uid = -1;
  /// At most this many attachments at once; 0: no limit.
  uint32_t max_attached = 0;
};

/// A device of the runtime, as it was when the runtime started.
struct device_view {
  std::string name;  ///< "cpu0", "cuda0", "sim2", ...
  std::string kind;  ///< "cpu", "cuda", "hip", "sim"
  std::string model; ///< the CPU or GPU model
  bool simulated = false;
  uint64_t memory_bytes = 0; ///< 0 for CPU workers (host memory)
  uint32_t streams = 0;
  int32_t numa_node = -1;
  /// GPUs: the other GPUs it reaches directly (docs/placement.md, "Links
  /// between GPUs"), by name, with how: "NVLink", "xGMI" or "PCIe P2P".
  struct link {
    std::string peer;
    std::string kind;
  };
  std::vector<link> links;
};

/// A live device-resident object, as `runtime::objects` lists it.
struct object_view {
  uint64_t id = 0;
  std::string tenant;
  dtype type = dtype::f32;
  size_t size = 0;
  size_t bytes = 0;
  /// Devices holding a copy ("sim0", ...), and whether host memory holds
  /// one (made from a host buffer, or kept by a CPU worker).
  std::vector<std::string> devices;
  bool host_copy = false;
  /// Handles held by clients, and items in flight that read it.
  uint32_t handles = 0;
  uint32_t readers = 0;
  /// Processes attached to it through the share socket, and its exports.
  uint32_t attached = 0;
  uint32_t exports = 0;
  /// Milliseconds since it was made.
  int64_t age_ms = 0;
};

/// An item as the runtime holds it (docs/jobs.md), as `runtime::items`
/// lists it.
struct item_info {
  /// Its number in the node: unique for the runtime's life, given at
  /// submission (`cohort jobs`, `GET /v1/items` name items by it).
  uint64_t job = 0;
  /// Its id as its client gave it (work::id), and its client's number
  /// (every item of this runtime's API has `runtime::client()`).
  uint64_t id = 0;
  uint64_t client = 0;
  std::string tenant;
  std::string kernel;
  /// "held" (by its tenant's limits), "queued" (admitted, waiting for a
  /// device), "placed" (on a device's queue), "running"; for one that
  /// ended lately (runtime::item): "done", "failed" or "cancelled".
  std::string state;
  /// Where it is placed, runs or ended; empty otherwise.
  std::string device;
  /// Milliseconds since it was submitted (one that ended: its lifetime).
  double age_ms = 0;
  uint32_t attempts = 0;
  /// Cancelled while it runs: it ends with `cancelled` when its launch
  /// ends.
  bool cancelling = false;
  /// Its priority within its tenant (work::priority).
  int32_t priority = 0;
  /// Why it waits, or how it ended.
  std::string detail;
};

/// Counters of the runtime so far.
struct stats {
  /// Items admitted, and refused at admission (quota, grant, rate, ...).
  uint64_t admitted = 0;
  uint64_t rejected = 0;
  /// Admitted items that ended with their result, with an error.
  uint64_t completed = 0;
  uint64_t failed = 0;
  /// Items cancelled, each once however often asked.
  uint64_t cancelled = 0;
  /// Items moved from a GPU to a CPU worker.
  uint64_t fallbacks = 0;
  /// Items completed per device, by the order of devices().
  std::vector<uint64_t> per_device;
};

/// What a tenant may still use on one device with memory.
struct device_headroom_view {
  std::string device;
  /// The tenant's bytes there, its quota there (0: none), its reservation.
  uint64_t used = 0;
  uint64_t quota = 0;
  uint64_t reserved = 0;
  /// The largest item (device memory) it could place there now, and with
  /// everything else idle.
  uint64_t headroom = 0;
  uint64_t ceiling = 0;
};

/// What a tenant may still use.
struct headroom_view {
  std::string tenant;
  uint64_t inflight = 0;
  uint64_t max_inflight = 0;
  /// Items held back for it (policy QUEUE).
  uint64_t waiting = 0;
  /// Device memory across devices, and its quota (0: none).
  uint64_t memory = 0;
  uint64_t memory_quota = 0;
  /// CPU workers granted to it (they take items of any size).
  uint32_t cpu_workers = 0;
  std::vector<device_headroom_view> devices;
};

/// One step of a dry run: `bytes` of device memory for `tenant` on
/// `device` (for `kernel`, when named, whose grant is checked), named
/// `label`; or, with `free` set, the release of the step labelled so.
struct dry_run_step {
  std::string tenant;
  std::string device;
  uint64_t bytes = 0;
  std::string kernel;
  std::string label;
  std::string free;
};

/// What would happen to each step of a dry run.
struct dry_run_report {
  struct step {
    bool ok = false;
    /// The errc name and why, when refused; `soft` when a quota or limit
    /// refused it (the tenant's policy would apply), not the device.
    std::string error;
    std::string detail;
    bool soft = false;
  };
  /// True when every step would succeed.
  bool ok = true;
  std::vector<step> steps;
  /// Per tenant: its peak device memory during the plan.
  std::vector<std::pair<std::string, uint64_t>> tenant_peaks;
};

/// A running Cohort instance: its own actor system, devices, balancer,
/// supervisor, quota and audit actors. Thread-safe: any thread may submit.
/// Destroying it stops it (see stop()), also as a static destroyed at exit.
/// Move-only: a moved-from runtime holds nothing, and every call on it but
/// stop() (which does nothing), assignment and destruction throws
/// cohort::error (invalid_arguments).
class runtime {
public:
  /// Starts a runtime; throws cohort::error (malformed_config for a bad
  /// config, io_error for an unreadable file or audit log, ...).
  static runtime start(const options& opts = {});

  runtime(runtime&& other) noexcept;
  runtime& operator=(runtime&& other) noexcept;
  runtime(const runtime&) = delete;
  runtime& operator=(const runtime&) = delete;
  ~runtime();

  /// Submits one item and returns at once; the future gets its end.
  future submit(work item);

  /// Submits one item; `done` is called once with its end. The ticket
  /// cancels it (cancel(const ticket&)); it may be dropped.
  ticket submit(work item, callback done);

  /// Submits `items` in order in one message to the runtime: each is
  /// admitted as if submitted alone; the futures are in the same order.
  std::vector<future> submit_many(std::vector<work> items);

  /// Submits `items` in order; `done` is called once per item.
  void submit_many(std::vector<work> items, batch_callback done);

  /// Cancels every item of this runtime's callers with id `id` still in
  /// flight: one still waiting ends with `cancelled` and never runs; one
  /// running finishes on its device and then ends with `cancelled`, its
  /// result dropped. Exactly one end either way; nothing for an item that
  /// already ended. Asynchronous: the end arrives as usual.
  void cancel(uint64_t id);

  /// Cancels the item of `f` (the same rules, that item only).
  void cancel(const future& f);

  /// Cancels the item of `t`, submitted with a callback (the same rules,
  /// that item only; its callback gets `cancelled`, or its result when it
  /// had ended already).
  void cancel(const ticket& t);

  /// Job control (docs/jobs.md): the live items of every client of this
  /// runtime (the node's pipelines, remote clients and this API), held ones
  /// first, then by job number; of `tenant` only when given. Throws
  /// cohort::error (shutting_down after stop()).
  std::vector<item_info> items(const std::string& tenant = {});

  /// Item `job`, live or among the last 1,024 that ended. Throws
  /// cohort::error (unknown_item, shutting_down).
  item_info item(uint64_t job);

  /// Cancels item `job`, every live item of `tenant`, or every live item
  /// of client `client` (any client's, not only this API's), by the rules
  /// of cancel(id); each cancel is audited (CANCEL, "cancelled by the
  /// API"). Return how many were cancelled (0: none live; an item being
  /// cancelled already is not counted again). Throw cohort::error
  /// (invalid_arguments for 0 or an empty tenant, shutting_down).
  uint64_t cancel_job(uint64_t job);
  uint64_t cancel_tenant(const std::string& tenant);
  uint64_t cancel_client(uint64_t client);

  /// The number this runtime's own items carry as their client
  /// (item_info::client).
  uint64_t client() const;

  /// Tracing (docs/tracing.md): starts recording a timeline of this
  /// runtime's work: each item's wait, each launch on its device's stream,
  /// failovers, failures, refusals and device events, at most `max_events`
  /// of them (later ones are counted, not kept). Throws cohort::error
  /// (invalid_arguments outside 1 to 4,000,000; invalid_transition while a
  /// trace is being recorded; shutting_down).
  void start_trace(uint64_t max_events = 1'000'000);

  /// Stops the trace and returns it in the Chrome trace event format
  /// (JSON, which Perfetto and chrome://tracing open). Throws cohort::error
  /// (invalid_transition when none is being recorded; shutting_down).
  std::string stop_trace();

  /// From a callback: runs `fn` on the callback thread once every callback
  /// of the batch of ends being run has returned, before the work they
  /// submitted is sent (functions asked for meanwhile run in the same
  /// round; an exception is dropped). A consumer of many ends uses it to
  /// settle them all under one lock, or one GIL, instead of one each.
  /// From any other thread: runs `fn` at once. Throws cohort::error
  /// (invalid_arguments) for an empty function.
  void after_callbacks(std::function<void()> fn);

  /// Submits one item and waits for its end.
  outcome run(work item);

  /// As run(item), waiting at most `timeout` (positive): when it is up the
  /// item is cancelled and the outcome is `timed_out`.
  outcome run(work item, std::chrono::milliseconds timeout);

  /// The devices, in the order of stats::per_device.
  std::vector<device_view> devices() const;

  /// What `tenant` (every tenant when empty) may still use now; throws
  /// cohort::error (unknown_tenant, shutting_down after stop()).
  std::vector<headroom_view> headroom(const std::string& tenant = {});

  /// A dry run of `steps` against this runtime's grants, quotas and
  /// devices, from an idle fleet (or, with `from_now`, from what is in use
  /// now); nothing is allocated. Throws cohort::error for a malformed plan.
  dry_run_report dry_run(const std::vector<dry_run_step>& steps,
                         bool from_now = false);

  /// Makes a device-resident object of `tenant` from `data` (docs/objects.md)
  /// and returns its handle once the copy is on the device: on `device`
  /// (a name, "sim0"), or else on the granted device with memory that has
  /// the least work; in host memory when the fleet has no device with
  /// memory or `device` names a CPU worker. Copies of other objects there
  /// that nothing reads may be evicted to make room. Throws cohort::error:
  /// unknown_tenant, not_granted, unknown_device, invalid_arguments (an
  /// empty buffer, or one naming an object), over_memory_quota,
  /// memory_limit or out_of_memory (when eviction did not make room),
  /// device_lost, shutting_down.
  object_ref put(const std::string& tenant, buffer data,
                 const std::string& device = {});

  /// A host copy of `obj`'s elements (read back from its device when it
  /// has no host copy). Throws cohort::error: invalid_arguments (an empty
  /// handle, or another runtime's object), object_lost, shutting_down.
  buffer get(const object_ref& obj);

  /// The live objects of `tenant` (every tenant when empty), by id.
  std::vector<object_view> objects(const std::string& tenant = {});

  /// Exports `obj` to other processes of this node (docs/objects.md,
  /// "Sharing across processes") and returns the token that a process
  /// gives the client library (cohort/client.hpp) to attach through
  /// share_socket(). Nothing is attachable without a token; the export
  /// does not hold the object (handles and attached processes do), and
  /// ends when the object is freed or unshare() revokes it. Throws
  /// cohort::error: invalid_arguments (an empty handle, another runtime's
  /// object, no share socket, or a read-write export of an object that
  /// items are reading on another device), object_lost, shutting_down.
  std::string share(const object_ref& obj, const share_options& opts = {});

  /// Revokes an export: no new attaches with `token` (attached processes
  /// keep theirs until they detach or exit). Throws cohort::error
  /// (invalid_arguments for an unknown token).
  void unshare(const std::string& token);

  /// The share socket's path; empty when this runtime does not share.
  std::string share_socket() const;

  /// Counters so far (after stop(), the final ones).
  cohort::stats stats();

  /// Loads the signed kernel bundle in directory `dir` (docs/kernels.md,
  /// "Signed bundles") under the trust settings of this runtime's config
  /// (`kernel_bundles`) and returns its kernels' names; `kernel_named`
  /// finds them. Loading a bundle again returns the same kernels. Audited
  /// either way. Throws cohort::error: bundle_refused ("REASON: what was
  /// wrong"; also counted and alerted) or shutting_down after stop().
  std::vector<std::string> load_kernel_bundle(const std::string& dir);

  /// Stops admitting (waiting items end with shutting_down), lets items in
  /// flight finish for up to the config's shutdown_drain_ms, ends what is
  /// left with shutting_down, writes out the audit log and stops. Every
  /// admitted item still ends exactly once; later submissions end at once
  /// with shutting_down. Called again (or from two threads), each call
  /// returns once the runtime has stopped and every callback has run;
  /// from a callback it returns without waiting for the callbacks behind
  /// it.
  void stop();

  /// The audit log's path.
  const std::string& audit_path() const;

  struct impl;

private:
  explicit runtime(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

} // namespace cohort
