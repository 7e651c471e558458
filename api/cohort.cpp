// The public API (include/cohort/cohort.hpp) over the runtime facade
// (actors/runtime.hpp): conversions between the public types and the
// internal ones, and the actor system each public runtime owns.
#include "cohort/cohort.hpp"

#include <array>
#include <thread>
#include <utility>

#include <caf/actor_system.hpp>

#include "actors/runtime.hpp"
#include "config/bounds.hpp"
#include "kernels/catalog.hpp"
#include "kernels/registry.hpp"
#include "messages/convert.hpp"
#include "messages/errc.hpp"
#include "messages/system_config.hpp"

namespace cohort {

static_assert(uint8_t(kernel::axpy) == uint8_t(kernels::kernel_id::axpy));
static_assert(uint8_t(kernel::topk_cosine) ==
              uint8_t(kernels::kernel_id::topk_cosine));
static_assert(sizeof(kernel_args) == sizeof(kernels::kernel_args));
static_assert(uint8_t(dtype::u8) == uint8_t(kernels::dtype::u8) &&
              uint8_t(dtype::i64) == uint8_t(kernels::dtype::i64));

namespace detail {

// One object handle, shared by every copy of an object_ref (and by the
// inputs that read it): the last copy releases it at its runtime.
struct object_state {
  uint64_t id = 0;
  std::string tenant;
  dtype type = dtype::f32;
  size_t size = 0;
  std::shared_ptr<actors::detail::object_home> home;

  ~object_state() {
    if (home)
      home->drop(id);
  }
};

struct object_access {
  static object_ref make(object_info&& info,
                         std::shared_ptr<actors::detail::object_home> home) {
    auto st = std::make_shared<object_state>();
    st->id = info.id;
    st->tenant = std::move(info.tenant);
    st->type = static_cast<dtype>(info.type);
    st->size = info.elements;
    st->home = std::move(home);
    object_ref out;
    out.state_ = std::move(st);
    return out;
  }
  static const std::shared_ptr<const object_state>& state(const object_ref& r) {
    return r.state_;
  }
};

// Moves slots between public futures and internal ones.
struct slot_access {
  static void* take(actors::work_future&& f) {
    return std::exchange(f.slot_, nullptr);
  }
  static actors::detail::work_slot* slot(const future& f) {
    return static_cast<actors::detail::work_slot*>(f.slot_);
  }
  static actors::work_future adopt(future& f) {
    return actors::work_future{static_cast<actors::detail::work_slot*>(
        std::exchange(f.slot_, nullptr))};
  }
  // An internal future on the same slot, holding a reference of its own.
  static actors::work_future share(const future& f) {
    auto* s = slot(f);
    s->refs.fetch_add(1, std::memory_order_relaxed);
    return actors::work_future{s};
  }
  static future make(actors::work_future&& f) {
    future out;
    out.slot_ = take(std::move(f));
    return out;
  }
  static ticket make(actors::work_ticket&& t) {
    ticket out;
    out.slot_ = std::exchange(t.slot_, nullptr);
    return out;
  }
  static actors::detail::work_slot* slot(const ticket& t) {
    return static_cast<actors::detail::work_slot*>(t.slot_);
  }
  // An internal ticket on the same slot, holding a reference of its own.
  static actors::work_ticket share(const ticket& t) {
    auto* s = slot(t);
    s->refs.fetch_add(1, std::memory_order_relaxed);
    return actors::work_ticket{s};
  }
};

} // namespace detail

using home_ptr = std::shared_ptr<actors::detail::object_home>;

namespace {

using detail::slot_access;

// A buffer of `count` elements of `type` at `data`, kept alive by `owner`.
buffer typed_buffer(std::shared_ptr<const void> owner, const void* data,
                    size_t count, dtype type) {
  switch (type) {
  case dtype::f64:
    return buffer::wrap(static_cast<const double*>(data), count,
                        std::move(owner));
  case dtype::i32:
    return buffer::wrap(static_cast<const int32_t*>(data), count,
                        std::move(owner));
  case dtype::i64:
    return buffer::wrap(static_cast<const int64_t*>(data), count,
                        std::move(owner));
  case dtype::u8:
    return buffer::wrap(static_cast<const uint8_t*>(data), count,
                        std::move(owner));
  default:
    return buffer::wrap(static_cast<const float*>(data), count,
                        std::move(owner));
  }
}

outcome to_outcome(caf::expected<work_result>&& x, const home_ptr& home) {
  if (!x) {
    auto code = code_of(x.error());
    // Errors of another category (CAF's own) have no errc of their own.
    return outcome{code != errc::none ? code : errc::io_error,
                   describe(x.error())};
  }
  result r;
  r.id = x->id;
  if (x->output.type == kernels::dtype::f32) {
    r.values = buffer{std::move(x->output.values)};
  } else {
    auto held =
        std::make_shared<const std::vector<uint8_t>>(std::move(x->output.raw));
    r.values =
        typed_buffer(held, held->data(),
                     held->size() / kernels::element_size(x->output.type),
                     static_cast<dtype>(x->output.type));
  }
  if (!x->output.indices.empty())
    r.indices = buffer{std::move(x->output.indices)};
  r.device = std::move(x->device);
  r.attempts = x->attempts;
  r.fallback = x->fallback;
  if (x->object.id != 0 && home)
    r.object = detail::object_access::make(std::move(x->object), home);
  return outcome{std::move(r)};
}

host_buffer to_host(const buffer& b) {
  if (b.object() != 0)
    return host_buffer::object(
        b.object(), b.size(), static_cast<kernels::dtype>(b.type()), b.owner());
  return host_buffer{b.owner(), b.data(), b.size(),
                     static_cast<kernels::dtype>(b.type())};
}

// Why `b` may not be an input of an item of the runtime with `home`: it
// names another runtime's object.
std::string foreign_object(const buffer& b, const home_ptr& home) {
  if (b.object() == 0)
    return {};
  auto* st = static_cast<const detail::object_state*>(b.owner().get());
  if (st == nullptr || st->home != home)
    return "an input names object " + std::to_string(b.object()) +
           " of another runtime";
  return {};
}

kernels::kernel_args to_args(const kernel_args& a) {
  kernels::kernel_args out;
  out.alpha = a.alpha;
  out.m = a.m;
  out.n = a.n;
  out.k = a.k;
  out.top_k = a.top_k;
  return out;
}

// The internal item, or why the public one cannot become one.
std::string to_item(work&& w, work_item& out, const home_ptr& home) {
  for (auto& b : w.inputs)
    if (auto why = foreign_object(b, home); !why.empty())
      return why;
  for (auto& st : w.then)
    for (auto& b : st.inputs)
      if (auto why = foreign_object(b, home); !why.empty())
        return why;
  out.id = w.id;
  out.tenant = std::move(w.tenant);
  out.kernel = static_cast<kernels::kernel_id>(w.kernel);
  out.args = to_args(w.args);
  out.inputs.reserve(w.inputs.size());
  for (auto& b : w.inputs)
    out.inputs.push_back(to_host(b));
  for (auto& st : w.then) {
    chained_stage c;
    c.kernel = static_cast<kernels::kernel_id>(st.kernel);
    c.args = to_args(st.args);
    for (auto& b : st.inputs)
      c.inputs.push_back(to_host(b));
    c.input_slot = st.input_slot;
    out.then.push_back(std::move(c));
  }
  out.gang = w.gang;
  out.keep_on_device = w.keep_on_device;
  out.priority = w.priority;
  return {};
}

// Why an item was refused before it was submitted (to_item's answer).
caf::error refusal(uint64_t id, const std::string& why) {
  return make_error(errc::invalid_arguments,
                    "item " + std::to_string(id) + ": " + why);
}

outcome refused(uint64_t id, const std::string& why) {
  return to_outcome(caf::expected<work_result>{refusal(id, why)}, nullptr);
}

[[noreturn]] void raise(const caf::error& err) {
  auto code = code_of(err);
  throw error{code != errc::none ? code : errc::io_error, describe(err)};
}

} // namespace

const char* version() {
  return COHORT_VERSION;
}

uint64_t object_ref::id() const {
  return state_ ? state_->id : 0;
}

const std::string& object_ref::tenant() const {
  static const std::string none;
  return state_ ? state_->tenant : none;
}

dtype object_ref::type() const {
  return state_ ? state_->type : dtype::f32;
}

size_t object_ref::size() const {
  return state_ ? state_->size : 0;
}

buffer::buffer(const object_ref& obj) {
  auto& st = detail::object_access::state(obj);
  if (!st)
    throw error{errc::invalid_arguments,
                "invalid_arguments: a buffer of an empty object handle"};
  owner_ = st;
  size_ = st->size;
  type_ = st->type;
  object_ = st->id;
}

size_t element_size(dtype t) {
  return kernels::element_size(static_cast<kernels::dtype>(t));
}

const char* to_string(dtype t) {
  // The names are string literals: null-terminated.
  return kernels::name(static_cast<kernels::dtype>(t)).data();
}

const char* to_string(kernel k) {
  return kernels::name(static_cast<kernels::kernel_id>(k)).data();
}

std::optional<kernel> kernel_named(std::string_view name) {
  if (auto id = kernels::parse_kernel(name))
    return static_cast<kernel>(*id);
  return std::nullopt;
}

std::optional<kernel_signature> signature_of(kernel k) {
  auto* d = kernels::find(static_cast<kernels::kernel_id>(k));
  if (d == nullptr)
    return std::nullopt;
  auto param = [](const kernels::buffer_param& p) {
    return kernel_param{p.name, static_cast<dtype>(p.type)};
  };
  kernel_signature out;
  for (auto& p : d->signature.inputs)
    out.inputs.push_back(param(p));
  out.output = param(d->signature.output);
  out.scalars = d->signature.scalars;
  out.origin = d->origin;
  return out;
}

kernel register_kernel(kernel_definition def) {
  if (!def.cpu || !def.output_size)
    throw error{errc::invalid_arguments,
                "kernel '" + def.name + "': " +
                    (def.cpu ? "needs an output size rule (output_size)"
                             : "needs a CPU implementation (cpu)")};
  kernels::kernel_def d;
  d.name = def.name;
  for (auto& p : def.inputs)
    d.signature.inputs.push_back({p.name, static_cast<kernels::dtype>(p.type)});
  d.signature.output = {def.output.name,
                        static_cast<kernels::dtype>(def.output.type)};
  d.signature.scalars = def.scalars;
  auto args_of = [](const kernels::kernel_args& a) {
    kernel_args out;
    out.alpha = a.alpha;
    out.m = a.m;
    out.n = a.n;
    out.k = a.k;
    out.top_k = a.top_k;
    return out;
  };
  // The rules are the application's code: whatever one throws becomes a
  // kernels::kernel_failure that names the kernel and the rule, which ends
  // the item with kernel_error where it was called (admission, a device, the
  // balancer sizing a host's launch) and never crosses into an actor.
  auto fence = [name = def.name](const char* rule, auto f) {
    return [name, rule, f = std::move(f)](const kernels::kernel_args& a,
                                          kernels::input_lengths in) {
      try {
        return f(a, in);
      } catch (const kernels::kernel_failure&) {
        throw;
      } catch (const std::exception& e) {
        throw kernels::kernel_failure{"kernel '" + name + "': its " + rule +
                                      " threw: " + e.what()};
      } catch (...) {
        throw kernels::kernel_failure{"kernel '" + name + "': its " + rule +
                                      " threw a non-standard exception"};
      }
    };
  };
  if (def.check)
    d.check = fence("check", [f = def.check, args_of](
                                 const kernels::kernel_args& a,
                                 kernels::input_lengths in) {
      return f(args_of(a), in);
    });
  d.output_elements =
      fence("output_size", [f = def.output_size, args_of](
                               const kernels::kernel_args& a,
                               kernels::input_lengths in) {
        return f(args_of(a), in);
      });
  if (def.flops)
    d.cost = fence("flops", [f = def.flops, args_of](
                                const kernels::kernel_args& a,
                                kernels::input_lengths in) {
      return kernels::kernel_cost{f(args_of(a), in), 0};
    });
  auto gpu = [&](gpu_module& m) {
    kernels::gpu_code c;
    c.kind = static_cast<kernels::gpu_code::format>(m.kind);
    if (c.kind == kernels::gpu_code::format::ptx && !m.image.empty() &&
        m.image.back() != 0)
      m.image.push_back(0);
    c.image = std::make_shared<const std::vector<uint8_t>>(std::move(m.image));
    c.function = std::move(m.function);
    c.block = m.block;
    if (m.threads)
      c.launch_elements = fence("threads", [f = std::move(m.threads), args_of](
                                               const kernels::kernel_args& a,
                                               kernels::input_lengths in) {
        return f(args_of(a), in);
      });
    return c;
  };
  d.cuda = gpu(def.cuda);
  d.hip = gpu(def.hip);
  auto out_type = d.signature.output.type;
  d.cpu = [f = def.cpu, args_of, out_type, size = d.output_elements,
           name = def.name](
              const kernels::kernel_args& a, kernels::typed_inputs in) {
    // At most 8 inputs (the registry's rule): views on the stack, no
    // allocation per call.
    kernels::small_vector<uint64_t, 8> lens;
    std::array<buffer, 8> views;
    for (size_t i = 0; i < in.size() && i < views.size(); ++i) {
      lens.push_back(in[i].size);
      views[i] = typed_buffer(nullptr, in[i].data, in[i].size,
                              static_cast<dtype>(in[i].type));
    }
    kernels::kernel_output out;
    out.resize(out_type, size(a, kernels::input_lengths{lens}));
    auto ov = out.view();
    try {
      f(args_of(a), std::span<const buffer>{views.data(), in.size()},
        output_span{const_cast<void*>(ov.data), ov.size,
                    static_cast<dtype>(out_type)});
    } catch (const std::bad_alloc&) {
      throw;
    } catch (const std::exception& e) {
      throw kernels::kernel_failure{"kernel '" + name + "' threw: " + e.what()};
    } catch (...) {
      throw kernels::kernel_failure{"kernel '" + name +
                                    "' threw a non-standard exception"};
    }
    return out;
  };
  std::string why;
  auto id = kernels::register_kernel(std::move(d), why);
  if (!id)
    throw error{errc::invalid_arguments, why};
  return static_cast<kernel>(*id);
}

// -- future -----------------------------------------------------------------

future::future(future&& other) noexcept
    : slot_(std::exchange(other.slot_, nullptr)) {
  // nop
}

future& future::operator=(future&& other) noexcept {
  if (this != &other) {
    if (auto* s = slot_access::slot(*this))
      s->release();
    slot_ = std::exchange(other.slot_, nullptr);
  }
  return *this;
}

future::~future() {
  if (auto* s = slot_access::slot(*this))
    s->release();
}

ticket::ticket(ticket&& other) noexcept
    : slot_(std::exchange(other.slot_, nullptr)) {
  // nop
}

ticket& ticket::operator=(ticket&& other) noexcept {
  if (this != &other) {
    if (auto* s = slot_access::slot(*this))
      s->release();
    slot_ = std::exchange(other.slot_, nullptr);
  }
  return *this;
}

ticket::~ticket() {
  if (auto* s = slot_access::slot(*this))
    s->release();
}

uint64_t future::id() const {
  auto* s = slot_access::slot(*this);
  return s ? s->id : 0;
}

bool future::ready() const {
  auto* s = slot_access::slot(*this);
  return s && s->state.load(std::memory_order_acquire) == 1;
}

bool future::wait_for(std::chrono::nanoseconds timeout) const {
  auto* s = slot_access::slot(*this);
  return s != nullptr && s->wait(&timeout);
}

outcome future::wait() {
  if (slot_ == nullptr)
    return outcome{errc::invalid_arguments,
                   "invalid_arguments: the future is empty (never "
                   "submitted, or its end was taken already)"};
  auto home = slot_access::slot(*this)->home;
  auto f = slot_access::adopt(*this);
  return to_outcome(f.get(), home);
}

// -- runtime ----------------------------------------------------------------

struct runtime::impl {
  explicit impl(const pb::RuntimeConfig& cfg) : cfg(cfg), sys(this->cfg) {
    // nop
  }

  ~impl() {
    // Handles that outlive the runtime release nothing.
    if (home)
      home->close();
  }

  // The handles of this runtime's objects release them here.
  void open_home() {
    home = std::make_shared<actors::detail::object_home>();
    auto* r = rt.get();
    home->release = [r](uint64_t id) { r->release_object(id); };
  }

  // A future whose end may name an object knows where to release it.
  future make_future(actors::work_future&& f) {
    auto out = slot_access::make(std::move(f));
    if (auto* s = slot_access::slot(out))
      s->home = home;
    return out;
  }

  system_config cfg;
  caf::actor_system sys;
  std::unique_ptr<actors::runtime> rt;
  home_ptr home;
};

runtime::runtime(std::unique_ptr<impl> p) : impl_(std::move(p)) {
  // nop
}

runtime::runtime(runtime&& other) noexcept = default;

namespace {

// Whether the calling thread's thread_locals are gone: true in a static's
// destructor at exit (the main thread's thread_locals are destroyed before
// its statics) and in a thread_local's destructor run after the watch's.
// CAF keeps the calling thread's current logger in a thread_local that an
// actor system's constructor, scoped actors and its destructor set; used
// once it is gone, it releases the logger a second time ("free():
// corrupted unsorted chunks" in caf::actor_system::~actor_system for a
// runtime in a static). Such a thread stops and tears down a runtime on a
// new thread, joined; any other does it itself (CAF's destructor waits for
// the logger's last reference, which the calling thread's thread_local may
// hold).
thread_local bool thread_locals_gone = false;

struct thread_local_watch {
  ~thread_local_watch() { thread_locals_gone = true; }
};

void watch_thread_locals() {
  thread_local thread_local_watch watch;
  (void) watch;
}

// Runs `f` here, or on a new thread (joined) where this one's
// thread_locals are gone.
template <class F> void on_live_thread(F f) {
  if (!thread_locals_gone)
    f();
  else
    std::thread(std::move(f)).join();
}

// Stops a runtime and releases it. From one of its own callbacks the
// release moves to a thread of its own: the actor system and the callback
// thread cannot be torn down from that thread, so they go once the
// callback has returned.
void release(std::unique_ptr<runtime::impl> p) {
  if (!p)
    return;
  on_live_thread([&p] {
    p->rt->stop();
    if (p->rt->on_callback_thread())
      std::thread([q = std::move(p)]() mutable { q.reset(); }).detach();
    else
      p.reset();
  });
}

// The runtime behind a handle, or a clear error for a moved-from one.
runtime::impl& live(const std::unique_ptr<runtime::impl>& p) {
  watch_thread_locals();
  if (!p)
    throw error{errc::invalid_arguments,
                "invalid_arguments: this cohort::runtime was moved from; "
                "use the runtime it was moved to"};
  return *p;
}

// A running runtime: the calls the header says throw shutting_down after
// stop() check here (the actors may still answer while they wind down).
runtime::impl& running(const std::unique_ptr<runtime::impl>& p) {
  auto& x = live(p);
  if (x.rt->stopped())
    throw error{errc::shutting_down,
                "shutting_down: the runtime is stopped (stop() was called)"};
  return x;
}

} // namespace

runtime& runtime::operator=(runtime&& other) noexcept {
  if (this != &other) {
    release(std::move(impl_));
    impl_ = std::move(other.impl_);
  }
  return *this;
}

runtime::~runtime() {
  release(std::move(impl_));
}

runtime runtime::start(const options& opts) {
  pb::RuntimeConfig cfg;
  bool custom =
      opts.cpu_workers.has_value() || opts.simulated_gpus != 0 || !opts.gpus;
  if (!opts.config_file.empty() && !opts.config_text.empty())
    throw error{errc::invalid_arguments,
                "invalid_arguments: options: config_file and config_text "
                "both set; give one"};
  if (!opts.config_file.empty() || !opts.config_text.empty()) {
    if (custom)
      throw error{errc::invalid_arguments,
                  "invalid_arguments: options: with a config, leave "
                  "cpu_workers, simulated_gpus and gpus unset (the config "
                  "says which devices there are)"};
    if (!opts.config_file.empty()) {
      auto loaded = load_config(opts.config_file);
      if (!loaded)
        raise(loaded.error());
      cfg = std::move(*loaded);
    } else if (auto err = parse_text(opts.config_text, "config_text", cfg,
                                     errc::malformed_config)) {
      raise(err);
    }
  } else {
    cfg = actors::default_config();
    if (opts.cpu_workers)
      cfg.mutable_devices()->set_cpu_workers(*opts.cpu_workers);
    cfg.mutable_devices()->set_gpus(opts.gpus);
    // The runtime takes 64 devices at most; refused before a config of
    // billions of simulated GPUs is built.
    constexpr uint32_t most = 64;
    if (opts.simulated_gpus > most)
      throw error{errc::invalid_arguments,
                  "invalid_arguments: options: simulated_gpus is " +
                      std::to_string(opts.simulated_gpus) + ", at most " +
                      std::to_string(most) + " devices are supported"};
    actors::add_sim_gpus(cfg, opts.simulated_gpus);
  }
  if (!opts.audit_path.empty())
    cfg.set_audit_path(opts.audit_path);
  if (!opts.share_socket.empty())
    cfg.set_share_socket(opts.share_socket);
  // The actor system starts its scheduler's threads from the config: its
  // bounds are checked first (runtime::start checks the rest).
  if (auto err = config::check_bounds(cfg))
    raise(err);
  watch_thread_locals();
  auto p = std::make_unique<impl>(cfg);
  auto rt = actors::runtime::start(p->sys, cfg);
  if (!rt)
    raise(rt.error());
  p->rt = std::move(*rt);
  p->open_home();
  return runtime{std::move(p)};
}

future runtime::submit(work item) {
  auto& self = live(impl_);
  work_item internal;
  auto id = item.id;
  if (auto why = to_item(std::move(item), internal, self.home); !why.empty())
    return slot_access::make(actors::client_hub::ready(id, refusal(id, why)));
  return self.make_future(self.rt->submit(std::move(internal)));
}

ticket runtime::submit(work item, callback done) {
  auto& self = live(impl_);
  work_item internal;
  auto id = item.id;
  if (auto why = to_item(std::move(item), internal, self.home);
      !why.empty()) {
    done(refused(id, why));
    return {};
  }
  return slot_access::make(self.rt->submit(
      std::move(internal), [done = std::move(done), home = self.home](
                               caf::expected<work_result> x) {
        done(to_outcome(std::move(x), home));
      }));
}

std::vector<future> runtime::submit_many(std::vector<work> items) {
  auto& self = live(impl_);
  // Refused items get their end at once; the others go in one batch, and
  // their futures take their places in order.
  std::vector<work_item> ok;
  std::vector<size_t> where;
  std::vector<future> out(items.size());
  ok.reserve(items.size());
  where.reserve(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    work_item internal;
    auto id = items[i].id;
    if (auto why = to_item(std::move(items[i]), internal, self.home);
        !why.empty()) {
      out[i] =
          slot_access::make(actors::client_hub::ready(id, refusal(id, why)));
      continue;
    }
    ok.push_back(std::move(internal));
    where.push_back(i);
  }
  auto futures = self.rt->submit(std::move(ok));
  for (size_t j = 0; j < futures.size(); ++j)
    out[where[j]] = self.make_future(std::move(futures[j]));
  return out;
}

void runtime::submit_many(std::vector<work> items, batch_callback done) {
  auto& self = live(impl_);
  std::vector<work_item> ok;
  ok.reserve(items.size());
  for (auto& w : items) {
    work_item internal;
    auto id = w.id;
    if (auto why = to_item(std::move(w), internal, self.home); !why.empty()) {
      done(id, refused(id, why));
      continue;
    }
    ok.push_back(std::move(internal));
  }
  auto shared = std::make_shared<batch_callback>(std::move(done));
  self.rt->submit(
      std::move(ok),
      [shared, home = self.home](uint64_t id, caf::expected<work_result> x) {
        (*shared)(id, to_outcome(std::move(x), home));
      });
}

void runtime::cancel(uint64_t id) {
  auto& self = live(impl_);
  self.rt->cancel(id);
}

void runtime::after_callbacks(std::function<void()> fn) {
  auto& self = live(impl_);
  if (!fn)
    throw error(errc::invalid_arguments,
                "runtime::after_callbacks: an empty function");
  self.rt->after_callbacks(std::move(fn));
}

void runtime::cancel(const future& f) {
  auto& self = live(impl_);
  if (f.valid() && !f.ready())
    self.rt->cancel(slot_access::share(f));
}

void runtime::cancel(const ticket& t) {
  auto& self = live(impl_);
  if (t.valid())
    self.rt->cancel(slot_access::share(t));
}

outcome runtime::run(work item) {
  return submit(std::move(item)).wait();
}

outcome runtime::run(work item, std::chrono::milliseconds timeout) {
  auto& self = live(impl_);
  // The facade refuses a timeout that is not positive.
  work_item internal;
  auto id = item.id;
  if (auto why = to_item(std::move(item), internal, self.home); !why.empty())
    return refused(id, why);
  return to_outcome(self.rt->run(std::move(internal), timeout), self.home);
}

std::vector<device_view> runtime::devices() const {
  auto& self = live(impl_);
  std::vector<device_view> out;
  for (auto& d : self.rt->devices()) {
    device_view v;
    v.name = d.name;
    v.kind = cohort::to_string(d.kind);
    v.model = d.model;
    v.simulated = d.simulated;
    v.memory_bytes = d.memory_bytes;
    v.streams = d.streams;
    v.numa_node = d.numa_node;
    for (auto& l : d.links)
      v.links.push_back({l.peer, cohort::to_string(l.kind, d.kind)});
    out.push_back(std::move(v));
  }
  return out;
}

cohort::stats runtime::stats() {
  auto& self = live(impl_);
  auto s = self.rt->placement_stats();
  if (!s)
    raise(s.error());
  cohort::stats out;
  out.completed = s->completed;
  out.failed = s->failed;
  out.cancelled = s->cancelled;
  out.fallbacks = s->fallbacks;
  out.admitted = s->admission.admitted;
  out.rejected = s->admission.rejected;
  for (auto& d : s->devices)
    out.per_device.push_back(d.completed);
  return out;
}

std::vector<std::string> runtime::load_kernel_bundle(const std::string& dir) {
  auto& self = running(impl_);
  auto names = self.rt->load_kernel_bundle(dir);
  if (!names)
    raise(names.error());
  return std::move(*names);
}

std::vector<headroom_view> runtime::headroom(const std::string& tenant) {
  auto& self = running(impl_);
  auto h = self.rt->headroom(tenant);
  if (!h)
    raise(h.error());
  std::vector<headroom_view> out;
  for (auto& t : h->tenants) {
    headroom_view x;
    x.tenant = t.tenant;
    x.inflight = t.inflight;
    x.max_inflight = t.max_inflight;
    x.waiting = t.waiting;
    x.memory = t.memory;
    x.memory_quota = t.memory_quota;
    x.cpu_workers = t.cpu_workers;
    for (auto& d : t.devices)
      x.devices.push_back(
          {d.device, d.used, d.quota, d.reserved, d.headroom, d.ceiling});
    out.push_back(std::move(x));
  }
  return out;
}

dry_run_report runtime::dry_run(const std::vector<dry_run_step>& steps,
                                bool from_now) {
  auto& self = live(impl_);
  pb::AllocationPlan plan;
  plan.set_name("dry_run");
  for (auto& st : steps) {
    auto* p = plan.add_step();
    p->set_tenant(st.tenant);
    p->set_device(st.device);
    p->set_bytes(st.bytes);
    p->set_kernel(st.kernel);
    p->set_label(st.label);
    p->set_free(st.free);
  }
  if (auto err = check_plan(plan, "dry_run"))
    raise(err);
  auto internal = from_proto(plan);
  internal.from_now = from_now;
  auto r = self.rt->simulate(std::move(internal));
  if (!r)
    raise(r.error());
  dry_run_report out;
  out.ok = r->ok();
  for (auto& s : r->steps)
    out.steps.push_back({s.ok, s.code, s.detail, s.soft});
  out.tenant_peaks = r->tenant_peaks;
  return out;
}

object_ref runtime::put(const std::string& tenant, buffer data,
                        const std::string& device) {
  auto& self = running(impl_);
  if (data.object() != 0)
    throw error{errc::invalid_arguments,
                "invalid_arguments: an object is made from host data, not "
                "from another object's buffer"};
  auto info = self.rt->put_object(tenant, to_host(data), device);
  if (!info)
    raise(info.error());
  return detail::object_access::make(std::move(*info), self.home);
}

buffer runtime::get(const object_ref& obj) {
  auto& self = running(impl_);
  auto& st = detail::object_access::state(obj);
  if (!st)
    throw error{errc::invalid_arguments,
                "invalid_arguments: runtime::get of an empty object handle"};
  if (st->home != self.home)
    throw error{errc::invalid_arguments, "invalid_arguments: object " +
                                             std::to_string(st->id) +
                                             " belongs to another runtime"};
  auto b = self.rt->get_object(st->tenant, st->id);
  if (!b)
    raise(b.error());
  auto held = std::make_shared<host_buffer>(std::move(*b));
  auto view = held->view();
  return typed_buffer(held, view.data, view.size,
                      static_cast<dtype>(view.type));
}

std::string runtime::share(const object_ref& obj, const share_options& opts) {
  auto& self = running(impl_);
  auto& st = detail::object_access::state(obj);
  if (!st)
    throw error{errc::invalid_arguments,
                "invalid_arguments: runtime::share of an empty object handle"};
  if (st->home != self.home)
    throw error{errc::invalid_arguments, "invalid_arguments: object " +
                                             std::to_string(st->id) +
                                             " belongs to another runtime"};
  share_grant grant;
  grant.write = opts.write;
  grant.uid = opts.uid;
  grant.max_attached = opts.max_attached;
  auto token = self.rt->export_object(st->tenant, st->id, grant);
  if (!token)
    raise(token.error());
  return std::move(*token);
}

void runtime::unshare(const std::string& token) {
  auto& self = live(impl_);
  if (auto err = self.rt->unexport_object("", token))
    raise(err);
}

std::string runtime::share_socket() const {
  auto& self = live(impl_);
  return self.rt->share_socket();
}

namespace {

item_info to_info(item_view&& v) {
  item_info i;
  i.job = v.job;
  i.id = v.id;
  i.client = v.client;
  i.tenant = std::move(v.tenant);
  i.kernel = std::move(v.kernel);
  i.state = std::move(v.state);
  i.device = std::move(v.device);
  i.age_ms = double(v.age_ns) / 1e6;
  i.attempts = v.attempts;
  i.cancelling = v.cancelling;
  i.priority = v.priority;
  i.detail = std::move(v.detail);
  return i;
}

} // namespace

void runtime::start_trace(uint64_t max_events) {
  auto& self = running(impl_);
  if (auto err = self.rt->start_trace(max_events))
    raise(err);
}

std::string runtime::stop_trace() {
  auto& self = running(impl_);
  auto x = self.rt->trace(true);
  if (!x)
    raise(x.error());
  return chrome_trace_json(*x);
}

std::vector<item_info> runtime::items(const std::string& tenant) {
  auto& self = running(impl_);
  item_filter f;
  f.tenant = tenant;
  auto list = self.rt->items(f);
  if (!list)
    raise(list.error());
  std::vector<item_info> out;
  out.reserve(list->size());
  for (auto& v : *list)
    out.push_back(to_info(std::move(v)));
  return out;
}

item_info runtime::item(uint64_t job) {
  auto& self = running(impl_);
  auto v = self.rt->item(job);
  if (!v)
    raise(v.error());
  return to_info(std::move(*v));
}

namespace {

uint64_t cancel_with(actors::runtime& rt, const item_filter& f) {
  if (!f.any())
    raise(make_error(errc::invalid_arguments,
                     "a cancel names a job (not 0), a tenant (not empty) or "
                     "a client (not 0)"));
  auto n = rt.cancel_items(f, "the API");
  if (!n)
    raise(n.error());
  return *n;
}

} // namespace

uint64_t runtime::cancel_job(uint64_t job) {
  auto& self = running(impl_);
  item_filter f;
  f.job = job;
  return cancel_with(*self.rt, f);
}

uint64_t runtime::cancel_tenant(const std::string& tenant) {
  auto& self = running(impl_);
  item_filter f;
  f.tenant = tenant;
  return cancel_with(*self.rt, f);
}

uint64_t runtime::cancel_client(uint64_t client) {
  auto& self = running(impl_);
  item_filter f;
  f.client = client;
  return cancel_with(*self.rt, f);
}

uint64_t runtime::client() const {
  auto& self = live(impl_);
  return self.rt->client();
}

std::vector<object_view> runtime::objects(const std::string& tenant) {
  auto& self = live(impl_);
  auto list = self.rt->objects(tenant);
  if (!list)
    raise(list.error());
  std::vector<object_view> out;
  out.reserve(list->size());
  for (auto& o : *list) {
    object_view v;
    v.id = o.id;
    v.tenant = std::move(o.tenant);
    v.type = static_cast<dtype>(o.type);
    v.size = o.elements;
    v.bytes = o.bytes();
    v.devices = std::move(o.devices);
    v.host_copy = o.host_copy;
    v.handles = o.handles;
    v.readers = o.readers;
    v.attached = o.attached;
    v.exports = o.exports;
    v.age_ms = o.age_ms;
    out.push_back(std::move(v));
  }
  return out;
}

void runtime::stop() {
  if (!impl_)
    return;
  // Also from a static's destructor or an atexit handler (see release).
  on_live_thread([rt = impl_->rt.get()] { rt->stop(); });
}

const std::string& runtime::audit_path() const {
  auto& self = live(impl_);
  return self.rt->audit_path();
}

} // namespace cohort
