// The Python module's native part, cohort._cohort: pybind11 over the public
// C++ API (include/cohort/cohort.hpp). NumPy arrays go in without a copy
// when they are float32 and C-contiguous, and results come out as read-only
// arrays over Cohort's own buffers. cohort/__init__.py builds the Python
// API (futures, asyncio, shape inference) on top.
#include <cmath>
#include <string>
#include <type_traits>

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cohort/client.hpp>
#include <cohort/cohort.hpp>

namespace py = pybind11;

namespace {

// The Python exception class cohort.Error, made at import.
PyObject* error_class = nullptr;

py::object make_error(cohort::errc code, const std::string& message) {
  auto ex = py::reinterpret_borrow<py::object>(error_class)(message);
  ex.attr("errc") = cohort::to_string(code);
  return ex;
}

// A shared owner that keeps a Python object alive from any thread: its
// release takes the GIL (and leaks when the interpreter is already gone).
std::shared_ptr<const void> keep_alive(py::object obj) {
  PyObject* raw = obj.release().ptr();
  return std::shared_ptr<const void>(raw, [](const void* p) {
#if PY_VERSION_HEX >= 0x030D0000
    bool finalizing = Py_IsFinalizing();
#else
    bool finalizing = _Py_IsFinalizing();
#endif
    if (!Py_IsInitialized() || finalizing)
      return;
    py::gil_scoped_acquire gil;
    Py_DECREF(static_cast<PyObject*>(const_cast<void*>(p)));
  });
}

template <class T>
cohort::buffer wrap_array(py::array_t<T, py::array::c_style> arr) {
  auto* data = arr.data();
  auto n = size_t(arr.size());
  return cohort::buffer::wrap(data, n, keep_alive(std::move(arr)));
}

// An input array as a buffer: float32 and C-contiguous without a copy;
// float64 and float16 converted to float32 (a copy); integer and bool arrays
// keep their type (the built-in kernels refuse them by name).
template <class T> cohort::buffer cast_array(const py::array& arr) {
  return wrap_array<T>(
      py::array_t<T, py::array::c_style | py::array::forcecast>::ensure(arr));
}

// An input for a kernel slot of element type `want`: an array of the same
// kind (floating point for f32 and f64, integers for the integer types) is
// converted to it, where no value can change (integers only widen); any
// other array keeps its own type, so that admission names the mismatch.
cohort::buffer to_buffer(py::handle obj, std::optional<cohort::dtype> want) {
  auto arr = py::array::ensure(obj);
  if (!arr)
    throw py::type_error("an input is not an array (NumPy or array-like)");
  auto dt = arr.dtype();
  auto kind = dt.kind();
  bool integer = kind == 'i' || kind == 'u' || kind == 'b';
  if (want == cohort::dtype::f64 && kind == 'f')
    return cast_array<double>(arr);
  if (want == cohort::dtype::i64 && integer &&
      !(kind == 'u' && dt.itemsize() == 8))
    return cast_array<int64_t>(arr);
  if (want == cohort::dtype::i32 && integer &&
      (dt.itemsize() < 4 || (kind == 'i' && dt.itemsize() == 4)))
    return cast_array<int32_t>(arr);
  if (kind == 'f') {
    auto narrow =
        py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(
            arr);
    if (dt.itemsize() > 4) {
      // No value is lost without a word: a finite value beyond float32's
      // range would become inf.
      auto wide = py::array_t<double, py::array::c_style |
                                          py::array::forcecast>::ensure(arr);
      auto* w = wide.data();
      auto* f = narrow.data();
      for (py::ssize_t i = 0; i < wide.size(); ++i)
        if (std::isfinite(w[i]) && !std::isfinite(f[i]))
          throw cohort::error{
              cohort::errc::invalid_arguments,
              "invalid_arguments: an input holds " + std::to_string(w[i]) +
                  " (element " + std::to_string(i) +
                  "), beyond float32's range, and the input takes f32; "
                  "scale it, or use a kernel that takes f64"};
    }
    return wrap_array<float>(std::move(narrow));
  }
  if (kind == 'b' || (kind == 'u' && dt.itemsize() == 1))
    return wrap_array<uint8_t>(
        py::array_t<uint8_t, py::array::c_style | py::array::forcecast>::ensure(
            arr));
  if ((kind == 'i' || kind == 'u') && dt.itemsize() <= 4)
    return wrap_array<int32_t>(
        py::array_t<int32_t, py::array::c_style | py::array::forcecast>::ensure(
            arr));
  if (kind == 'i' || kind == 'u')
    return wrap_array<int64_t>(
        py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(
            arr));
  throw py::type_error("an input has dtype " + std::string{py::str(dt)} +
                       "; Cohort takes float, integer and bool arrays");
}

// A read-only array over a buffer's elements; the array holds the buffer.
template <class T> py::object to_array(const cohort::buffer& b) {
  auto* held = new cohort::buffer(b);
  py::capsule owner(held,
                    [](void* p) { delete static_cast<cohort::buffer*>(p); });
  auto view = b.view<T>();
  py::array_t<T> arr({py::ssize_t(view.size())}, {py::ssize_t(sizeof(T))},
                     view.data(), owner);
  arr.attr("setflags")(py::arg("write") = false);
  return arr;
}

// A handle of a device-resident object (cohort.Object): the object lives
// while a handle, or an item reading it, holds it.
struct py_object {
  cohort::object_ref ref;
};

// An attachment to an object shared by a runtime of this node
// (cohort.client): its memory is mapped here.
struct py_attachment {
  cohort::client::attachment a;
  /// Arrays over its mapping still alive: detach() waits for none.
  int arrays = 0;
};

// What an array over an attachment holds: the attachment (its mapping
// stays) and its count of arrays.
struct array_hold {
  py::object owner;
  int* count;
};

// The attachment's elements as an array over its mapping (no copy),
// writable when the attachment is; host memory only.
py::object attachment_array(py::object self) {
  auto& att = self.cast<py_attachment&>();
  auto& a = att.a;
  if (!a.attached())
    throw cohort::error{cohort::errc::invalid_arguments,
                        "the attachment was detached"};
  if (a.where() != cohort::client::memory_kind::host)
    throw cohort::error{cohort::errc::invalid_arguments,
                        "the object is in GPU memory (" + a.device() +
                            "): use .pointer with the GPU's own library"};
  py::dtype dt;
  switch (a.type()) {
  case cohort::dtype::f64:
    dt = py::dtype::of<double>();
    break;
  case cohort::dtype::i32:
    dt = py::dtype::of<int32_t>();
    break;
  case cohort::dtype::i64:
    dt = py::dtype::of<int64_t>();
    break;
  case cohort::dtype::u8:
    dt = py::dtype::of<uint8_t>();
    break;
  default:
    dt = py::dtype::of<float>();
  }
  // Its base holds the attachment, which keeps the mapping while the
  // array lives; detach() refuses while any array does.
  ++att.arrays;
  py::capsule base(new array_hold{self, &att.arrays}, [](void* p) {
    auto* h = static_cast<array_hold*>(p);
    --*h->count;
    delete h;
  });
  py::array arr(dt, {py::ssize_t(a.size())}, {py::ssize_t(dt.itemsize())},
                const_cast<void*>(a.data()), base);
  if (!a.writable())
    arr.attr("setflags")(py::arg("write") = false);
  return arr;
}

struct py_result {
  uint64_t id = 0;
  py::object values;
  py::object indices;
  std::string device;
  uint32_t attempts = 0;
  bool fallback = false;
  py::object object;
};

// A buffer's elements as a read-only array of their type.
py::object values_of(const cohort::buffer& b) {
  switch (b.type()) {
  case cohort::dtype::f64:
    return to_array<double>(b);
  case cohort::dtype::i32:
    return to_array<int32_t>(b);
  case cohort::dtype::i64:
    return to_array<int64_t>(b);
  case cohort::dtype::u8:
    return to_array<uint8_t>(b);
  default:
    return to_array<float>(b);
  }
}

py_result to_py(const cohort::result& r) {
  py_result out;
  out.id = r.id;
  out.values = values_of(r.values);
  out.object = r.object ? py::cast(py_object{r.object}) : py::none();
  out.indices = r.indices.empty() ? py::none() : to_array<int64_t>(r.indices);
  out.device = r.device;
  out.attempts = r.attempts;
  out.fallback = r.fallback;
  return out;
}

cohort::work make_work(const std::string& kernel, const py::list& inputs,
                       uint64_t id, const std::string& tenant, float alpha,
                       uint64_t m, uint64_t n, uint64_t k, uint32_t top_k,
                       uint32_t gang, bool keep_on_device, int32_t priority) {
  auto kn = cohort::kernel_named(kernel);
  if (!kn)
    throw cohort::error{cohort::errc::unknown_kernel,
                        "unknown_kernel: unknown kernel '" + kernel +
                            "' (axpy, dot, nrm2, reduce_sum, inclusive_scan, "
                            "gemv, gemm, topk_cosine, or a registered one)"};
  auto sig = cohort::signature_of(*kn);
  cohort::work w;
  w.id = id;
  w.tenant = tenant;
  w.kernel = *kn;
  w.args.alpha = alpha;
  w.args.m = m;
  w.args.n = n;
  w.args.k = k;
  w.args.top_k = top_k;
  w.gang = gang;
  w.keep_on_device = keep_on_device;
  w.priority = priority;
  size_t slot = 0;
  for (auto in : inputs) {
    if (py::isinstance<py_object>(in)) {
      // Read where it is.
      w.inputs.push_back(cohort::buffer{in.cast<const py_object&>().ref});
      ++slot;
      continue;
    }
    std::optional<cohort::dtype> want;
    if (sig && slot < sig->inputs.size())
      want = sig->inputs[slot].type;
    w.inputs.push_back(to_buffer(in, want));
    ++slot;
  }
  return w;
}

// Settles a concurrent.futures.Future with an end; takes the reference
// `future` holds. Needs the GIL.
void settle(PyObject* future, cohort::outcome o) {
  auto fut = py::reinterpret_steal<py::object>(future);
  try {
    if (o)
      fut.attr("set_result")(to_py(o.value()));
    else
      fut.attr("set_exception")(make_error(o.code(), o.message()));
  } catch (py::error_already_set& e) {
    // The future was settled another way (InvalidStateError): the end has
    // nowhere to go.
    e.discard_as_unraisable("cohort: setting a future");
  }
}

// Ends gathered on a runtime's callback thread, settled once the batch of
// callbacks has run, under one GIL acquisition (not one per end).
struct pending_end {
  PyObject* future;
  cohort::outcome o;
};
thread_local std::vector<pending_end> pending_ends;

void settle_pending() {
  std::vector<pending_end> ends;
  ends.swap(pending_ends);
  py::gil_scoped_acquire gil;
  for (auto& e : ends)
    settle(e.future, std::move(e.o));
}

// Sets a concurrent.futures.Future from Cohort's callback thread: the end
// joins the batch that settle_pending settles.
struct future_setter {
  PyObject* future; // one reference, handed to settle
  cohort::runtime* rt;

  void operator()(cohort::outcome o) {
    bool first = pending_ends.empty();
    pending_ends.push_back({std::exchange(future, nullptr), std::move(o)});
    if (first)
      rt->after_callbacks(settle_pending);
  }
};

// The ticket of an item submitted with a callback (submit): cancels that
// item only (Runtime.submit_async's cancellation).
struct py_ticket {
  cohort::ticket t;
};

class py_runtime {
public:
  py_runtime(std::optional<uint32_t> cpu_workers, uint32_t simulated_gpus,
             bool gpus, const std::string& audit_path,
             const std::string& config_file, const std::string& config_text,
             const std::string& share_socket) {
    cohort::options opts;
    opts.cpu_workers = cpu_workers;
    opts.simulated_gpus = simulated_gpus;
    opts.gpus = gpus;
    opts.audit_path = audit_path;
    opts.config_file = config_file;
    opts.config_text = config_text;
    opts.share_socket = share_socket;
    py::gil_scoped_release nogil;
    rt_ = std::make_unique<cohort::runtime>(cohort::runtime::start(opts));
  }

  py_ticket submit(py::object future, const std::string& kernel,
                   const py::list& inputs, uint64_t id,
                   const std::string& tenant, float alpha, uint64_t m,
                   uint64_t n, uint64_t k, uint32_t top_k, uint32_t gang,
                   bool keep_on_device, int32_t priority) {
    auto& rt = live();
    auto w = make_work(kernel, inputs, id, tenant, alpha, m, n, k, top_k, gang,
                       keep_on_device, priority);
    future_setter set{future.release().ptr(), &rt};
    py::gil_scoped_release nogil;
    return py_ticket{rt.submit(std::move(w), std::move(set))};
  }

  void cancel_ticket(const py_ticket& t) {
    waiting([&t](cohort::runtime& rt) { rt.cancel(t.t); });
  }

  py_result run(const std::string& kernel, const py::list& inputs, uint64_t id,
                const std::string& tenant, float alpha, uint64_t m, uint64_t n,
                uint64_t k, uint32_t top_k, uint32_t gang, bool keep_on_device,
                int32_t priority, std::optional<double> timeout) {
    auto w = make_work(kernel, inputs, id, tenant, alpha, m, n, k, top_k, gang,
                       keep_on_device, priority);
    std::optional<cohort::outcome> o;
    {
      py::gil_scoped_release nogil;
      if (timeout) {
        auto ms = std::chrono::milliseconds{int64_t(*timeout * 1000)};
        o.emplace(live().run(std::move(w), ms));
      } else {
        o.emplace(live().run(std::move(w)));
      }
    }
    if (!*o) {
      auto ex = make_error(o->code(), o->message());
      PyErr_SetObject(error_class, ex.ptr());
      throw py::error_already_set();
    }
    return to_py(o->value());
  }

  // Every call that waits on the runtime's actors lets go of the GIL: an
  // actor thread may need it meanwhile (dropping the last reference to a
  // NumPy input an item held).
  void cancel(uint64_t id) {
    waiting([id](cohort::runtime& rt) { rt.cancel(id); });
  }

  py::list devices() {
    py::list out;
    auto devs = waiting([](cohort::runtime& rt) { return rt.devices(); });
    for (auto& d : devs) {
      py::dict x;
      x["name"] = d.name;
      x["kind"] = d.kind;
      x["model"] = d.model;
      x["simulated"] = d.simulated;
      x["memory_bytes"] = d.memory_bytes;
      x["streams"] = d.streams;
      x["numa_node"] = d.numa_node;
      py::list links;
      for (auto& l : d.links) {
        py::dict link;
        link["peer"] = l.peer;
        link["kind"] = l.kind;
        links.append(link);
      }
      x["links"] = links;
      out.append(x);
    }
    return out;
  }

  py::dict stats() {
    auto s = waiting([](cohort::runtime& rt) { return rt.stats(); });
    py::dict x;
    x["admitted"] = s.admitted;
    x["rejected"] = s.rejected;
    x["completed"] = s.completed;
    x["failed"] = s.failed;
    x["cancelled"] = s.cancelled;
    x["fallbacks"] = s.fallbacks;
    x["per_device"] = s.per_device;
    return x;
  }

  std::vector<std::string> load_kernel_bundle(const std::string& dir) {
    return live().load_kernel_bundle(dir);
  }

  py::list headroom(const std::string& tenant) {
    py::list out;
    auto rooms =
        waiting([&tenant](cohort::runtime& rt) { return rt.headroom(tenant); });
    for (auto& t : rooms) {
      py::dict x;
      x["tenant"] = t.tenant;
      x["inflight"] = t.inflight;
      x["max_inflight"] = t.max_inflight;
      x["waiting"] = t.waiting;
      x["memory"] = t.memory;
      x["memory_quota"] = t.memory_quota;
      x["cpu_workers"] = t.cpu_workers;
      py::list devs;
      for (auto& d : t.devices) {
        py::dict y;
        y["device"] = d.device;
        y["used"] = d.used;
        y["quota"] = d.quota;
        y["reserved"] = d.reserved;
        y["headroom"] = d.headroom;
        y["ceiling"] = d.ceiling;
        devs.append(y);
      }
      x["devices"] = devs;
      out.append(x);
    }
    return out;
  }

  py::dict dry_run(const py::list& steps, bool from_now) {
    std::vector<cohort::dry_run_step> plan;
    for (auto item : steps) {
      auto d = item.cast<py::dict>();
      cohort::dry_run_step st;
      auto get = [&](const char* key) {
        return d.contains(key) ? d[key].cast<std::string>() : std::string{};
      };
      st.tenant = get("tenant");
      st.device = get("device");
      st.kernel = get("kernel");
      st.label = get("label");
      st.free = get("free");
      st.bytes = d.contains("bytes") ? d["bytes"].cast<uint64_t>() : 0;
      plan.push_back(std::move(st));
    }
    auto r = waiting([&plan, from_now](cohort::runtime& rt) {
      return rt.dry_run(plan, from_now);
    });
    py::dict x;
    x["ok"] = r.ok;
    py::list out;
    for (auto& s : r.steps) {
      py::dict y;
      y["ok"] = s.ok;
      y["error"] = s.error;
      y["detail"] = s.detail;
      y["soft"] = s.soft;
      out.append(y);
    }
    x["steps"] = out;
    x["tenant_peaks"] = r.tenant_peaks;
    return x;
  }

  py_object put(const std::string& tenant, py::handle array,
                const std::string& device) {
    // An object keeps a float64 array's type (other floating point types
    // become float32, integers and bool as inputs keep theirs).
    std::optional<cohort::dtype> keep;
    if (auto arr = py::array::ensure(array);
        arr && arr.dtype().kind() == 'f' && arr.dtype().itemsize() == 8)
      keep = cohort::dtype::f64;
    auto b = to_buffer(array, keep);
    return waiting([&](cohort::runtime& rt) {
      return py_object{rt.put(tenant, std::move(b), device)};
    });
  }

  py::object get(const py_object& obj) {
    auto b = waiting([&](cohort::runtime& rt) { return rt.get(obj.ref); });
    return values_of(b);
  }

  py::list objects(const std::string& tenant) {
    auto list =
        waiting([&tenant](cohort::runtime& rt) { return rt.objects(tenant); });
    py::list out;
    for (auto& o : list) {
      py::dict x;
      x["id"] = o.id;
      x["tenant"] = o.tenant;
      x["dtype"] = std::string{cohort::to_string(o.type)};
      x["size"] = o.size;
      x["bytes"] = o.bytes;
      x["devices"] = o.devices;
      x["host_copy"] = o.host_copy;
      x["handles"] = o.handles;
      x["readers"] = o.readers;
      x["attached"] = o.attached;
      x["exports"] = o.exports;
      x["age_ms"] = o.age_ms;
      out.append(x);
    }
    return out;
  }

  static py::dict item_dict(const cohort::item_info& i) {
    py::dict x;
    x["job"] = i.job;
    x["id"] = i.id;
    x["client"] = i.client;
    x["tenant"] = i.tenant;
    x["kernel"] = i.kernel;
    x["state"] = i.state;
    x["device"] = i.device;
    x["age_ms"] = i.age_ms;
    x["attempts"] = i.attempts;
    x["cancelling"] = i.cancelling;
    x["priority"] = i.priority;
    x["detail"] = i.detail;
    return x;
  }

  py::list items(const std::string& tenant) {
    auto list =
        waiting([&tenant](cohort::runtime& rt) { return rt.items(tenant); });
    py::list out;
    for (auto& i : list)
      out.append(item_dict(i));
    return out;
  }

  py::dict item(uint64_t job) {
    return item_dict(
        waiting([job](cohort::runtime& rt) { return rt.item(job); }));
  }

  uint64_t cancel_job(uint64_t job) {
    return waiting([job](cohort::runtime& rt) { return rt.cancel_job(job); });
  }

  uint64_t cancel_tenant(const std::string& tenant) {
    return waiting(
        [&tenant](cohort::runtime& rt) { return rt.cancel_tenant(tenant); });
  }

  uint64_t cancel_client(uint64_t client) {
    return waiting(
        [client](cohort::runtime& rt) { return rt.cancel_client(client); });
  }

  uint64_t client() { return live().client(); }

  void start_trace(uint64_t max_events) {
    waiting([max_events](cohort::runtime& rt) { rt.start_trace(max_events); });
  }

  std::string stop_trace() {
    return waiting([](cohort::runtime& rt) { return rt.stop_trace(); });
  }

  std::string share(const py_object& obj, bool write, int64_t uid,
                    uint32_t max_attached) {
    cohort::share_options o;
    o.write = write;
    o.uid = uid;
    o.max_attached = max_attached;
    return waiting([&](cohort::runtime& rt) { return rt.share(obj.ref, o); });
  }

  void unshare(const std::string& token) {
    waiting([&](cohort::runtime& rt) {
      rt.unshare(token);
      return 0;
    });
  }

  std::string share_socket() { return live().share_socket(); }

  std::string audit_path() { return live().audit_path(); }

  void stop() {
    if (!rt_)
      return;
    py::gil_scoped_release nogil;
    rt_->stop();
  }

  bool stopped() const { return rt_ == nullptr; }

  void close() {
    stop();
    py::gil_scoped_release nogil;
    rt_.reset();
  }

private:
  /// fn(runtime) with the GIL let go, for the calls that wait on the
  /// runtime's actors; the result is made before the GIL is taken back.
  template <class F>
  std::invoke_result_t<F&, cohort::runtime&> waiting(F&& fn) {
    auto& rt = live();
    py::gil_scoped_release nogil;
    return fn(rt);
  }

  cohort::runtime& live() {
    if (!rt_)
      throw cohort::error{cohort::errc::shutting_down,
                          "shutting_down: the runtime was closed"};
    return *rt_;
  }

  std::unique_ptr<cohort::runtime> rt_;
};

} // namespace

PYBIND11_MODULE(_cohort, m) {
  m.doc() = "Cohort's native part; use the cohort package";
  auto err = py::exception<cohort::error>(m, "Error", PyExc_RuntimeError);
  error_class = err.ptr();
  Py_INCREF(error_class);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p)
        std::rethrow_exception(p);
    } catch (const cohort::error& e) {
      auto ex = make_error(e.code(), e.what());
      PyErr_SetObject(error_class, ex.ptr());
    }
  });
  m.def("version", [] { return std::string{cohort::version()}; });
  py::class_<py_result>(m, "Result")
      .def_readonly("id", &py_result::id)
      .def_readonly("values", &py_result::values)
      .def_readonly("indices", &py_result::indices)
      .def_readonly("device", &py_result::device)
      .def_readonly("attempts", &py_result::attempts)
      .def_readonly("fallback", &py_result::fallback)
      .def_readonly("object", &py_result::object)
      .def("__repr__", [](const py_result& r) {
        return "<cohort.Result id=" + std::to_string(r.id) +
               " device=" + r.device +
               " values=" + std::to_string(py::len(r.values)) + ">";
      });
  py::class_<py_object>(m, "Object")
      .def_property_readonly("id",
                             [](const py_object& o) { return o.ref.id(); })
      .def_property_readonly("tenant",
                             [](const py_object& o) { return o.ref.tenant(); })
      .def_property_readonly("dtype",
                             [](const py_object& o) {
                               return std::string{
                                   cohort::to_string(o.ref.type())};
                             })
      .def_property_readonly("size",
                             [](const py_object& o) { return o.ref.size(); })
      .def_property_readonly("nbytes",
                             [](const py_object& o) { return o.ref.bytes(); })
      .def("__repr__", [](const py_object& o) {
        return "<cohort.Object id=" + std::to_string(o.ref.id()) +
               " tenant=" + o.ref.tenant() + " " +
               cohort::to_string(o.ref.type()) + "[" +
               std::to_string(o.ref.size()) + "]>";
      });
  py::class_<py_attachment>(m, "Attachment")
      .def(py::init([](const std::string& socket, const std::string& token,
                       bool write) {
             py::gil_scoped_release nogil;
             return py_attachment{
                 cohort::client::attachment::attach(socket, token, write)};
           }),
           py::arg("socket"), py::arg("token"), py::arg("write") = false)
      .def_property_readonly("id",
                             [](const py_attachment& a) { return a.a.id(); })
      .def_property_readonly(
          "object", [](const py_attachment& a) { return a.a.object(); })
      .def_property_readonly(
          "tenant", [](const py_attachment& a) { return a.a.tenant(); })
      .def_property_readonly("dtype",
                             [](const py_attachment& a) {
                               return std::string{
                                   cohort::to_string(a.a.type())};
                             })
      .def_property_readonly("size",
                             [](const py_attachment& a) { return a.a.size(); })
      .def_property_readonly("nbytes",
                             [](const py_attachment& a) { return a.a.bytes(); })
      .def_property_readonly(
          "device", [](const py_attachment& a) { return a.a.device(); })
      .def_property_readonly("memory",
                             [](const py_attachment& a) {
                               switch (a.a.where()) {
                               case cohort::client::memory_kind::cuda:
                                 return "cuda";
                               case cohort::client::memory_kind::hip:
                                 return "hip";
                               default:
                                 return "host";
                               }
                             })
      .def_property_readonly(
          "writable", [](const py_attachment& a) { return a.a.writable(); })
      .def_property_readonly(
          "attached", [](const py_attachment& a) { return a.a.attached(); })
      .def_property_readonly("pointer",
                             [](const py_attachment& a) {
                               return reinterpret_cast<uintptr_t>(a.a.data());
                             })
      .def("array", &attachment_array)
      .def("detach", [](py_attachment& a) {
        if (a.arrays > 0)
          throw cohort::error{
              cohort::errc::invalid_arguments,
              std::to_string(a.arrays) +
                  " array(s) over the attachment's memory are still alive; "
                  "drop them (or copy what you need) before detach()"};
        a.a.detach();
      });
  py::class_<py_ticket>(m, "Ticket");
  py::class_<py_runtime>(m, "NativeRuntime")
      .def(py::init<std::optional<uint32_t>, uint32_t, bool, std::string,
                    std::string, std::string, std::string>(),
           py::arg("cpu_workers"), py::arg("simulated_gpus"), py::arg("gpus"),
           py::arg("audit_path"), py::arg("config_file"),
           py::arg("config_text"), py::arg("share_socket"))
      .def("submit", &py_runtime::submit)
      .def("run", &py_runtime::run)
      .def("cancel", &py_runtime::cancel)
      .def("cancel_ticket", &py_runtime::cancel_ticket)
      .def("devices", &py_runtime::devices)
      .def("stats", &py_runtime::stats)
      .def("headroom", &py_runtime::headroom)
      .def("load_kernel_bundle", &py_runtime::load_kernel_bundle,
           py::arg("dir"), py::call_guard<py::gil_scoped_release>())
      .def("dry_run", &py_runtime::dry_run)
      .def("put", &py_runtime::put)
      .def("get", &py_runtime::get)
      .def("objects", &py_runtime::objects)
      .def("items", &py_runtime::items)
      .def("item", &py_runtime::item)
      .def("cancel_job", &py_runtime::cancel_job)
      .def("cancel_tenant", &py_runtime::cancel_tenant)
      .def("cancel_client", &py_runtime::cancel_client)
      .def("client", &py_runtime::client)
      .def("start_trace", &py_runtime::start_trace)
      .def("stop_trace", &py_runtime::stop_trace)
      .def("share", &py_runtime::share)
      .def("unshare", &py_runtime::unshare)
      .def("share_socket", &py_runtime::share_socket)
      .def("audit_path", &py_runtime::audit_path)
      .def("stop", &py_runtime::stop)
      .def("close", &py_runtime::close)
      .def_property_readonly("closed", &py_runtime::stopped);
}
