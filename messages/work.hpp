// The plain C++ message types of the in-process hot path. Each has an
// `inspect` overload and is registered in system_config.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/catalog.hpp"
#include "messages/host_buffer.hpp"
#include "messages/objects.hpp"

#include <caf/error.hpp>
#include <caf/meta/load_callback.hpp>
#include <caf/meta/type_name.hpp>

namespace cohort::kernels {

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, kernel_args& x) {
  return f(caf::meta::type_name("kernel_args"), x.alpha, x.m, x.n, x.k,
           x.top_k);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, kernel_output& x) {
  auto type = static_cast<uint8_t>(x.type);
  auto load = caf::meta::load_callback([&]() -> caf::error {
    if (type >= kernels::dtype_limit)
      return caf::sec::invalid_argument;
    x.type = static_cast<kernels::dtype>(type);
    return caf::none;
  });
  return f(caf::meta::type_name("kernel_output"), x.values, x.indices, type,
           x.raw, load);
}

} // namespace cohort::kernels

namespace cohort {

using kernels::kernel_id;

/// A further kernel of a work item, run on the same device right after the
/// previous one. The previous output stays in device memory and becomes
/// input `input_slot` of this kernel: no host round trip between stages.
struct chained_stage {
  kernel_id kernel = kernel_id::axpy;
  kernels::kernel_args args;
  /// The other inputs, in catalog order without the slot the previous
  /// output fills (input_count(kernel) - 1 of them).
  std::vector<host_buffer> inputs;
  uint32_t input_slot = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, chained_stage& x) {
  auto kernel = static_cast<uint8_t>(x.kernel);
  auto load = caf::meta::load_callback([&]() -> caf::error {
    x.kernel = static_cast<kernel_id>(kernel);
    return caf::none;
  });
  return f(caf::meta::type_name("chained_stage"), kernel, x.args, x.inputs,
           x.input_slot, load);
}

/// One unit of work as an application submits it.
struct work_item {
  /// Unique per submitting client; results and errors carry it back.
  uint64_t id = 0;
  std::string tenant;
  kernel_id kernel = kernel_id::axpy;
  kernels::kernel_args args;
  std::vector<host_buffer> inputs;
  /// Kernels chained after this one on the same device; the result is the
  /// last one's output.
  std::vector<chained_stage> then;
  /// Devices the item needs at once (a gang): 0 or 1 for one. A gang gemm
  /// is split by rows of A, one slice per device, all placed together.
  uint32_t gang = 0;
  /// How the submitting client tells its items apart when ids alone do not
  /// (runtime::submit sets it; 0 otherwise): when set, the client's item is
  /// keyed by it instead of `id`, and its end carries it (work_result::tag;
  /// a failure's id field). The id stays the item's name everywhere else
  /// (the audit log, devices, errors).
  uint64_t tag = 0;
  /// Its output stays on the device that made it, as a new object
  /// (docs/objects.md): the result names the object instead of carrying
  /// the values.
  bool keep_on_device = false;
  /// Its priority within its tenant (docs/jobs.md): a higher one goes
  /// ahead of the tenant's lower ones that wait (held, queued, or placed on
  /// a device and not sent yet); equal ones keep the order they came in.
  /// Tenants still share devices by their weights.
  int32_t priority = 0;

  /// Inputs that name objects (host_buffer::object), first stage and
  /// chained stages alike.
  bool reads_objects() const {
    for (auto& in : inputs)
      if (in.object() != 0)
        return true;
    for (auto& st : then)
      for (auto& in : st.inputs)
        if (in.object() != 0)
          return true;
    return false;
  }

  /// What the client's sink knows the item by: its tag when set, else its
  /// id.
  uint64_t key() const { return tag != 0 ? tag : id; }

  /// Views of the inputs, in the form the kernel catalog takes (inline
  /// for up to 8 inputs: no allocation).
  kernels::small_vector<std::span<const float>, 8> views() const {
    kernels::small_vector<std::span<const float>, 8> out;
    for (auto& in : inputs)
      out.push_back(in.span());
    return out;
  }

  /// Typed views of the inputs (what devices take).
  kernels::small_vector<kernels::typed_view, 8> typed_views() const {
    kernels::small_vector<kernels::typed_view, 8> out;
    for (auto& in : inputs)
      out.push_back(in.view());
    return out;
  }

  /// Bytes of all inputs (of every stage).
  uint64_t input_bytes() const {
    uint64_t total = 0;
    for (auto& in : inputs)
      total += in.bytes();
    for (auto& st : then)
      for (auto& in : st.inputs)
        total += in.bytes();
    return total;
  }
};

/// Checks every stage's kernel, inputs and arguments (a chained stage's
/// input from the previous stage by its length); empty when valid. A
/// registered kernel's rule that throws makes it invalid, with that message.
std::string validate_item(const work_item& item);

/// What the runtime needs of an item's size, worked out once.
struct item_shape {
  /// Device memory it holds (item_bytes).
  uint64_t bytes = 0;
  /// Modeled work of all its stages (item_cost).
  kernels::kernel_cost cost;
  /// Elements of its last stage's output.
  uint64_t output_elements = 0;
};

/// Checks `item` as validate_item does and, when it is valid, fills
/// `shape`, in one pass over its stages without allocating (but for the
/// message of an invalid item). Returns what is wrong, empty when valid.
/// Throws kernels::kernel_failure when a registered kernel's rule throws
/// (admission ends the item with kernel_error).
std::string shape_item(const work_item& item, item_shape& shape);

/// Device buffers are aligned to this many bytes.
inline constexpr uint64_t item_alignment = 256;

/// Device memory the item holds: every input, every intermediate output and
/// the result, each aligned to `item_alignment` (what a simulated GPU
/// allocates; a real GPU adds the kernel's scratch).
uint64_t item_bytes(const work_item& item);

/// Modeled work of all stages.
kernels::kernel_cost item_cost(const work_item& item);

/// Runs every stage of a valid item on the host with `run` (run_cpu,
/// run_reference).
kernels::kernel_output run_item_on_host(
    const work_item& item,
    kernels::kernel_output (*run)(kernel_id, const kernels::kernel_args&,
                                  kernels::typed_inputs));

/// Checks a result of a valid item against the double-precision reference
/// (of every stage in turn); empty when it agrees, otherwise what differs.
std::string check_result(const work_item& item,
                         const kernels::kernel_output& got);

/// Typed inputs of chained stage `st` with `previous` in its slot.
kernels::small_vector<kernels::typed_view, 8>
typed_stage_views(const chained_stage& st, kernels::typed_view previous);

/// The inputs of chained stage `st` with `previous` in its slot.
std::vector<std::span<const float>>
stage_views(const chained_stage& st, std::span<const float> previous);

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, work_item& x) {
  auto kernel = static_cast<uint8_t>(x.kernel);
  auto load = caf::meta::load_callback([&]() -> caf::error {
    x.kernel = static_cast<kernel_id>(kernel);
    return caf::none;
  });
  return f(caf::meta::type_name("work_item"), x.id, x.tenant, kernel, x.args,
           x.inputs, x.then, x.gang, x.tag, x.keep_on_device, x.priority, load);
}

/// The successful end of a work item, as the client receives it.
struct work_result {
  uint64_t id = 0;
  kernels::kernel_output output;
  /// Name of the device that produced the result.
  std::string device;
  /// Placements it took (1 unless a device failed under it).
  uint32_t attempts = 0;
  /// True if it ended on a CPU worker after a GPU placement failed.
  bool fallback = false;
  /// The item's tag (see work_item::tag).
  uint64_t tag = 0;
  /// An item kept on a device: the object its output became (then `output`
  /// is empty); id 0 otherwise.
  object_info object;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, work_result& x) {
  return f(caf::meta::type_name("work_result"), x.id, x.output, x.device,
           x.attempts, x.fallback, x.tag, x.object);
}

/// One item's end in a batch of ends: its result, or (error set) why it
/// ended without one.
struct work_end {
  /// What the client knows the item by: its tag when set, else its id
  /// (work_item::key, as in client_sink's failed message).
  uint64_t key = 0;
  /// Set when the item ended without a result (then `result` is empty).
  caf::error error;
  work_result result;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, work_end& x) {
  return f(caf::meta::type_name("work_end"), x.key, x.error, x.result);
}

/// A device actor's report of one finished launch.
struct work_done {
  uint64_t id = 0;
  kernels::kernel_output output;
  /// Time the device spent on it (modeled on simulated devices).
  int64_t device_ns = 0;
  /// Non-zero: the output was kept on the device as this object
  /// (run_request::keep_as); `output` holds its type only, `kept_elements`
  /// its size.
  uint64_t kept_as = 0;
  uint64_t kept_elements = 0;
  /// Time from the request's arrival at the device's actor to this report,
  /// on the device's side: the rest of the balancer's round trip is the
  /// cost of reaching the device (its crossing, docs/placement.md).
  int64_t held_ns = 0;
  /// Set by the node's relay for a device outside the node's process: when
  /// the report reached the node (its steady clock, ns).
  int64_t relayed_at_ns = 0;
  /// The stream it ran on (its trace track).
  uint32_t stream = 0;
  /// When it finished, on the steady clock of the device's machine (ns;
  /// modeled on simulated devices): where its trace draws its end, for a
  /// device on the node's machine.
  int64_t finished_ns = 0;
  /// Of device_ns, its copies in and out, when the request asked for them
  /// to be timed apart (run_request::time_copies; GPUs only, else 0).
  int64_t copy_in_ns = 0;
  int64_t copy_out_ns = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, work_done& x) {
  return f(caf::meta::type_name("work_done"), x.id, x.output, x.device_ns,
           x.kept_as, x.kept_elements, x.held_ns, x.relayed_at_ns, x.stream,
           x.finished_ns, x.copy_in_ns, x.copy_out_ns);
}

/// One launch the balancer asks a device actor for. The device allocates
/// what the item needs from its own memory, tagged with the item's owner.
struct run_request {
  /// The balancer's ticket for the item (unique per runtime).
  uint64_t ticket = 0;
  /// Inputs naming objects are on this device (the others were replaced by
  /// host copies).
  work_item item;
  /// Non-zero: keep the output on the device as this object, if it can
  /// (its memory may refuse: the output then comes back as usual).
  uint64_t keep_as = 0;
  /// For a device in a host process running a kernel registered in the
  /// node's process, whose rules the host cannot evaluate: per stage (the
  /// first, then each chained one), the output's elements and the threads
  /// its launch needs, as the node worked them out. Empty otherwise.
  std::vector<uint64_t> sizes;
  /// Time its copies apart from its kernels (a trace is being recorded):
  /// the device records two more events (devices::device::time_copies).
  bool time_copies = false;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, run_request& x) {
  return f(caf::meta::type_name("run_request"), x.ticket, x.item, x.keep_as,
           x.sizes, x.time_copies);
}

} // namespace cohort
