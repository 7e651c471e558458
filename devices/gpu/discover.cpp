#include "devices/gpu/discover.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>
#include <string_view>

#include "devices/gpu/plugin.hpp"
#include "devices/health/gpu_watch.hpp"
#include "devices/topology.hpp"
#include "messages/errc.hpp"

namespace cohort::devices::gpu {

namespace {

std::shared_ptr<api> runtime_of(const plugin_load& p) {
  return p.entry ? p.entry->make_runtime() : nullptr;
}

std::atomic<bool> cuda_made{false};

} // namespace

std::shared_ptr<api> cuda_runtime() {
  static auto rt = [] {
    cuda_made = true;
    return runtime_of(plugin("CUDA"));
  }();
  return rt;
}

bool cuda_runtime_made() {
  return cuda_made;
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

void add_note(backend_status& st, const std::string& note) {
  st.note += (st.note.empty() ? "" : "; ") + note;
}

// This process's CUDA_VISIBLE_DEVICES, split at commas; nullopt when unset.
std::optional<std::vector<std::string>> cuda_visible_devices() {
  auto* env = std::getenv("CUDA_VISIBLE_DEVICES");
  if (env == nullptr)
    return std::nullopt;
  std::vector<std::string> out;
  std::string_view rest{env};
  while (!rest.empty() && out.size() < 256) {
    auto comma = rest.find(',');
    auto token = rest.substr(0, comma);
    while (!token.empty() && token.front() == ' ')
      token.remove_prefix(1);
    while (!token.empty() && token.back() == ' ')
      token.remove_suffix(1);
    out.emplace_back(token);
    rest = comma == std::string_view::npos ? "" : rest.substr(comma + 1);
  }
  return out;
}

// Whether `visible` (CUDA_VISIBLE_DEVICES) gives this process instance `x`
// of GPU `g`: when it names the instance (its UUID, or a start of it that
// no other UUID of `ids` has, as CUDA takes them, or "MIG-<GPU
// UUID>/<GPU instance>/<compute instance>"), its GPU (UUID, likewise), or
// lists indices and the process's CUDA shows `g` (`shown`: the bus ids of
// the devices it lists).
bool mig_visible(const std::vector<std::string>& visible,
                 const health::mig_gpu& g, const health::mig_instance& x,
                 const std::set<std::string>& shown,
                 const std::vector<std::string>& ids) {
  auto names = [&](const std::string& id, const std::string& token) {
    if (id.empty() || token.size() <= 4 || !id.starts_with(token))
      return false;
    return id == token ||
           std::count_if(ids.begin(), ids.end(), [&](const std::string& other) {
             return other.starts_with(token);
           }) == 1;
  };
  auto legacy = "MIG-" + g.uuid + "/" + std::to_string(x.gpu_instance_id) +
                "/" + std::to_string(x.compute_instance_id);
  for (auto& token : visible) {
    if (names(x.uuid, token) || (!g.uuid.empty() && token == legacy) ||
        (!g.uuid.empty() && names(g.uuid, token)))
      return true;
    if (!token.empty() &&
        token.find_first_not_of("0123456789") == std::string::npos &&
        shown.contains(g.pci_bus_id))
      return true;
  }
  return false;
}

// The instances of the GPUs in MIG mode `migs` that this node runs, as
// devices probed for host processes: "mig<GPU>.<instance>", each seeing its
// instance alone (CUDA_VISIBLE_DEVICES=its UUID, ordinal 0). Compute
// instances of one GPU instance share its memory in equal parts. `shown`
// maps the bus ids of the devices the node's runtime lists to their
// architecture. Left out, with a note: an instance `open_here` keeps in the
// node's process (a process sees one instance at most), one the node's
// CUDA_VISIBLE_DEVICES does not give it, and those NVML could not read.
std::vector<probed_gpu>
mig_instances(backend_status& st, const std::vector<health::mig_gpu>& migs,
              const std::map<std::string, std::string>& shown,
              const std::string& vendor, device_kind kind,
              const gpu_options& opts,
              const std::function<bool(const std::string&)>& open_here) {
  std::vector<probed_gpu> out;
  auto visible = kind == device_kind::cuda_gpu
                     ? cuda_visible_devices()
                     : std::optional<std::vector<std::string>>{};
  std::set<std::string> shown_buses;
  for (auto& [bus, arch] : shown)
    shown_buses.insert(bus);
  std::vector<std::string> ids; // every UUID a token could start
  for (auto& g : migs) {
    ids.push_back(g.uuid);
    for (auto& x : g.instances)
      ids.push_back(x.uuid);
  }
  size_t not_visible = 0;
  for (auto& g : migs) {
    auto gpu = "GPU " + std::to_string(g.index) + " (in MIG mode)";
    for (auto& problem : g.problems)
      add_note(st, gpu + ": " + problem);
    if (g.pci_bus_id.empty())
      continue;
    auto bus = canonical_pci_bus_id(g.pci_bus_id);
    std::map<uint32_t, uint32_t> sharing; // compute instances per GPU one
    for (auto& x : g.instances)
      ++sharing[x.gpu_instance_id];
    for (auto& x : g.instances) {
      auto name =
          "mig" + std::to_string(g.index) + "." + std::to_string(x.index);
      if (visible && !mig_visible(*visible, g, x, shown_buses, ids)) {
        ++not_visible;
        continue;
      }
      if (!open_here || open_here(name)) {
        add_note(st, name + ": a MIG instance runs in a device host process "
                            "of its own, and this process opens its GPUs in "
                            "its own (docs/device-hosts.md)");
        continue;
      }
      auto share = std::max(1u, sharing[x.gpu_instance_id]);
      device_info info;
      info.name = name;
      info.kind = kind;
      if (!x.name.empty()) {
        info.model = x.name;
      } else {
        // NVML's own spelling, "MIG 1c.3g.20gb", from the slices and the
        // memory in MiB / 1000.
        info.model = g.model + " MIG ";
        if (x.compute_slices != x.gpu_slices)
          info.model += std::to_string(x.compute_slices) + "c.";
        info.model += std::to_string(x.gpu_slices) + "g." +
                      std::to_string(((x.memory_bytes >> 20) + 500) / 1000) +
                      "gb";
      }
      info.memory_bytes = x.memory_bytes / share;
      info.streams = std::max(1u, opts.streams);
      info.cores = info.multiprocessors = x.multiprocessors;
      info.pci_bus_id = bus;
      info.uuid = x.uuid;
      info.arch = g.arch;
      if (auto a = shown.find(bus); info.arch.empty() && a != shown.end())
        info.arch = a->second;
      info.numa_node = numa_node_of_pci(bus);
      probed_gpu p;
      p.info = std::move(info);
      p.vendor = vendor;
      p.ordinal = 0;
      p.visible = x.uuid;
      p.monitor = opts.monitor;
      p.gpu_instance = x.gpu_instance_id;
      out.push_back(std::move(p));
    }
  }
  if (not_visible > 0)
    add_note(st, std::to_string(not_visible) +
                     " MIG instance(s) left out: this process's "
                     "CUDA_VISIBLE_DEVICES does not name them");
  return out;
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
  // No device may still mean MIG instances, which NVML lists.
  std::string count_error;
  st.listed = true;
  if (auto rc = rt->device_count(n); rc.failed()) {
    count_error = ": " + rt->describe(rc.raw);
    n = 0;
    st.listed = rc.code == status::no_device;
  }
  auto opts = base;
  // Every GPU is watched here, those opened in a host process too: the
  // host acts on its GPU's events, the node counts them and reads health.
  opts.monitor = monitor_of(loaded, kind);
  st.monitor = opts.monitor;
  if (opts.monitor && !opts.monitor->available())
    st.note = "health unavailable: " + opts.monitor->unavailable_reason();
  // GPUs in MIG mode: the runtime shows a process one instance at most, so
  // each instance is a device of its own in a host process that sees it
  // alone; what the runtime lists on the bus of a GPU with an instance so
  // hosted is a view of one instance, left out.
  std::vector<health::mig_gpu> migs;
  st.mig_listed = opts.monitor && opts.monitor->available();
  if (st.mig_listed)
    migs = opts.monitor->mig_gpus();
  if (n == 0 && migs.empty()) {
    add_note(st, "no " + loaded.vendor + " device" + count_error);
    out.backends.push_back(std::move(st));
    return;
  }
  std::vector<std::string> view_bus(static_cast<size_t>(n));
  std::map<std::string, std::string> shown; // bus id -> architecture
  // Each probe kept, for a GPU opened in a host process below.
  using probe_result = caf::expected<std::pair<device_info, properties>>;
  std::vector<std::optional<probe_result>> views(static_cast<size_t>(n));
  if (!migs.empty())
    for (int i = 0; i < n; ++i) {
      auto& view = views[size_t(i)];
      view = probe_gpu(*rt, i, kind, prefix + std::to_string(i), opts.streams);
      if (*view) {
        view_bus[size_t(i)] = canonical_pci_bus_id((*view)->first.pci_bus_id);
        shown[view_bus[size_t(i)]] = (*view)->first.arch;
      }
    }
  auto instances =
      mig_instances(st, migs, shown, loaded.vendor, kind, opts, open_here);
  std::set<std::string> hosted_buses;
  for (auto& p : instances)
    hosted_buses.insert(p.info.pci_bus_id);
  // Name and bus id of each GPU found, for the links between them.
  std::vector<std::pair<std::string, std::string>> found;
  for (int i = 0; i < n; ++i) {
    auto name = prefix + std::to_string(i);
    if (hosted_buses.contains(view_bus[size_t(i)]))
      continue;
    if (open_here && !open_here(name)) {
      auto probed = views[size_t(i)]
                        ? std::move(*views[size_t(i)])
                        : probe_gpu(*rt, i, kind, name, opts.streams);
      if (!probed) {
        add_note(st, describe(probed.error()));
        continue;
      }
      found.emplace_back(name, probed->first.pci_bus_id);
      out.probed.push_back(
          {std::move(probed->first), loaded.vendor, i, {}, opts.monitor});
      out.order.push_back(name);
      ++st.count;
      continue;
    }
    auto dev = gpu_device::open(rt, i, kind, name, opts);
    if (!dev) {
      add_note(st, describe(dev.error()));
      continue;
    }
    found.emplace_back(name, (*dev)->info().pci_bus_id);
    out.devices.push_back(std::move(*dev));
    out.order.push_back(name);
    ++st.count;
  }
  for (auto& p : instances) {
    out.order.push_back(p.info.name);
    out.probed.push_back(std::move(p));
    ++st.count;
  }
  if (st.count == 0)
    add_note(st, "no " + loaded.vendor + " device" + count_error);
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
  if (!opts.mig_instance.empty() && opts.monitor && opts.monitor->available())
    opts.gpu_instance =
        health::mig_gpu_instance(*opts.monitor, opts.mig_instance);
  return gpu_device::open(rt, ordinal, kind, name, std::move(opts));
}

} // namespace cohort::devices::gpu
