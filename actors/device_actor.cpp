#include "actors/device_actor.hpp"

#include <algorithm>
#include <stdexcept>

#include <caf/all.hpp>

#include "devices/memory/device_memory.hpp"
#include "devices/topology.hpp"
#include "kernels/registry.hpp"
#include "messages/errc.hpp"
#include "messages/output_buffer.hpp"

namespace cohort::actors {

namespace {

using clock = std::chrono::steady_clock;

// Completions closer than this are delivered at once instead of by timer.
constexpr auto timer_threshold = std::chrono::microseconds{100};

// device_offline: the Xid policy isolated the device (an operator's offline
// never comes back as a launch's error).
bool is_device_loss(const caf::error& err) {
  auto code = code_of(err);
  return code == errc::device_lost || code == errc::kernel_timeout ||
         code == errc::device_offline;
}

using self_ptr = device_actor::stateful_pointer<device_state>;

std::chrono::milliseconds timeout_of(const device_actor_config& cfg,
                                     kernels::kernel_id k) {
  auto i = static_cast<size_t>(k);
  if (i < cfg.kernel_timeouts.size() && cfg.kernel_timeouts[i].count() > 0)
    return cfg.kernel_timeouts[i];
  return cfg.kernel_timeout;
}

// A chain runs its stages one after the other: it gets their sum.
std::chrono::milliseconds timeout_of(const device_actor_config& cfg,
                                     const work_item& item) {
  auto t = timeout_of(cfg, item.kernel);
  for (auto& st : item.then)
    t += timeout_of(cfg, st.kernel);
  return t;
}

// True while a launch older than `p` is still pending on its stream: `p`
// has not started yet.
bool queued_behind(const device_state& st,
                   const device_state::pending_launch& p) {
  for (auto& [ticket, other] : st.pending)
    if (other.stream == p.stream && other.seq < p.seq)
      return true;
  return false;
}

// A launch on `stream` ended: the oldest one still pending there has the
// stream now, and its watchdog counts from here.
void stamp_next_start(device_state& st, uint32_t stream,
                      clock::time_point now) {
  device_state::pending_launch* next = nullptr;
  for (auto& [ticket, p] : st.pending)
    if (p.stream == stream && (next == nullptr || p.seq < next->seq))
      next = &p;
  if (next != nullptr && next->started == clock::time_point{})
    next->started = now;
}

// Points input `i` of `stage` at the device's copy of the object `in`
// names. The balancer sends an item here only with copies of its objects
// here (the others it replaced by host copies).
caf::error resolve_object(const devices::device& dev, const host_buffer& in,
                          devices::stage_view& stage, size_t i) {
  auto* obj = dev.find_object(in.object());
  if (obj == nullptr)
    return make_error(errc::object_lost, dev.info().name + ": object " +
                                             std::to_string(in.object()) +
                                             " is not here");
  if (obj->data.size != in.size() || obj->data.type != in.type())
    return make_error(errc::invalid_arguments,
                      dev.info().name + ": object " +
                          std::to_string(in.object()) +
                          " is not the size or type the item names");
  stage.inputs[i] = obj->data;
  stage.resident |= uint32_t{1} << i;
  return caf::none;
}

// A kernel of `req` that the node sent (kernel_code) runs here only if it
// was registered, on a GPU of its backend, with the sizes the node worked
// out; a kernel with no id here (the node sent none) does not run either
// (unknown_kernel: the balancer places its items elsewhere, and no more of
// them here).
caf::error check_kernels(const device_state& st, const run_request& req) {
  auto& info = st.dev->info();
  auto stages = 1 + req.item.then.size();
  if (!req.sizes.empty() && req.sizes.size() != 2 * stages)
    return make_error(errc::invalid_arguments,
                      info.name + ": item " + std::to_string(req.item.id) +
                          " came with sizes for " +
                          std::to_string(req.sizes.size() / 2) +
                          " stages, it has " + std::to_string(stages));
  auto check = [&](kernels::kernel_id id) -> caf::error {
    if (auto i = st.refused_kernels.find(uint8_t(id));
        i != st.refused_kernels.end())
      return make_error(errc::unknown_kernel,
                        info.name + ": the node's kernel " +
                            std::to_string(int(id)) +
                            " could not be registered here: " + i->second);
    auto* def = kernels::find(id);
    if (def == nullptr)
      return make_error(errc::unknown_kernel,
                        info.name + ": no kernel has id " +
                            std::to_string(int(id)) + " in this process");
    if (!def->sized_by_caller)
      return caf::none;
    if (info.kind != device_kind::cuda_gpu && info.kind != device_kind::hip_gpu)
      return make_error(errc::unknown_kernel,
                        info.name + ": " + def->name +
                            " is the node's kernel: only its GPU code is "
                            "here");
    if (req.sizes.empty())
      return make_error(errc::invalid_arguments,
                        info.name + ": a launch of " + def->name +
                            ", the node's kernel, came without its sizes");
    return caf::none;
  };
  if (auto err = check(req.item.kernel))
    return err;
  for (auto& stage : req.item.then)
    if (auto err = check(stage.kernel))
      return err;
  return caf::none;
}

// Registers the node's kernels in this process (kernel_code), at the node's
// ids; each that cannot be is kept in `refused` with why.
void register_node_kernels(const std::vector<kernel_code>& codes,
                           std::map<uint8_t, std::string>& refused) {
  for (auto& c : codes) {
    kernels::kernel_def def;
    def.name = c.name;
    def.origin = c.origin;
    def.sized_by_caller = true;
    for (size_t i = 0; i < c.inputs.size(); ++i)
      def.signature.inputs.push_back(
          {"input" + std::to_string(i), kernels::dtype(c.inputs[i])});
    def.signature.output = {"out", kernels::dtype(c.output)};
    auto kind = kernels::gpu_code::format(c.format);
    auto& code =
        kind == kernels::gpu_code::format::hip_code_object ? def.hip : def.cuda;
    code.kind = kind;
    code.image = std::make_shared<const std::vector<uint8_t>>(c.image);
    code.function = c.function;
    code.block = c.block;
    if (auto why = kernels::register_node_kernel(kernels::kernel_id(c.id),
                                                 std::move(def));
        !why.empty())
      refused[c.id] = std::move(why);
    else
      refused.erase(c.id);
  }
}

// Launches an item: one kernel, or its chain of kernels whose intermediate
// outputs stay on the device; inputs naming objects are read where they
// are. Its device memory is tagged with its owner.
caf::expected<devices::launch_result>
run_item(devices::device& dev, uint32_t stream, const run_request& req) {
  auto& item = req.item;
  devices::memory::owner_tag owner;
  if (dev.memory() != nullptr)
    owner = {item.tenant, item.id, std::string{kernels::name(item.kernel)}};
  bool objects = item.reads_objects();
  if (item.then.empty() && !objects && req.sizes.empty())
    return dev.launch(stream, req.ticket, item.kernel, item.args,
                      item.typed_views(), owner);
  auto views = item.typed_views();
  std::vector<devices::stage_view> chain;
  chain.push_back({item.kernel, item.args, {views.begin(), views.end()}, -1});
  for (auto& st : item.then)
    chain.push_back({st.kernel, st.args, typed_stage_views(st, {}),
                     int32_t(st.input_slot)});
  // Sizes the node worked out (check_kernels saw their count).
  for (size_t j = 0; j < chain.size() && !req.sizes.empty(); ++j) {
    chain[j].sized = true;
    chain[j].out_elements = req.sizes[2 * j];
    chain[j].threads = req.sizes[2 * j + 1];
  }
  if (objects) {
    for (size_t i = 0; i < item.inputs.size(); ++i)
      if (item.inputs[i].object() != 0)
        if (auto err = resolve_object(dev, item.inputs[i], chain[0], i))
          return err;
    for (size_t j = 0; j < item.then.size(); ++j) {
      auto& st = item.then[j];
      for (size_t i = 0; i < st.inputs.size(); ++i)
        if (st.inputs[i].object() != 0) {
          // The previous output takes slot input_slot; the others follow
          // in order around it.
          auto slot = i < st.input_slot ? i : i + 1;
          if (auto err = resolve_object(dev, st.inputs[i], chain[j + 1], slot))
            return err;
        }
    }
  }
  return dev.launch_chain(stream, req.ticket, chain, owner);
}

// An item kept on the device: its output becomes object `keep_as` there.
// When the device's memory refuses it, the output goes back as usual and
// the balancer keeps the object in host memory.
void keep_output(devices::device& dev, work_done& done, uint64_t keep_as,
                 const std::string& tenant) {
  if (keep_as == 0 || dev.memory() == nullptr)
    return;
  auto view = done.output.view();
  if (dev.store_object(keep_as, view,
                       {tenant, 0, "object " + std::to_string(keep_as)}))
    return;
  done.kept_as = keep_as;
  done.kept_elements = view.size;
  done.output.values = {};
  done.output.raw = {};
  done.output.indices = {};
}

// `t` on the steady clock, in ns (work_done::finished_ns).
int64_t steady_ns(clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             t.time_since_epoch())
      .count();
}

// Time since `arrived` (at least 1 ns: 0 says "not measured").
int64_t held_since(clock::time_point arrived) {
  return std::max<int64_t>(1,
                           std::chrono::duration_cast<std::chrono::nanoseconds>(
                               clock::now() - arrived)
                               .count());
}

// Runs one request. A launch that finishes at once goes to `ready`; a modeled
// or hung one waits in `pending`; a failure the item may survive elsewhere is
// reported at once. Returns the error that ends the device, if any.
caf::error launch_one(self_ptr self, run_request& req,
                      clock::time_point arrived,
                      std::vector<work_done>& ready) {
  auto& st = self->state;
  auto idx = st.cfg.index;
  if (auto err = st.dev->health())
    return err;
  // Earliest-free stream: launches on one stream run in order. GPU devices
  // pick their least busy stream themselves.
  auto s = std::min_element(st.stream_free_at.begin(), st.stream_free_at.end());
  auto stream = st.dev->pick_stream(uint32_t(s - st.stream_free_at.begin()));
  if (req.time_copies != st.time_copies) {
    st.time_copies = req.time_copies;
    st.dev->time_copies(st.time_copies);
  }
  auto refused = check_kernels(st, req);
  auto res = refused ? caf::expected<devices::launch_result>{std::move(refused)}
                     : run_item(*st.dev, stream, req);
  if (!res) {
    // Memory refusals (hard or soft OOM) and kernel faults: the item may run
    // elsewhere; the balancer decides.
    if (is_device_loss(res.error()))
      return res.error();
    self->send(st.listener, failed_atom::value, idx, req.ticket, res.error());
    return caf::none;
  }
  work_done done{
      req.ticket, std::move(res->output),
      int64_t(double(res->device_time.count()) * res->reported_factor)};
  done.stream = stream;
  done.copy_in_ns = res->copy_in.count();
  done.copy_out_ns = res->copy_out.count();
  auto now = clock::now();
  auto hold = [&](std::chrono::milliseconds timeout) {
    device_state::pending_launch p;
    p.done = std::move(done);
    p.stream = stream;
    p.seq = ++st.next_seq;
    p.timeout = timeout;
    p.keep_as = req.keep_as;
    p.arrived = arrived;
    if (req.keep_as != 0)
      p.tenant = req.item.tenant;
    st.pending.emplace(req.ticket, std::move(p));
  };
  if (res->pending || res->hung) {
    // Enqueued on a GPU (its completion arrives as a message) or hung. The
    // watchdog counts from the launch's start: on a simulated GPU when its
    // stream gets to it; on a GPU it re-arms while an older launch holds the
    // stream.
    auto start = st.dev->info().simulated ? std::max(now, *s) : now;
    auto timeout = timeout_of(st.cfg, req.item);
    hold(timeout);
    auto& p = st.pending.at(req.ticket);
    if (!queued_behind(st, p))
      p.started = now;
    self->delayed_send(self, (start - now) + timeout, watchdog_atom::value,
                       req.ticket);
    return caf::none;
  }
  auto finished = now;
  if (st.dev->info().simulated) {
    // Modeled time: the launch finishes when its stream gets to it.
    auto start = std::max(now, *s);
    auto finish = start + res->device_time;
    *s = finish;
    finished = finish;
    if (finish - now > timer_threshold) {
      // It holds its device memory until then.
      auto timeout = timeout_of(st.cfg, req.item);
      hold(timeout);
      self->delayed_send(self, finish - now, complete_atom::value, req.ticket);
      // A launch modeled to run past its timeout hangs as a real one would.
      if (res->device_time > timeout)
        self->delayed_send(self, (start - now) + timeout, watchdog_atom::value,
                           req.ticket);
      return caf::none;
    }
  }
  st.dev->finish(req.ticket);
  keep_output(*st.dev, done, req.keep_as, req.item.tenant);
  done.finished_ns = steady_ns(finished);
  ready.push_back(std::move(done));
  return caf::none;
}

} // namespace

device_actor::behavior_type
device_impl(device_actor::stateful_pointer<device_state> self,
            std::shared_ptr<devices::device> dev, device_listener listener,
            device_actor_config cfg) {
  auto& st = self->state;
  st.dev = std::move(dev);
  st.listener = std::move(listener);
  st.cfg = cfg;
  st.stream_free_at.assign(std::max(1u, st.dev->info().streams), clock::now());
  st.dev->set_kernel_timeouts(cfg.kernel_timeout, cfg.kernel_timeouts);
  // An earlier actor of the device may have left copy timing on.
  st.dev->time_copies(false);
  // Objects a previous actor of the device kept were forgotten by the
  // balancer when it ended: their memory goes back now.
  st.dev->drop_all_objects();
  // Asynchronous devices signal completions from their runtime's threads;
  // the handler only posts a message (and none once this actor is gone).
  st.dev->on_completion([addr = self->address()](uint64_t ticket) {
    if (auto hdl = caf::actor_cast<caf::actor>(addr))
      caf::anon_send(hdl, complete_atom::value, ticket);
  });
  // A GPU's actor runs on its own thread, next to the GPU.
  if (cfg.bind_numa && st.dev->info().numa_node >= 0)
    devices::bind_thread_to_numa(st.dev->info().numa_node);
  self->delayed_send(self, cfg.health_interval, tick_atom::value);
  // A crash (an exception out of a handler) ends the actor with what it
  // said; the supervisor restarts it.
  self->set_exception_handler([](caf::scheduled_actor*,
                                 std::exception_ptr& eptr) -> caf::error {
    try {
      std::rethrow_exception(eptr);
    } catch (std::exception& e) {
      return caf::make_error(caf::sec::runtime_error,
                             std::string{"device actor crashed: "} + e.what());
    } catch (...) {
      return caf::make_error(caf::sec::runtime_error, "device actor crashed");
    }
  });
  return {
      [=](run_atom, std::vector<run_request>& batch) {
        auto& st = self->state;
        std::vector<work_done> ready;
        caf::error lost;
        auto arrived = clock::now();
        for (auto& req : batch)
          if ((lost = launch_one(self, req, arrived, ready)))
            break;
        if (!ready.empty()) {
          auto held = held_since(arrived);
          for (auto& done : ready)
            done.held_ns = held;
          self->send(st.listener, done_atom::value, st.cfg.index,
                     std::move(ready));
        }
        // What was not reached dies with the actor; the balancer re-places it.
        if (lost)
          self->quit(lost);
      },
      [=](complete_atom, uint64_t ticket) {
        auto& st = self->state;
        auto i = st.pending.find(ticket);
        if (i == st.pending.end())
          return;
        auto pending = std::move(i->second);
        st.pending.erase(i);
        if (st.dev->asynchronous())
          stamp_next_start(st, pending.stream, clock::now());
        if (!st.dev->asynchronous()) {
          st.dev->finish(ticket);
        } else {
          auto res = st.dev->collect(ticket);
          if (!res) {
            if (is_device_loss(res.error())) {
              self->quit(res.error());
              return;
            }
            self->send(st.listener, failed_atom::value, st.cfg.index, ticket,
                       res.error());
            return;
          }
          pending.done.output = std::move(res->output);
          pending.done.device_ns =
              int64_t(double(res->device_time.count()) * res->reported_factor);
          pending.done.copy_in_ns = res->copy_in.count();
          pending.done.copy_out_ns = res->copy_out.count();
        }
        keep_output(*st.dev, pending.done, pending.keep_as, pending.tenant);
        pending.done.held_ns = held_since(pending.arrived);
        pending.done.finished_ns = steady_ns(clock::now());
        self->send(st.listener, done_atom::value, st.cfg.index,
                   std::vector<work_done>{std::move(pending.done)});
      },
      [=](watchdog_atom, uint64_t ticket) {
        auto& st = self->state;
        auto i = st.pending.find(ticket);
        if (i == st.pending.end())
          return;
        if (st.dev->asynchronous()) {
          // Still waiting for its stream: look again a timeout later. Given
          // its stream late: it gets its full timeout from then.
          auto& p = i->second;
          auto now = clock::now();
          bool waits = queued_behind(st, p);
          if (!waits && p.started == clock::time_point{})
            p.started = now;
          auto rearm =
              waits ? p.timeout
                    : std::chrono::duration_cast<std::chrono::milliseconds>(
                          p.started + p.timeout - now);
          if (rearm.count() > 0) {
            self->delayed_send(self, rearm, watchdog_atom::value, ticket);
            return;
          }
        }
        // A fault the device can name beats "it hangs".
        if (auto err = st.dev->health()) {
          self->quit(err);
          return;
        }
        self->quit(make_error(errc::kernel_timeout,
                              st.dev->info().name + ": a launch ran past its " +
                                  std::to_string(i->second.timeout.count()) +
                                  " ms kernel timeout; the device hangs"));
      },
      [=](tick_atom) {
        auto& st = self->state;
        if (auto err = st.dev->health()) {
          self->quit(err);
          return;
        }
        if (auto warnings = st.dev->take_warnings();
            !warnings.empty() && st.cfg.health)
          self->send(st.cfg.health, health_atom::value, st.cfg.index,
                     std::move(warnings));
        // Trimming gives slabs back to the driver, which waits for the whole
        // device (cudaFree): only when nothing runs here.
        if (auto* mem = self->state.dev->memory();
            mem && self->state.pending.empty())
          mem->maintain();
        self->delayed_send(self, self->state.cfg.health_interval,
                           tick_atom::value);
      },
      [=](crash_atom) {
        throw std::runtime_error(self->state.dev->info().name +
                                 ": device actor crashed (injected)");
      },
      [=](info_atom) { return self->state.dev->info(); },
      [=](memory_atom) {
        if (auto* mem = self->state.dev->memory())
          return mem->snapshot();
        memory_snapshot none;
        none.device = self->state.dev->info().name;
        return none;
      },
      [=](store_atom, uint64_t id, host_buffer& data,
          std::string& tenant) -> caf::result<uint64_t> {
        auto& dev = *self->state.dev;
        if (data.object() != 0)
          return make_error(errc::invalid_arguments,
                            "an object is stored from host data");
        if (auto err = dev.store_object(
                id, data.view(), {tenant, 0, "object " + std::to_string(id)}))
          return err;
        return dev.find_object(id)->block_bytes;
      },
      [=](read_atom, uint64_t id) -> caf::result<host_buffer> {
        auto out = self->state.dev->read_object(id);
        if (!out)
          return out.error();
        return to_host_buffer(std::move(*out));
      },
      [=](drop_atom, uint64_t id) { self->state.dev->drop_object(id); },
      [=](share_atom, uint64_t id) -> caf::result<share_handle> {
        auto& dev = *self->state.dev;
        auto r = dev.share_object(id);
        if (!r)
          return r.error();
        share_handle h;
        using kind = devices::memory::shared_region::kind;
        h.kind = r->how == kind::memfd      ? "memfd"
                 : r->how == kind::cuda_ipc ? "cuda_ipc"
                                            : "hip_ipc";
        h.fd = r->fd;
        if (r->how != kind::memfd)
          h.ipc.assign(r->ipc.begin(), r->ipc.end());
        h.offset = r->offset;
        h.region_bytes = r->region_bytes;
        h.device = dev.info().name;
        h.pci_bus_id = dev.info().pci_bus_id;
        return h;
      },
      [=](code_atom, std::vector<kernel_code>& codes) {
        register_node_kernels(codes, self->state.refused_kernels);
      },
  };
}

} // namespace cohort::actors
