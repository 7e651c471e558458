#include "tests/devices/fake_gpu.hpp"

#include <unistd.h>

#include <csignal>

#include "kernels/catalog.hpp"

#include <chrono>
#include <cstring>

namespace cohort::testing {

using devices::gpu::result;
using devices::gpu::status;

namespace {

thread_local int current_device = 0;

result fail(status st) {
  return {st, 1000 + static_cast<int>(st)};
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

} // namespace

struct fake_gpu_api::stream {
  int dev = 0;
  std::mutex mtx;
  std::condition_variable cv;
  std::deque<std::function<void()>> ops;
  bool running = false;
  bool stop = false;
  std::thread worker;

  void run() {
    std::unique_lock<std::mutex> guard{mtx};
    for (;;) {
      cv.wait(guard, [&] { return stop || !ops.empty(); });
      if (ops.empty())
        return;
      auto op = std::move(ops.front());
      ops.pop_front();
      running = true;
      guard.unlock();
      op();
      guard.lock();
      running = false;
      cv.notify_all();
    }
  }
};

fake_gpu_api::fake_gpu_api() : fake_gpu_api(std::vector<device_spec>(1)) {
  // nop
}

fake_gpu_api::fake_gpu_api(std::vector<device_spec> devices) {
  for (auto& spec : devices)
    devs_.push_back(device_state{std::move(spec), 0, status::ok, {}, {}});
}

fake_gpu_api::~fake_gpu_api() {
  release_hung();
  for (auto& s : streams_) {
    {
      std::lock_guard<std::mutex> guard{s->mtx};
      s->stop = true;
    }
    s->cv.notify_all();
    s->worker.join();
  }
  for (auto& d : devs_) {
    for (auto& [p, n] : d.blocks)
      std::free(p);
    for (auto* e : d.events)
      delete e;
  }
}

void fake_gpu_api::fail_next_mallocs(int n) {
  std::lock_guard<std::mutex> guard{mtx_};
  failing_mallocs_ = n;
}

void fake_gpu_api::fault_next_launch(status sticky) {
  std::lock_guard<std::mutex> guard{mtx_};
  next_fault_ = sticky;
}

void fake_gpu_api::hang_next_launch() {
  std::lock_guard<std::mutex> guard{mtx_};
  hang_next_ = true;
}

void fake_gpu_api::release_hung() {
  std::lock_guard<std::mutex> guard{mtx_};
  hung_released_ = true;
  hung_cv_.notify_all();
}

void fake_gpu_api::set_driver_missing(bool missing) {
  std::lock_guard<std::mutex> guard{mtx_};
  driver_missing_ = missing;
}

void fake_gpu_api::set_no_device(bool none) {
  std::lock_guard<std::mutex> guard{mtx_};
  no_device_ = none;
}

void fake_gpu_api::set_sticky_survives_reset(bool survives) {
  std::lock_guard<std::mutex> guard{mtx_};
  sticky_survives_reset_ = survives;
}

size_t fake_gpu_api::live_allocations() const {
  std::lock_guard<std::mutex> guard{mtx_};
  size_t n = 0;
  for (auto& d : devs_)
    n += d.blocks.size();
  return n;
}

size_t fake_gpu_api::registered_host_ranges() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return registered_.size();
}

std::string fake_gpu_api::describe(int raw) const {
  auto st = static_cast<status>(raw - 1000);
  return std::string{"fakeError_"} + devices::gpu::to_string(st) +
         ": injected by the test";
}

int fake_gpu_api::current() const {
  return current_device;
}

result fake_gpu_api::sticky_of(int dev) const {
  auto st = devs_.at(dev).sticky;
  return st == status::ok ? result{} : fail(st);
}

result fake_gpu_api::device_count(int& n) {
  std::lock_guard<std::mutex> guard{mtx_};
  n = 0;
  if (driver_missing_)
    return fail(status::driver_missing);
  if (no_device_)
    return fail(status::no_device);
  n = static_cast<int>(devs_.size());
  return {};
}

result fake_gpu_api::get_properties(int dev, devices::gpu::properties& out) {
  if (dev < 0 || dev >= static_cast<int>(devs_.size()))
    return fail(status::no_device);
  auto& spec = devs_[dev].spec;
  out.name = spec.name;
  out.cc_major = 9;
  out.cc_minor = 0;
  out.memory_bytes = spec.memory_bytes;
  out.multiprocessors = spec.multiprocessors;
  out.pci_bus_id = spec.pci_bus_id;
  out.uuid = spec.uuid.empty() ? "FAKE-" + std::to_string(dev) : spec.uuid;
  return {};
}

result fake_gpu_api::set_device(int dev) {
  if (dev < 0 || dev >= static_cast<int>(devs_.size()))
    return fail(status::no_device);
  current_device = dev;
  return {};
}

result fake_gpu_api::stream_create(devices::gpu::stream_t& s) {
  std::lock_guard<std::mutex> guard{mtx_};
  if (auto rc = sticky_of(current()); rc.failed())
    return rc;
  auto st = std::make_unique<stream>();
  st->dev = current();
  auto* raw = st.get();
  st->worker = std::thread{[raw] { raw->run(); }};
  streams_.push_back(std::move(st));
  s = raw;
  return {};
}

result fake_gpu_api::stream_destroy(devices::gpu::stream_t s) {
  // Streams live until the fake goes; destroying only stops using them.
  return stream_synchronize(s);
}

result fake_gpu_api::stream_synchronize(devices::gpu::stream_t s) {
  auto* st = static_cast<stream*>(s);
  std::unique_lock<std::mutex> guard{st->mtx};
  st->cv.wait(guard, [&] { return st->ops.empty() && !st->running; });
  guard.unlock();
  std::lock_guard<std::mutex> g{mtx_};
  return sticky_of(st->dev);
}

result fake_gpu_api::stream_query(devices::gpu::stream_t s) {
  std::lock_guard<std::mutex> guard{mtx_};
  return sticky_of(static_cast<stream*>(s)->dev);
}

result fake_gpu_api::malloc_device(void*& p, size_t bytes) {
  std::lock_guard<std::mutex> guard{mtx_};
  auto& d = devs_.at(current());
  if (auto rc = sticky_of(current()); rc.failed())
    return rc;
  if (failing_mallocs_ > 0) {
    --failing_mallocs_;
    return fail(status::out_of_memory);
  }
  if (d.used + bytes > d.spec.memory_bytes)
    return fail(status::out_of_memory);
  p = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
  // Fresh device memory is not zero: a pool must not rely on it.
  std::memset(p, 0xA5, bytes);
  d.used += bytes;
  ++device_mallocs_;
  d.blocks.emplace(p, bytes);
  return {};
}

result fake_gpu_api::free_device(void* p) {
  std::lock_guard<std::mutex> guard{mtx_};
  auto& d = devs_.at(current());
  auto i = d.blocks.find(p);
  if (i == d.blocks.end()) {
    ++bad_frees_;
    return fail(status::invalid_value);
  }
  d.used -= i->second;
  d.blocks.erase(i);
  std::free(p);
  return {};
}

result fake_gpu_api::host_register(void* p, size_t bytes) {
  std::lock_guard<std::mutex> guard{mtx_};
  if (!registered_.emplace(p, bytes).second)
    return fail(status::invalid_value);
  return {};
}

result fake_gpu_api::host_unregister(void* p) {
  std::lock_guard<std::mutex> guard{mtx_};
  return registered_.erase(p) == 1 ? result{} : fail(status::invalid_value);
}

result fake_gpu_api::enqueue(devices::gpu::stream_t s,
                             std::function<void()> op) {
  auto* st = static_cast<stream*>(s);
  {
    std::lock_guard<std::mutex> guard{mtx_};
    if (auto rc = sticky_of(st->dev); rc.failed())
      return rc;
  }
  {
    std::lock_guard<std::mutex> guard{st->mtx};
    st->ops.push_back(std::move(op));
  }
  st->cv.notify_all();
  return {};
}

result fake_gpu_api::copy_to_device(void* dst, const void* src, size_t bytes,
                                    devices::gpu::stream_t s) {
  int dev = static_cast<stream*>(s)->dev;
  return enqueue(s, [this, dev, dst, src, bytes] {
    std::lock_guard<std::mutex> guard{mtx_};
    if (devs_[dev].sticky == status::ok)
      std::memcpy(dst, src, bytes);
  });
}

result fake_gpu_api::copy_to_host(void* dst, const void* src, size_t bytes,
                                  devices::gpu::stream_t s) {
  bytes_to_host_ += bytes;
  return copy_to_device(dst, src, bytes, s);
}

result fake_gpu_api::zero_device(void* p, size_t bytes,
                                 devices::gpu::stream_t s) {
  int dev = static_cast<stream*>(s)->dev;
  bytes_zeroed_ += bytes;
  return enqueue(s, [this, dev, p, bytes] {
    std::lock_guard<std::mutex> guard{mtx_};
    if (devs_[dev].sticky == status::ok)
      std::memset(p, 0, bytes);
  });
}

result fake_gpu_api::event_create(devices::gpu::event_t& e, bool) {
  auto* ev = new event;
  std::lock_guard<std::mutex> guard{mtx_};
  devs_.at(current()).events.insert(ev);
  e = ev;
  return {};
}

result fake_gpu_api::event_destroy(devices::gpu::event_t e) {
  auto* ev = static_cast<event*>(e);
  std::lock_guard<std::mutex> guard{mtx_};
  for (auto& d : devs_)
    if (d.events.erase(ev) > 0) {
      delete ev;
      return {};
    }
  // Destroyed already, or by a reset of its device: a stale handle.
  return fail(status::invalid_value);
}

result fake_gpu_api::event_record(devices::gpu::event_t e,
                                  devices::gpu::stream_t s) {
  auto* ev = static_cast<event*>(e);
  ev->at_ns = -1;
  auto gen = ++ev->recorded;
  int dev = static_cast<stream*>(s)->dev;
  return enqueue(s, [this, dev, ev, gen] {
    std::lock_guard<std::mutex> guard{mtx_};
    if (devs_[dev].sticky == status::ok) {
      ev->at_ns = now_ns();
      ev->completed = gen;
    }
  });
}

result fake_gpu_api::event_query(devices::gpu::event_t e, bool& done) {
  auto* ev = static_cast<event*>(e);
  done = ev->completed.load() >= ev->recorded.load();
  std::lock_guard<std::mutex> guard{mtx_};
  return sticky_of(current());
}

result fake_gpu_api::stream_wait_event(devices::gpu::stream_t s,
                                       devices::gpu::event_t e) {
  ++stream_waits_;
  auto* ev = static_cast<event*>(e);
  int dev = static_cast<stream*>(s)->dev;
  // The record this wait is for is the latest at the call (CUDA captures
  // it then). The stream's thread waits, as a GPU stream would; the host
  // does not.
  auto gen = ev->recorded.load();
  return enqueue(s, [this, dev, ev, gen] {
    while (ev->completed.load() < gen) {
      {
        std::lock_guard<std::mutex> guard{mtx_};
        if (devs_[dev].sticky != status::ok)
          return;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  });
}

bool fake_gpu_api::is_zero(const void* p, size_t bytes) const {
  auto* b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < bytes; ++i)
    if (b[i] != 0)
      return false;
  return true;
}

result fake_gpu_api::event_elapsed_ns(devices::gpu::event_t start,
                                      devices::gpu::event_t stop, int64_t& ns) {
  {
    std::lock_guard<std::mutex> guard{mtx_};
    if (auto rc = sticky_of(current()); rc.failed())
      return rc;
  }
  auto a = static_cast<event*>(start)->at_ns.load();
  auto b = static_cast<event*>(stop)->at_ns.load();
  if (a < 0 || b < 0)
    return fail(status::other);
  ns = b - a;
  return {};
}

result fake_gpu_api::scratch_bytes(const kernels::gpu::launch_args& a,
                                   size_t& bytes) {
  // Asks for some scratch for the reductions so that the layout is tested.
  bytes = a.id == kernels::kernel_id::reduce_sum ? 1000 : 0;
  return {};
}

result fake_gpu_api::launch(const kernels::gpu::launch_args& a,
                            devices::gpu::stream_t s) {
  int dev = static_cast<stream*>(s)->dev;
  status fault;
  bool hang;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    fault = next_fault_;
    next_fault_ = status::ok;
    hang = hang_next_;
    hang_next_ = false;
    // Every pointer must lie inside one live block of this device.
    auto inside = [&](const void* p, size_t bytes) {
      return this->inside(dev, p, bytes);
    };
    size_t n_in = kernels::input_count(a.id);
    for (size_t i = 0; i < n_in; ++i)
      if (!inside(a.in[i], a.in_len[i] * sizeof(float)))
        return fail(status::invalid_value);
    auto outs = kernels::gpu::output_values(a);
    if (!inside(a.out, outs * sizeof(float)) ||
        (a.id == kernels::kernel_id::topk_cosine &&
         !inside(a.out_indices, outs * sizeof(int64_t))) ||
        !inside(a.scratch, a.scratch_bytes))
      return fail(status::invalid_value);
  }
  return enqueue(s, [this, dev, a, fault, hang] {
    if (hang) {
      std::unique_lock<std::mutex> guard{mtx_};
      hung_cv_.wait(guard, [&] { return hung_released_; });
    }
    if (fault != status::ok) {
      std::lock_guard<std::mutex> guard{mtx_};
      devs_[dev].sticky = fault;
      return;
    }
    {
      std::lock_guard<std::mutex> guard{mtx_};
      if (devs_[dev].sticky != status::ok)
        return;
    }
    std::vector<std::span<const float>> in;
    for (size_t i = 0; i < kernels::input_count(a.id); ++i)
      in.emplace_back(a.in[i], a.in_len[i]);
    auto out = kernels::run_cpu(a.id, a.args, in);
    std::memcpy(a.out, out.values.data(), out.values.size() * sizeof(float));
    if (a.out_indices != nullptr)
      std::memcpy(a.out_indices, out.indices.data(),
                  out.indices.size() * sizeof(int64_t));
    ++kernels_run_;
  });
}

bool fake_gpu_api::inside(int dev, const void* p, size_t bytes) const {
  if (bytes == 0)
    return true;
  auto& blocks = devs_[dev].blocks;
  auto i = blocks.upper_bound(const_cast<void*>(p));
  if (i == blocks.begin())
    return false;
  --i;
  auto* base = static_cast<const char*>(i->first);
  auto* q = static_cast<const char*>(p);
  return q >= base && q + bytes <= base + i->second;
}

void fake_gpu_api::define_function(const std::string& name, fake_function fn) {
  std::lock_guard<std::mutex> guard{mtx_};
  functions_[name] = std::move(fn);
}

std::vector<fake_gpu_api::function_launch>
fake_gpu_api::function_launches() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return function_launches_;
}

size_t fake_gpu_api::live_modules() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return modules_.size();
}

result fake_gpu_api::module_load(const void* image, size_t bytes,
                                 devices::gpu::module_t& m, std::string& log) {
  ++module_loads_;
  std::lock_guard<std::mutex> guard{mtx_};
  if (auto rc = sticky_of(current()); rc.failed())
    return rc;
  std::string text{static_cast<const char*>(image), bytes};
  while (!text.empty() && text.back() == '\0')
    text.pop_back();
  std::string magic = module_magic;
  if (text.compare(0, magic.size(), magic) != 0) {
    log = "fake JIT: not a fake module image (it starts with '" +
          text.substr(0, 16) + "')";
    return fail(status::invalid_value);
  }
  auto mod = std::make_unique<fake_module>();
  mod->dev = current();
  size_t at = magic.size();
  while (at < text.size()) {
    auto end = text.find('\n', at);
    auto line = text.substr(at, end == std::string::npos ? end : end - at);
    if (line == "!crash")
      std::raise(SIGSEGV);
    if (line == "!hang")
      for (;;)
        ::pause();
    if (!line.empty())
      mod->functions.push_back(std::make_unique<std::string>(line));
    if (end == std::string::npos)
      break;
    at = end + 1;
  }
  m = mod.get();
  modules_.emplace(mod.get(), std::move(mod));
  return {};
}

result fake_gpu_api::module_function(devices::gpu::module_t m, const char* name,
                                     devices::gpu::function_t& f) {
  std::lock_guard<std::mutex> guard{mtx_};
  auto i = modules_.find(static_cast<fake_module*>(m));
  if (i == modules_.end() || i->second->dev != current())
    return fail(status::invalid_value);
  for (auto& fn : i->second->functions)
    if (*fn == name) {
      f = fn.get();
      return {};
    }
  // CUDA_ERROR_NOT_FOUND, sorted like the vendors' code.
  return fail(status::invalid_value);
}

result fake_gpu_api::module_unload(devices::gpu::module_t m) {
  std::lock_guard<std::mutex> guard{mtx_};
  if (modules_.erase(static_cast<fake_module*>(m)) == 0)
    return fail(status::invalid_value);
  return {};
}

result fake_gpu_api::launch_function(devices::gpu::function_t f, uint32_t grid,
                                     uint32_t block, const void* args,
                                     size_t bytes, devices::gpu::stream_t s) {
  int dev = static_cast<stream*>(s)->dev;
  status fault;
  bool hang;
  function_launch rec;
  fake_function fn;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    // The handle must belong to a live module of this device.
    const std::string* name = nullptr;
    for (auto& [p, mod] : modules_)
      for (auto& fname : mod->functions)
        if (fname.get() == f && mod->dev == dev)
          name = fname.get();
    if (name == nullptr || bytes != sizeof(cohort_gpu_call) || grid == 0 ||
        block == 0 || block > 1024)
      return fail(status::invalid_value);
    std::memcpy(&rec.call, args, sizeof rec.call);
    auto& c = rec.call;
    if (c.input_count > COHORT_MAX_INPUTS)
      return fail(status::invalid_value);
    for (uint32_t i = 0; i < c.input_count; ++i)
      if (!inside(dev, c.inputs[i],
                  c.lengths[i] *
                      kernels::element_size(kernels::dtype(c.dtypes[i]))))
        return fail(status::invalid_value);
    if (!inside(dev, c.output,
                c.output_length *
                    kernels::element_size(kernels::dtype(c.output_dtype))))
      return fail(status::invalid_value);
    rec.function = *name;
    rec.grid = grid;
    rec.block = block;
    rec.arg_bytes = bytes;
    function_launches_.push_back(rec);
    if (auto i = functions_.find(*name); i != functions_.end())
      fn = i->second;
    fault = next_fault_;
    next_fault_ = status::ok;
    hang = hang_next_;
    hang_next_ = false;
  }
  // The arguments are copied at launch, as the drivers do.
  return enqueue(s, [this, dev, call = rec.call, fn, fault, hang] {
    if (hang) {
      std::unique_lock<std::mutex> guard{mtx_};
      hung_cv_.wait(guard, [&] { return hung_released_; });
    }
    {
      std::lock_guard<std::mutex> guard{mtx_};
      if (fault != status::ok)
        devs_[dev].sticky = fault;
      if (devs_[dev].sticky != status::ok)
        return;
    }
    if (fn)
      fn(call);
    ++kernels_run_;
  });
}

result fake_gpu_api::on_stream_done(devices::gpu::stream_t s,
                                    devices::gpu::host_fn fn, void* user) {
  return enqueue(s, [fn, user] { fn(user); });
}

result fake_gpu_api::last_error() {
  std::lock_guard<std::mutex> guard{mtx_};
  return sticky_of(current());
}

result fake_gpu_api::device_reset() {
  ++resets_;
  // A real reset kills queued work; the fake lets it drain (release a hung
  // launch first) so that no stream thread touches freed memory.
  std::vector<stream*> mine;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    for (auto& st : streams_)
      if (st->dev == current())
        mine.push_back(st.get());
  }
  for (auto* st : mine) {
    std::unique_lock<std::mutex> guard{st->mtx};
    st->cv.wait(guard, [&] { return st->ops.empty() && !st->running; });
  }
  std::lock_guard<std::mutex> guard{mtx_};
  auto& d = devs_.at(current());
  for (auto& [p, n] : d.blocks)
    std::free(p);
  d.blocks.clear();
  for (auto* e : d.events)
    delete e;
  d.events.clear();
  d.used = 0;
  // Modules went with the context.
  for (auto i = modules_.begin(); i != modules_.end();)
    i = i->second->dev == current() ? modules_.erase(i) : std::next(i);
  if (!sticky_survives_reset_)
    d.sticky = status::ok;
  // Registrations went with the context (the fake keeps one table for all
  // devices; tests use one device per fake when they reset).
  registered_.clear();
  return sticky_of(current());
}

devices::health::gpu_sample fake_monitor::sample(const std::string&) {
  devices::health::gpu_sample s;
  s.available = true;
  s.gpu_util_percent = 42;
  s.memory_total_bytes = uint64_t{256} << 20;
  s.temperature_c = 55;
  return s;
}

bool fake_monitor::watch(
    const std::string& pci_bus_id,
    std::function<void(devices::health::gpu_event)> on_event) {
  std::optional<devices::health::gpu_event> first;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    watchers_[pci_bus_id] = on_event;
    first = on_watch_;
  }
  if (first)
    on_event(std::move(*first));
  return true;
}

bool fake_monitor::watching(const std::string& pci_bus_id) {
  std::lock_guard<std::mutex> guard{mtx_};
  return watchers_.count(pci_bus_id) > 0;
}

void fake_monitor::raise_on_watch(devices::health::gpu_event ev) {
  std::lock_guard<std::mutex> guard{mtx_};
  on_watch_ = std::move(ev);
}

link_kind fake_monitor::link_between(const std::string& a,
                                     const std::string& b) {
  std::lock_guard<std::mutex> guard{mtx_};
  auto i = links_.find({a, b});
  return i == links_.end() ? link_kind::none : i->second;
}

std::vector<devices::health::mig_gpu> fake_monitor::mig_gpus() {
  std::lock_guard<std::mutex> guard{mtx_};
  return migs_;
}

devices::health::gpu_sample
fake_monitor::sample_device(const std::string& pci_bus_id,
                            const std::string& uuid) {
  auto s = sample(pci_bus_id);
  std::lock_guard<std::mutex> guard{mtx_};
  for (auto& g : migs_)
    for (auto& x : g.instances)
      if (x.uuid == uuid) {
        s.utilization_known = false;
        s.gpu_util_percent = 0;
        s.memory_total_bytes = x.memory_bytes;
      }
  return s;
}

void fake_monitor::add_mig_gpu(devices::health::mig_gpu gpu) {
  std::lock_guard<std::mutex> guard{mtx_};
  migs_.push_back(std::move(gpu));
}

void fake_monitor::set_link(const std::string& a, const std::string& b,
                            link_kind kind) {
  std::lock_guard<std::mutex> guard{mtx_};
  links_[{a, b}] = kind;
  links_[{b, a}] = kind;
}

void fake_monitor::unwatch(const std::string& pci_bus_id) {
  std::lock_guard<std::mutex> guard{mtx_};
  watchers_.erase(pci_bus_id);
}

void fake_monitor::raise(const std::string& pci_bus_id,
                         devices::health::gpu_event ev) {
  std::lock_guard<std::mutex> guard{mtx_};
  if (auto i = watchers_.find(pci_bus_id); i != watchers_.end())
    i->second(std::move(ev));
}

} // namespace cohort::testing
