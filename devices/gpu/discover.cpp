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

// The health library the GPUs of `loaded` are watched with.
std::shared_ptr<health::gpu_monitor> monitor_of(const plugin_load& loaded,
                                                device_kind kind) {
  if (loaded.entry->make_monitor)
    return loaded.entry->make_monitor();
  if (kind == device_kind::cuda_gpu)
    return health::open_nvml();
  return nullptr;
}

void open_backend(discovery& out, const plugin_load& loaded,
                  std::shared_ptr<api> rt, device_kind kind, const char* prefix,
                  const gpu_options& base,
                  const std::function<bool(const std::string&)>& open_here) {
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
  // Every GPU is watched here, those opened in a host process too: the
  // host acts on its GPU's events, the node counts them and reads health.
  opts.monitor = monitor_of(loaded, kind);
  if (opts.monitor && !opts.monitor->available())
    st.note = "health unavailable: " + opts.monitor->unavailable_reason();
  // Name and bus id of each GPU found, for the links between them.
  std::vector<std::pair<std::string, std::string>> found;
  for (int i = 0; i < n; ++i) {
    auto name = prefix + std::to_string(i);
    if (open_here && !open_here(name)) {
      auto probed = probe_gpu(*rt, i, kind, name, opts.streams);
      if (!probed) {
        st.note += (st.note.empty() ? "" : "; ") + describe(probed.error());
        continue;
      }
      found.emplace_back(name, probed->first.pci_bus_id);
      out.probed.push_back(
          {std::move(probed->first), loaded.vendor, i, opts.monitor});
      out.order.push_back(name);
      ++st.count;
      continue;
    }
    auto dev = gpu_device::open(rt, i, kind, name, opts);
    if (!dev) {
      st.note += (st.note.empty() ? "" : "; ") + describe(dev.error());
      continue;
    }
    found.emplace_back(name, (*dev)->info().pci_bus_id);
    out.devices.push_back(std::move(*dev));
    out.order.push_back(name);
    ++st.count;
  }
  out.backends.push_back(std::move(st));
  if (!opts.monitor || !opts.monitor->available())
    return;
  for (size_t i = 0; i < found.size(); ++i)
    for (size_t j = i + 1; j < found.size(); ++j) {
      auto& [a, a_bus] = found[i];
      auto& [b, b_bus] = found[j];
      // Instances of one card (MIG) share its bus id.
      if (a_bus.empty() || b_bus.empty() || a_bus == b_bus)
        continue;
      if (auto kind = opts.monitor->link_between(a_bus, b_bus);
          kind != link_kind::none)
        out.links.push_back({a, b, kind});
    }
}

} // namespace

discovery discover(const gpu_options& opts,
                   const std::function<bool(const std::string&)>& open_here) {
  discovery out;
  open_backend(out, plugin("CUDA"), cuda_runtime(), device_kind::cuda_gpu,
               "cuda", opts, open_here);
  open_backend(out, plugin("HIP"), hip_runtime(), device_kind::hip_gpu, "hip",
               opts, open_here);
  return out;
}

caf::expected<std::shared_ptr<gpu_device>> open_gpu(const std::string& vendor,
                                                    int ordinal,
                                                    const std::string& name,
                                                    gpu_options opts) {
  bool cuda = vendor == "CUDA";
  if (!cuda && vendor != "HIP")
    return make_error(errc::malformed_config, "no GPU backend is called '" +
                                                  vendor.substr(0, 32) +
                                                  "' (CUDA or HIP)");
  auto& loaded = plugin(vendor);
  auto rt = cuda ? cuda_runtime() : hip_runtime();
  if (!rt)
    return make_error(errc::device_lost,
                      "the " + vendor +
                          " plugin did not load in this "
                          "process: " +
                          (loaded.entry ? "it made no runtime" : loaded.note));
  int n = 0;
  if (auto rc = rt->device_count(n); rc.failed())
    return make_error(errc::device_lost,
                      "no " + vendor + " device: " + rt->describe(rc.raw));
  if (ordinal < 0 || ordinal >= n)
    return make_error(errc::device_lost,
                      name + ": " + vendor + " has no device " +
                          std::to_string(ordinal) + " here (it has " +
                          std::to_string(n) + ")");
  auto kind = cuda ? device_kind::cuda_gpu : device_kind::hip_gpu;
  opts.monitor = monitor_of(loaded, kind);
  return gpu_device::open(rt, ordinal, kind, name, std::move(opts));
}

} // namespace cohort::devices::gpu
