#include "devices/gpu/gpu_device.hpp"

#include <algorithm>
#include <cstring>
#include <utility>

#include "devices/gpu/gpu_memory_resource.hpp"
#include "devices/topology.hpp"
#include "kernels/registry.hpp"
#include "messages/errc.hpp"

namespace cohort::devices::gpu {

namespace {

constexpr size_t device_align = 256;
constexpr size_t staging_align = 64;

size_t align_up(size_t x, size_t a) {
  return (x + a - 1) / a * a;
}

// Paths as the compiler saw them ("../devices/gpu/x.cpp") shortened to the
// source tree's ("devices/gpu/x.cpp").
const char* source_path(const char* file) {
  for (auto* p = file; *p != '\0'; ++p)
    if (std::strncmp(p, "devices/", 8) == 0)
      return p;
  return file;
}

// Where each buffer of one chain lives in its device block and its staging
// block. Stage outputs stay in the device block; the next stage reads them
// there. Staging holds the host inputs, then the last stage's output.
// A built-in kernel runs through the backend's launch wrappers (la); a
// registered one through its module's entry point, with a cohort_gpu_call.
struct stage_layout {
  kernels::gpu::launch_args la;
  bool registered = false;
  size_t n_in = 0;
  uint64_t in_len[COHORT_MAX_INPUTS] = {};
  kernels::dtype in_type[COHORT_MAX_INPUTS] = {};
  size_t in_off[COHORT_MAX_INPUTS] = {};
  size_t in_bytes[COHORT_MAX_INPUTS] = {};
  size_t stage_in[COHORT_MAX_INPUTS] = {};
  bool from_previous[COHORT_MAX_INPUTS] = {};
  /// A device-resident object: read in place, never staged.
  bool resident[COHORT_MAX_INPUTS] = {};
  size_t out_off = 0;
  uint64_t out_elements = 0;
  kernels::dtype out_type = kernels::dtype::f32;
  /// The launch brought its sizes (stage_view::sized): its threads.
  std::optional<uint64_t> threads;
  size_t idx_off = 0;
  size_t scratch_off = 0;

  size_t out_bytes() const {
    return out_elements * kernels::element_size(out_type);
  }
};

struct chain_layout {
  std::vector<stage_layout> stages;
  size_t device_total = 0;
  size_t stage_out = 0;
  size_t stage_idx = 0;
  size_t stage_total = 0;
  uint64_t out_indices = 0;
};

// Blocks of `block` threads covering `threads`; 0 when there is nothing to
// run, and false when the grid would pass the 2^31 - 1 blocks a launch takes.
bool grid_for(uint64_t threads, uint32_t block, uint32_t& grid) {
  auto blocks = (threads + block - 1) / block;
  if (blocks > uint64_t{0x7fffffff})
    return false;
  grid = uint32_t(blocks);
  return true;
}

template <class T> T* at(void* base, size_t offset) {
  return reinterpret_cast<T*>(static_cast<char*>(base) + offset);
}

// What a completion callback needs: the hub outlives the device.
struct callback_ctx {
  std::shared_ptr<void> hub;
  void (*deliver)(void* hub, uint64_t ticket);
  uint64_t ticket;
};

} // namespace

#define COHORT_GPU_FAIL(rc, what) fail(rc, what, __LINE__)

caf::error to_error(const api& rt, result rc, const std::string& device,
                    std::string_view what, const char* file, int line) {
  std::string detail = device + ": " + std::string{what} +
                       " failed: " + rt.describe(rc.raw) + " [" +
                       to_string(rc.code) + "] at " + source_path(file) + ":" +
                       std::to_string(line);
  switch (rc.code) {
  case status::ok:
    return caf::none;
  case status::out_of_memory:
    return make_error(errc::out_of_memory, std::move(detail));
  case status::no_device:
  case status::driver_missing:
    return make_error(errc::device_lost, std::move(detail));
  case status::launch_failure:
  case status::illegal_address:
  case status::ecc_uncorrectable:
  case status::hardware_stop:
    return make_error(errc::device_lost,
                      detail + " (sticky: the context is lost)");
  case status::invalid_value:
  case status::other:
    break;
  }
  return make_error(errc::kernel_fault, std::move(detail));
}

caf::expected<std::pair<device_info, properties>>
probe_gpu(api& rt, int ordinal, device_kind kind, std::string name,
          uint32_t streams) {
  properties props;
  std::string what = "reading the properties of " + std::string{rt.vendor()} +
                     " device " + std::to_string(ordinal);
  if (auto rc = rt.get_properties(ordinal, props); rc.failed())
    return to_error(rt, rc, name, what, __FILE__, __LINE__);
  device_info info;
  info.name = std::move(name);
  info.kind = kind;
  info.simulated = false;
  info.model = props.name;
  info.memory_bytes = props.memory_bytes;
  info.streams = std::max(1u, streams);
  info.cores = uint32_t(props.multiprocessors);
  info.multiprocessors = uint32_t(props.multiprocessors);
  info.pci_bus_id = props.pci_bus_id;
  info.uuid = props.uuid;
  info.arch = !props.arch.empty() ? props.arch
                                  : "sm_" + std::to_string(props.cc_major) +
                                        std::to_string(props.cc_minor);
  info.numa_node = numa_node_of_pci(props.pci_bus_id);
  return std::pair{std::move(info), std::move(props)};
}

caf::expected<std::shared_ptr<gpu_device>>
gpu_device::open(std::shared_ptr<api> rt, int ordinal, device_kind kind,
                 std::string name, gpu_options opts) {
  auto probed = probe_gpu(*rt, ordinal, kind, std::move(name), opts.streams);
  if (!probed)
    return probed.error();
  auto& [info, props] = *probed;
  if (!opts.expect_uuid.empty() && info.uuid != opts.expect_uuid)
    return make_error(
        errc::unknown_device,
        info.name + ": ordinal " + std::to_string(ordinal) + " is GPU " +
            info.uuid + " in this process, not " + opts.expect_uuid +
            " as expected (do CUDA_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES or "
            "CUDA_DEVICE_ORDER differ between the node and its device "
            "host?)");
  auto mem_opts = opts.memory;
  auto dev = std::make_shared<gpu_device>(rt, ordinal, std::move(info),
                                          std::move(props), std::move(opts));
  if (auto err = dev->create_streams(__LINE__))
    return err;
  auto& x = dev->info();
  // The launches' streams and, last, the fill stream.
  auto ordering = std::make_unique<gpu_stream_ordering>(
      rt, ordinal, x.name, &dev->streams_, x.streams + 1);
  dev->ordering_ = ordering.get();
  auto mem = memory::device_memory::make(
      x.name, false, x.memory_bytes,
      std::make_unique<gpu_memory_resource>(rt, ordinal, x.name),
      std::move(ordering), std::move(mem_opts));
  if (!mem)
    return mem.error();
  dev->memory_ = std::move(*mem);
  return dev;
}

gpu_device::gpu_device(std::shared_ptr<api> rt, int ordinal, device_info info,
                       properties props, gpu_options opts)
    : device(std::move(info)), rt_(std::move(rt)), ordinal_(ordinal),
      props_(std::move(props)), opts_(std::move(opts)),
      staging_(*rt_, this->info().numa_node, opts_.staging_cache_bytes),
      hub_(std::make_shared<callback_hub>()) {
  hub_->owner = this;
  if (opts_.monitor && !props_.pci_bus_id.empty())
    opts_.monitor->watch(props_.pci_bus_id, [this](health::gpu_event ev) {
      // On a MIG instance: another instance's event is not its.
      if (!health::concerns(ev, opts_.gpu_instance))
        return;
      std::lock_guard<std::mutex> guard{events_mtx_};
      events_.push_back(std::move(ev));
    });
}

gpu_device::~gpu_device() {
  {
    std::lock_guard<std::mutex> guard{hub_->mtx};
    hub_->owner = nullptr;
  }
  if (opts_.monitor && !props_.pci_bus_id.empty())
    opts_.monitor->unwatch(props_.pci_bus_id);
  rt_->set_device(ordinal_);
  if (lost_) {
    // Nothing in a lost context can be waited for: drop it whole. Pinned
    // registrations, events and device memory went with it.
    rt_->device_reset();
    for (auto& [ticket, rec] : records_)
      free_on_numa(rec.staging.data, rec.staging.capacity);
    records_.clear();
    staging_.clear(false);
    if (memory_)
      memory_->reset(true);
    return;
  }
  for (auto& [ticket, rec] : records_)
    release(rec, true);
  records_.clear();
  drop_all_objects();
  for (auto& [id, m] : modules_)
    rt_->module_unload(m.module);
  modules_.clear();
  if (memory_) {
    // Slabs go back to the driver (which waits for the device), then the
    // fence events, then the streams.
    for (auto s : streams_)
      rt_->stream_synchronize(s);
    ordering_->destroy_events();
    memory_.reset();
  }
  destroy_streams();
}

uint32_t gpu_device::pick_stream(uint32_t) const {
  return uint32_t(std::min_element(inflight_.begin(), inflight_.end()) -
                  inflight_.begin());
}

health::gpu_sample gpu_device::telemetry() const {
  if (!opts_.monitor) {
    health::gpu_sample s;
    s.unavailable_reason = "no health monitor for " + info().name;
    return s;
  }
  return opts_.monitor->sample(props_.pci_bus_id);
}

caf::error gpu_device::fail(result rc, std::string_view what, int line) {
  auto err = to_error(*rt_, rc, info().name, what, __FILE__, line);
  if (is_sticky(rc.code) && !lost_)
    lost_ = err;
  return err;
}

caf::error gpu_device::function_of(kernels::kernel_id id, function_t& f) {
  if (auto i = modules_.find(uint8_t(id)); i != modules_.end()) {
    f = i->second.function;
    return caf::none;
  }
  auto* def = kernels::find(id);
  bool hip = info().kind == device_kind::hip_gpu;
  if (def == nullptr || !(hip ? def->hip : def->cuda).present())
    return make_error(errc::kernel_fault, info().name + ": kernel " +
                                              std::string{kernels::name(id)} +
                                              " has no " +
                                              (hip ? "HIP" : "CUDA") + " code");
  auto& code = hip ? def->hip : def->cuda;
  auto what = std::string{hip ? "the HIP code object" : "the CUDA module"} +
              " of " + def->name;
  loaded_module m;
  std::string log;
  if (auto rc = rt_->module_load(code.image->data(), code.image->size(),
                                 m.module, log);
      rc.failed())
    return COHORT_GPU_FAIL(rc, "loading " + what +
                                   (log.empty() ? "" : " (" + log + ")"));
  if (auto rc =
          rt_->module_function(m.module, code.function.c_str(), m.function);
      rc.failed()) {
    rt_->module_unload(m.module);
    return COHORT_GPU_FAIL(rc, "finding entry point '" + code.function +
                                   "' in " + what);
  }
  modules_.emplace(uint8_t(id), m);
  f = m.function;
  return caf::none;
}

caf::error gpu_device::launch_registered(kernels::kernel_id id,
                                         const kernels::kernel_args& args,
                                         const cohort_gpu_call& call,
                                         stream_t s,
                                         std::optional<uint64_t> given) {
  function_t f = nullptr;
  if (auto err = function_of(id, f))
    return err;
  auto* def = kernels::find(id);
  auto& code = info().kind == device_kind::hip_gpu ? def->hip : def->cuda;
  auto name = std::string{kernels::name(id)};
  auto bytes = call.output_length *
               kernels::element_size(kernels::dtype(call.output_dtype));
  if (bytes > 0)
    if (auto rc = rt_->zero_device(call.output, bytes, s); rc.failed())
      return COHORT_GPU_FAIL(rc, "zeroing the output of " + name);
  auto threads = call.output_length;
  if (given) {
    threads = *given;
  } else if (code.launch_elements) {
    uint64_t lens[COHORT_MAX_INPUTS];
    std::copy(call.lengths, call.lengths + call.input_count, lens);
    threads = code.launch_elements(args, {lens, call.input_count});
  }
  uint32_t grid = 0;
  if (!grid_for(threads, code.block, grid))
    return make_error(errc::invalid_arguments,
                      info().name + ": " + name + " asks for " +
                          std::to_string(threads) +
                          " threads, more than one launch takes");
  if (grid == 0)
    return caf::none;
  if (auto rc =
          rt_->launch_function(f, grid, code.block, &call, sizeof call, s);
      rc.failed())
    return COHORT_GPU_FAIL(rc, "launching " + name);
  return caf::none;
}

caf::error gpu_device::create_streams(int line) {
  if (auto rc = rt_->set_device(ordinal_); rc.failed())
    return fail(rc, "selecting the device", line);
  // One stream per launch lane, and one for the pool's zero fills.
  streams_.assign(info().streams + 1, nullptr);
  inflight_.assign(info().streams, 0);
  for (auto& s : streams_)
    if (auto rc = rt_->stream_create(s); rc.failed()) {
      streams_.clear();
      return fail(rc, "creating a stream", line);
    }
  return caf::none;
}

void gpu_device::destroy_streams() {
  for (auto s : streams_) {
    if (s != nullptr) {
      rt_->stream_synchronize(s);
      rt_->stream_destroy(s);
    }
  }
  streams_.clear();
  for (auto e : free_events_)
    rt_->event_destroy(e);
  free_events_.clear();
}

caf::error gpu_device::event(event_t& e, int line) {
  if (!free_events_.empty()) {
    e = free_events_.back();
    free_events_.pop_back();
    return caf::none;
  }
  if (auto rc = rt_->event_create(e, true); rc.failed())
    return fail(rc, "creating an event", line);
  return caf::none;
}

void gpu_device::release(launch_record& rec, bool synchronize) {
  if (synchronize)
    rt_->stream_synchronize(streams_[rec.stream]);
  if (rec.block != nullptr) {
    // The launch is done with it (or its stream was waited for): back to
    // the pool, zeroed on the fill stream, reused by a launch only after
    // the zero fill, never after other launches.
    if (auto err = memory_->deallocate(rec.block, rec.block_bytes,
                                       ordering_->fill_stream());
        code_of(err) == errc::device_lost && !lost_)
      lost_ = std::move(err);
    rec.block = nullptr;
  }
  staging_.release(rec.staging);
  rec.staging = {};
  for (auto* e : {&rec.start, &rec.stop, &rec.kernels_begin, &rec.kernels_end})
    if (*e != nullptr) {
      free_events_.push_back(*e);
      *e = nullptr;
    }
}

void gpu_device::on_done(void* user) {
  auto* ctx = static_cast<callback_ctx*>(user);
  ctx->deliver(ctx->hub.get(), ctx->ticket);
  delete ctx;
}

caf::expected<launch_result>
gpu_device::do_launch(uint32_t stream, uint64_t ticket, kernels::kernel_id id,
                      const kernels::kernel_args& args,
                      kernels::typed_inputs inputs,
                      const memory::owner_tag& owner) {
  stage_view single{id, args, {inputs.begin(), inputs.end()}, -1};
  return do_launch_chain(stream, ticket, {&single, 1}, owner);
}

caf::expected<launch_result>
gpu_device::do_launch_chain(uint32_t stream, uint64_t ticket,
                            std::span<const stage_view> chain,
                            const memory::owner_tag& owner) {
  if (auto err = drain_health_events())
    return err;
  if (lost_)
    return lost_;
  if (chain.empty())
    return make_error(errc::invalid_arguments, info().name + ": empty chain");
  if (records_.count(ticket) != 0)
    return make_error(errc::invalid_arguments, info().name + ": launch " +
                                                   std::to_string(ticket) +
                                                   " is already in flight");
  if (streams_.empty())
    return make_error(errc::device_lost,
                      info().name + ": no streams (a reset did not complete)");
  stream = std::min(stream, uint32_t(inflight_.size() - 1));
  auto s = streams_[stream];
  if (auto rc = rt_->set_device(ordinal_); rc.failed())
    return COHORT_GPU_FAIL(rc, "selecting the device");
  // Plan the device block and the staging block of the whole chain.
  chain_layout l;
  size_t dev = 0;
  size_t stage = 0;
  uint64_t previous = 0;
  auto previous_type = kernels::dtype::f32;
  for (auto& st : chain) {
    stage_layout sl;
    auto& la = sl.la;
    la.id = st.id;
    la.args = st.args;
    sl.registered = !kernels::is_builtin(st.id);
    sl.n_in = std::min<size_t>(st.inputs.size(),
                               sl.registered ? COHORT_MAX_INPUTS : 2);
    kernels::input_shape lens;
    for (size_t i = 0; i < sl.n_in; ++i) {
      sl.from_previous[i] = st.from_previous == int32_t(i);
      sl.in_len[i] = sl.from_previous[i] ? previous : st.inputs[i].size;
      sl.in_type[i] = sl.from_previous[i] ? previous_type : st.inputs[i].type;
      lens.push_back(sl.in_len[i]);
      if (i < 2)
        la.in_len[i] = sl.in_len[i];
      sl.resident[i] = !sl.from_previous[i] && (st.resident >> i & 1) != 0;
      if (sl.from_previous[i] || sl.resident[i])
        continue;
      sl.in_bytes[i] = sl.in_len[i] * kernels::element_size(sl.in_type[i]);
      sl.in_off[i] = dev;
      dev = align_up(dev + sl.in_bytes[i], device_align);
      sl.stage_in[i] = stage;
      stage = align_up(stage + sl.in_bytes[i], staging_align);
    }
    size_t scratch = 0;
    if (sl.registered) {
      auto* def = kernels::find(st.id);
      if (def == nullptr)
        return make_error(errc::kernel_fault,
                          info().name + ": no kernel has id " +
                              std::to_string(int(st.id)) + " in this process");
      if (st.sized) {
        // A node's kernel in a device host: the node worked out its sizes.
        if (st.out_elements > kernels::max_output_elements)
          return make_error(errc::invalid_arguments,
                            info().name + ": " + def->name + " would make " +
                                std::to_string(st.out_elements) +
                                " elements, more than an item may");
        sl.out_elements = st.out_elements;
        sl.threads = st.threads;
      } else if (def->sized_by_caller) {
        return make_error(errc::invalid_arguments,
                          info().name + ": a launch of " + def->name +
                              ", the node's kernel, came without its sizes");
      } else {
        sl.out_elements = kernels::output_elements(
            st.id, st.args, kernels::input_lengths{lens});
      }
      sl.out_type = def->signature.output.type;
    } else {
      if (auto rc = rt_->scratch_bytes(la, scratch); rc.failed())
        return COHORT_GPU_FAIL(rc, "sizing the scratch of " +
                                       std::string{kernels::name(st.id)});
      sl.out_elements = kernels::gpu::output_values(la);
    }
    l.out_indices =
        st.id == kernels::kernel_id::topk_cosine ? sl.out_elements : 0;
    sl.out_off = dev;
    dev = align_up(dev + sl.out_bytes(), device_align);
    sl.idx_off = dev;
    dev = align_up(dev + l.out_indices * sizeof(int64_t), device_align);
    sl.scratch_off = dev;
    dev = align_up(dev + scratch, device_align);
    la.scratch_bytes = scratch;
    previous = sl.out_elements;
    previous_type = sl.out_type;
    l.stages.push_back(sl);
  }
  auto& final_stage = l.stages.back();
  l.device_total = std::max(dev, device_align);
  l.stage_out = stage;
  stage = align_up(stage + final_stage.out_bytes(), staging_align);
  l.stage_idx = stage;
  l.stage_total =
      std::max(stage + l.out_indices * sizeof(int64_t), staging_align);
  launch_record rec;
  rec.stream = stream;
  rec.out_values = final_stage.out_elements;
  rec.out_type = final_stage.out_type;
  rec.out_indices = l.out_indices;
  rec.stage_out = l.stage_out;
  rec.stage_idx = l.stage_idx;
  auto block =
      memory_->allocate(l.device_total, memory::stream_ref{stream}, owner);
  if (!block) {
    // A sticky error met while growing the pool loses the device.
    if (code_of(block.error()) == errc::device_lost && !lost_)
      lost_ = block.error();
    return block.error();
  }
  rec.block = *block;
  rec.block_bytes = l.device_total;
  result rc;
  rec.staging = staging_.acquire(l.stage_total, rc);
  if (rec.staging.data == nullptr) {
    release(rec, false);
    if (!rc.failed())
      rc.code = status::out_of_memory;
    return COHORT_GPU_FAIL(rc, "pinning " + std::to_string(l.stage_total) +
                                   " bytes of staging memory");
  }
  // From here on work may be queued on the stream: a failure waits for it
  // before releasing the buffers.
  auto abort = [&](result rc, std::string what, int line) {
    auto err = fail(rc, what, line);
    if (!lost_)
      release(rec, true);
    return err;
  };
  for (auto* e : {&rec.start, &rec.stop})
    if (auto err = event(*e, __LINE__)) {
      release(rec, false);
      return err;
    }
  if (time_copies_)
    for (auto* e : {&rec.kernels_begin, &rec.kernels_end})
      if (auto err = event(*e, __LINE__)) {
        release(rec, false);
        return err;
      }
  if (rc = rt_->event_record(rec.start, s); rc.failed())
    return abort(rc, "recording the start event", __LINE__);
  void* previous_out = nullptr;
  for (size_t j = 0; j < l.stages.size(); ++j) {
    auto& sl = l.stages[j];
    auto& la = sl.la;
    const void* in_ptr[COHORT_MAX_INPUTS] = {};
    for (size_t i = 0; i < sl.n_in; ++i) {
      if (sl.from_previous[i]) {
        in_ptr[i] = previous_out;
        continue;
      }
      if (sl.resident[i]) {
        in_ptr[i] = chain[j].inputs[i].data;
        continue;
      }
      auto* staged = at<char>(rec.staging.data, sl.stage_in[i]);
      if (sl.in_bytes[i] > 0)
        std::memcpy(staged, chain[j].inputs[i].data, sl.in_bytes[i]);
      auto* dst = at<char>(rec.block, sl.in_off[i]);
      in_ptr[i] = dst;
      if (sl.in_bytes[i] > 0)
        if (rc = rt_->copy_to_device(dst, staged, sl.in_bytes[i], s);
            rc.failed())
          return abort(rc,
                       "copying input " + std::to_string(i) + " to the device",
                       __LINE__);
    }
    // The copies in are enqueued: the kernels begin.
    if (j == 0 && rec.kernels_begin != nullptr)
      if (rc = rt_->event_record(rec.kernels_begin, s); rc.failed())
        return abort(rc, "recording the kernels' begin event", __LINE__);
    auto* out = at<char>(rec.block, sl.out_off);
    if (sl.registered) {
      cohort_gpu_call call{};
      for (size_t i = 0; i < sl.n_in; ++i) {
        call.inputs[i] = in_ptr[i];
        call.lengths[i] = sl.in_len[i];
        call.dtypes[i] = int32_t(sl.in_type[i]);
      }
      call.input_count = uint32_t(sl.n_in);
      call.output = out;
      call.output_length = sl.out_elements;
      call.output_dtype = int32_t(sl.out_type);
      call.alpha = la.args.alpha;
      call.m = la.args.m;
      call.n = la.args.n;
      call.k = la.args.k;
      call.top_k = la.args.top_k;
      if (auto err = launch_registered(la.id, la.args, call, s, sl.threads)) {
        if (!lost_)
          release(rec, true);
        return err;
      }
      previous_out = out;
      continue;
    }
    for (size_t i = 0; i < std::min<size_t>(sl.n_in, 2); ++i)
      la.in[i] = static_cast<const float*>(in_ptr[i]);
    la.out = reinterpret_cast<float*>(out);
    la.out_indices = la.id == kernels::kernel_id::topk_cosine
                         ? at<int64_t>(rec.block, sl.idx_off)
                         : nullptr;
    la.scratch =
        la.scratch_bytes > 0 ? at<char>(rec.block, sl.scratch_off) : nullptr;
    if (rc = rt_->launch(la, s); rc.failed())
      return abort(rc, "launching " + std::string{kernels::name(la.id)},
                   __LINE__);
    previous_out = out;
  }
  if (rec.kernels_end != nullptr)
    if (rc = rt_->event_record(rec.kernels_end, s); rc.failed())
      return abort(rc, "recording the kernels' end event", __LINE__);
  if (final_stage.out_bytes() > 0)
    if (rc = rt_->copy_to_host(at<char>(rec.staging.data, l.stage_out),
                               previous_out, final_stage.out_bytes(), s);
        rc.failed())
      return abort(rc, "copying the output to the host", __LINE__);
  if (l.out_indices > 0)
    if (rc = rt_->copy_to_host(at<char>(rec.staging.data, l.stage_idx),
                               final_stage.la.out_indices,
                               l.out_indices * sizeof(int64_t), s);
        rc.failed())
      return abort(rc, "copying the indices to the host", __LINE__);
  if (rc = rt_->event_record(rec.stop, s); rc.failed())
    return abort(rc, "recording the stop event", __LINE__);
  auto* ctx = new callback_ctx{hub_,
                               [](void* hub, uint64_t t) {
                                 auto* h = static_cast<callback_hub*>(hub);
                                 std::lock_guard<std::mutex> guard{h->mtx};
                                 if (h->owner != nullptr)
                                   h->owner->notify_completion(t);
                               },
                               ticket};
  if (rc = rt_->on_stream_done(s, &gpu_device::on_done, ctx); rc.failed()) {
    delete ctx;
    return abort(rc, "enqueuing the completion callback", __LINE__);
  }
  ++inflight_[stream];
  records_.emplace(ticket, std::move(rec));
  launch_result res;
  res.pending = true;
  return res;
}

caf::expected<launch_result> gpu_device::do_collect(uint64_t ticket) {
  auto i = records_.find(ticket);
  if (i == records_.end())
    return make_error(errc::invalid_arguments, info().name + ": no launch " +
                                                   std::to_string(ticket) +
                                                   " in flight");
  auto rec = std::move(i->second);
  records_.erase(i);
  --inflight_[rec.stream];
  if (lost_) {
    free_on_numa(rec.staging.data, rec.staging.capacity);
    return lost_;
  }
  rt_->set_device(ordinal_);
  int64_t ns = 0;
  if (auto rc = rt_->event_elapsed_ns(rec.start, rec.stop, ns); rc.failed()) {
    auto err = COHORT_GPU_FAIL(rc, "timing launch " + std::to_string(ticket));
    if (!lost_)
      release(rec, true);
    else
      free_on_numa(rec.staging.data, rec.staging.capacity);
    return err;
  }
  launch_result res;
  res.device_time = std::chrono::nanoseconds{ns};
  // Its copies apart, when they were timed (a failed reading leaves them 0:
  // the launch itself is fine).
  if (rec.kernels_begin != nullptr && rec.kernels_end != nullptr) {
    int64_t in = 0, out = 0;
    if (!rt_->event_elapsed_ns(rec.start, rec.kernels_begin, in).failed() &&
        !rt_->event_elapsed_ns(rec.kernels_end, rec.stop, out).failed()) {
      in = std::clamp<int64_t>(in, 0, ns);
      res.copy_in = std::chrono::nanoseconds{in};
      res.copy_out =
          std::chrono::nanoseconds{std::clamp<int64_t>(out, 0, ns - in)};
    }
  }
  if (rec.out_type == kernels::dtype::f32) {
    auto* values = at<float>(rec.staging.data, rec.stage_out);
    res.output.values.assign(values, values + rec.out_values);
  } else {
    auto* raw = at<uint8_t>(rec.staging.data, rec.stage_out);
    res.output.type = rec.out_type;
    res.output.raw.assign(raw, raw + rec.out_values *
                                         kernels::element_size(rec.out_type));
  }
  auto* idx = at<int64_t>(rec.staging.data, rec.stage_idx);
  res.output.indices.assign(idx, idx + rec.out_indices);
  release(rec, false);
  return res;
}

caf::error gpu_device::drain_health_events() {
  std::vector<health::gpu_event> events;
  {
    std::lock_guard<std::mutex> guard{events_mtx_};
    events.swap(events_);
  }
  for (auto& ev : events) {
    using kind = health::gpu_event::kind;
    // Xid 79 (fallen off the bus) comes as a loss, with its code.
    if (ev.xid != 0)
      note_xid(ev.xid);
    // An Xid acts as the policy says; a GPU that is gone (a loss, an
    // uncorrectable ECC error) is at least reset whatever its code's rule.
    auto action = ev.xid != 0 ? xid_action_of(ev.xid) : xid_action::degrade;
    if (ev.what == kind::lost || ev.what == kind::ecc_uncorrectable)
      action = std::max(action, xid_action::reset);
    auto reported = std::string{opts_.monitor->library()} + " reported " +
                    (ev.xid != 0 ? "Xid " + std::to_string(ev.xid)
                     : ev.what == kind::ecc_corrected
                         ? std::string{"a corrected ECC error"}
                         : std::string{"a device-level error"}) +
                    (ev.detail.empty() ? "" : ": " + ev.detail);
    switch (action) {
    case xid_action::ignore:
      break;
    case xid_action::degrade:
      warnings_.push_back(std::move(reported));
      break;
    case xid_action::reset:
      if (!lost_)
        lost_ = make_error(errc::device_lost, info().name + ": " + reported);
      break;
    case xid_action::isolate:
      // Isolation wins over a reset asked for by an earlier event.
      if (code_of(lost_) != errc::device_offline)
        lost_ = isolated_by_xid(reported);
      break;
    }
  }
  return lost_;
}

caf::error gpu_device::do_health() {
  if (auto err = drain_health_events())
    return err;
  // Sticky errors surface on any later call; this catches them while no
  // launch is being made.
  rt_->set_device(ordinal_);
  if (auto rc = rt_->last_error(); rc.failed() && is_sticky(rc.code))
    return COHORT_GPU_FAIL(rc, "checking the device");
  // A kernel's fault shows on its stream (and may keep its completion
  // callback from ever running).
  for (auto s : streams_)
    if (auto rc = rt_->stream_query(s); rc.failed() && is_sticky(rc.code))
      return COHORT_GPU_FAIL(rc, "polling a stream");
  return caf::none;
}

caf::error gpu_device::copy_in(void* dst, const void* src, size_t bytes) {
  return copy_now(dst, src, bytes, true);
}

caf::error gpu_device::copy_out(void* dst, const void* src, size_t bytes) {
  return copy_now(dst, src, bytes, false);
}

caf::error gpu_device::copy_now(void* dst, const void* src, size_t bytes,
                                bool to_device) {
  // Synchronous on stream 0, as objects are ordered there (store_object).
  if (lost_)
    return lost_;
  if (streams_.empty())
    return make_error(errc::device_lost,
                      info().name + ": no streams (a reset did not complete)");
  if (auto rc = rt_->set_device(ordinal_); rc.failed())
    return COHORT_GPU_FAIL(rc, "selecting the device");
  auto rc = to_device ? rt_->copy_to_device(dst, src, bytes, streams_[0])
                      : rt_->copy_to_host(dst, src, bytes, streams_[0]);
  if (!rc.failed())
    rc = rt_->stream_synchronize(streams_[0]);
  if (rc.failed())
    return fail(rc,
                to_device ? "copying an object to the device"
                          : "copying an object to the host",
                __LINE__);
  return caf::none;
}

void gpu_device::do_release_memory() {
  // Given up (its actor gone): the launches it still holds go with its
  // memory's books, so that nothing is handed back to the pool later, at
  // the latest when the device is destroyed. Their staging and events go
  // back to the host now; the device memory is forgotten with the books.
  for (auto& [ticket, rec] : records_) {
    rec.block = nullptr;
    release(rec, false);
  }
  records_.clear();
  if (memory_)
    memory_->reset(true);
}

caf::error gpu_device::do_reset() {
  {
    std::lock_guard<std::mutex> guard{events_mtx_};
    events_.clear();
  }
  rt_->set_device(ordinal_);
  // A reset destroys the context and everything in it: device memory,
  // streams, events and pinned registrations.
  auto rc = rt_->device_reset();
  for (auto& [ticket, rec] : records_)
    free_on_numa(rec.staging.data, rec.staging.capacity);
  records_.clear();
  staging_.clear(false);
  free_events_.clear();
  streams_.clear();
  // Modules went with the context too: loaded again on next use.
  modules_.clear();
  // The pool's slabs and fence events went with the context.
  memory_->reset(true);
  auto was_lost = std::move(lost_);
  lost_ = caf::none;
  if (rc.failed()) {
    auto err = fail(rc, "resetting the device", __LINE__);
    lost_ = err;
    return err;
  }
  if (auto err = create_streams(__LINE__)) {
    lost_ = err;
    return err;
  }
  // Probe: a context that still fails a small allocation and copy is not
  // back (sticky errors need a new process).
  void* probe = nullptr;
  if (rc = rt_->malloc_device(probe, 4096); rc.failed())
    return fail(rc, "probing the reset device", __LINE__);
  rc = rt_->zero_device(probe, 4096, streams_[0]);
  if (!rc.failed())
    rc = rt_->stream_synchronize(streams_[0]);
  rt_->free_device(probe);
  if (rc.failed()) {
    auto err = fail(rc, "probing the reset device", __LINE__);
    if (is_sticky(rc.code))
      return make_error(errc::context_poisoned, describe(err));
    return err;
  }
  return caf::none;
}

std::vector<std::string> gpu_device::do_take_warnings() {
  drain_health_events();
  return std::exchange(warnings_, {});
}

} // namespace cohort::devices::gpu
