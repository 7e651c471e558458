#include "devices/gpu/discover.hpp"

#include "devices/gpu/plugin.hpp"
#include "messages/errc.hpp"

namespace cohort::devices::gpu {

namespace {

std::shared_ptr<api> runtime_of(const plugin_load& p) {
  return p.entry ? p.entry->make_runtime() : nullptr;
}

} // namespace

std::shared_ptr<api> cuda_runtime() {
  static auto rt = runtime_of(plugin("CUDA"));
  return rt;
}

std::shared_ptr<api> hip_runtime() {
  static auto rt = runtime_of(plugin("HIP"));
  return rt;
}

namespace {

void open_backend(discovery& out, const plugin_load& loaded,
                  std::shared_ptr<api> rt, device_kind kind, const char* prefix,
                  const gpu_options& base) {
  backend_status st;
  st.vendor = loaded.vendor;
  st.loaded = rt != nullptr;
  st.plugin = loaded.path.empty() ? loaded.file : loaded.path;
  if (!rt) {
    st.note = loaded.entry ? "the plugin made no runtime" : loaded.note;
    out.backends.push_back(std::move(st));
    return;
  }
  int n = 0;
  if (auto rc = rt->device_count(n); rc.failed() || n == 0) {
    st.note = rc.failed()
                  ? "no " + loaded.vendor + " device: " + rt->describe(rc.raw)
                  : "no " + loaded.vendor + " device";
    out.backends.push_back(std::move(st));
    return;
  }
  auto opts = base;
  if (loaded.entry->make_monitor)
    opts.monitor = loaded.entry->make_monitor();
  else if (kind == device_kind::cuda_gpu)
    opts.monitor = health::open_nvml();
  if (opts.monitor && !opts.monitor->available())
    st.note = "health unavailable: " + opts.monitor->unavailable_reason();
  for (int i = 0; i < n; ++i) {
    auto dev = gpu_device::open(rt, i, kind, prefix + std::to_string(i), opts);
    if (!dev) {
      st.note += (st.note.empty() ? "" : "; ") + describe(dev.error());
      continue;
    }
    out.devices.push_back(std::move(*dev));
    ++st.count;
  }
  out.backends.push_back(std::move(st));
}

} // namespace

discovery discover(const gpu_options& opts) {
  discovery out;
  open_backend(out, plugin("CUDA"), cuda_runtime(), device_kind::cuda_gpu,
               "cuda", opts);
  open_backend(out, plugin("HIP"), hip_runtime(), device_kind::hip_gpu, "hip",
               opts);
  return out;
}

} // namespace cohort::devices::gpu
