#include "devices/gpu/rescan.hpp"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include "devices/gpu/plugin.hpp"
#include "devices/topology.hpp"
#include "ipc/child.hpp"
#include "messages/errc.hpp"
#include "messages/scan.pb.h"

namespace cohort::devices::gpu {

namespace {

/// A string of the helper's answer, cut to a sane length.
std::string bounded(const std::string& s, size_t max = 256) {
  return s.size() <= max ? s : s.substr(0, max);
}

caf::expected<scanned_gpu> from_scan(const pb::GpuScan::Gpu& g) {
  scanned_gpu out;
  out.vendor = g.vendor();
  if (out.vendor != "CUDA" && out.vendor != "HIP")
    return make_error(errc::io_error, "the GPU scan named a backend '" +
                                          bounded(out.vendor, 32) +
                                          "' (CUDA or HIP)");
  out.ordinal = g.ordinal();
  if (out.ordinal < 0 || out.ordinal > 4096)
    return make_error(errc::io_error, "the GPU scan gave ordinal " +
                                          std::to_string(out.ordinal));
  out.visible = bounded(g.visible());
  auto& i = g.info();
  auto& x = out.info;
  x.name = bounded(i.name(), 64);
  x.kind = out.vendor == "CUDA" ? device_kind::cuda_gpu : device_kind::hip_gpu;
  x.model = bounded(i.model());
  x.memory_bytes = i.memory_bytes();
  x.streams = std::max(1u, i.streams());
  x.speed = i.speed() > 0 ? i.speed() : 1.0;
  x.cores = i.cores();
  x.numa_node = i.numa_node();
  x.pci_bus_id = bounded(i.pci_bus_id(), 64);
  x.uuid = bounded(i.uuid(), 128);
  x.arch = bounded(i.arch(), 64);
  x.multiprocessors = i.multiprocessors();
  return out;
}

} // namespace

caf::expected<gpu_scan> scan_gpus(std::chrono::milliseconds timeout,
                                  const std::function<bool()>& cancelled) {
  ipc::child_request req;
  std::string searched;
  for (auto& dir : plugin_dirs()) {
    auto candidate = std::filesystem::path{dir} / scan_program;
    if (::access(candidate.c_str(), X_OK) == 0) {
      req.program = candidate.string();
      break;
    }
    searched += (searched.empty() ? "" : ", ") + dir;
  }
  if (req.program.empty())
    return make_error(errc::io_error,
                      std::string{"no "} + scan_program +
                          " to scan the GPUs with (searched: " +
                          (searched.empty() ? "nowhere" : searched) +
                          "; set COHORT_PLUGIN_PATH to the folder holding it)");
  req.args = {"--parent", std::to_string(::getpid())};
  req.timeout = timeout;
  req.cancelled = cancelled;
  req.max_output = size_t{1} << 20;
  req.label = "cohort-gpu-scan";
  auto end = ipc::run_child(req);
  if (end.cancelled)
    return make_error(errc::shutting_down,
                      "the GPU scan was stopped: the node is stopping");
  if (end.timed_out)
    return make_error(errc::timed_out, "the GPU scan " + end.describe(timeout));
  if (!end.clean())
    return make_error(
        errc::io_error,
        "the GPU scan " + end.describe(timeout) +
            (end.stderr_tail.empty() ? "" : "; it wrote: " + end.stderr_tail));
  pb::GpuScan answer;
  if (!answer.ParseFromString(end.output))
    return make_error(errc::io_error, "the GPU scan's answer does not parse");
  if (size_t(answer.gpu_size()) > max_scanned_gpus)
    return make_error(errc::io_error, "the GPU scan found " +
                                          std::to_string(answer.gpu_size()) +
                                          " GPUs, more than " +
                                          std::to_string(max_scanned_gpus));
  gpu_scan out;
  for (auto& g : answer.gpu()) {
    auto x = from_scan(g);
    if (!x)
      return x.error();
    out.gpus.push_back(std::move(*x));
  }
  for (int i = 0; i < answer.note_size() && i < 16; ++i)
    out.notes.push_back(bounded(answer.note(i), 1024));
  for (auto& v : answer.listed())
    out.listed.insert(bounded(v, 16));
  for (auto& v : answer.mig_listed())
    out.mig_listed.insert(bounded(v, 16));
  return out;
}

std::string identity(const std::string& vendor, const device_info& info) {
  if (!info.uuid.empty())
    return vendor + "/" + info.uuid;
  auto bus = canonical_pci_bus_id(info.pci_bus_id);
  if (!bus.empty())
    return vendor + "/pci:" + bus;
  return {};
}

rescan_plan plan_rescan(const std::vector<known_gpu>& known,
                        const std::vector<scanned_gpu>& scanned,
                        uint32_t missing_scans,
                        const std::set<std::string>& listed,
                        const std::set<std::string>& mig_listed) {
  missing_scans = std::max<uint32_t>(missing_scans, 1);
  rescan_plan plan;
  // The scan by identity; one seen twice is not trusted for either.
  std::map<std::string, size_t> found;
  std::map<std::string, bool> twice;
  for (size_t i = 0; i < scanned.size(); ++i) {
    auto id = identity(scanned[i].vendor, scanned[i].info);
    if (id.empty()) {
      plan.ignored.push_back(scanned[i].info.name +
                             ": no UUID and no PCI bus id to know it by");
      continue;
    }
    if (found.contains(id)) {
      twice[id] = true;
      continue;
    }
    found.emplace(id, i);
  }
  for (auto& [id, _] : twice) {
    plan.ignored.push_back(id + ": found twice in one scan");
    found.erase(id);
  }
  std::map<std::string, bool> matched;
  plan.missed.reserve(known.size());
  for (auto& k : known) {
    auto id = identity(k.vendor, k.info);
    auto hit = id.empty() ? found.end() : found.find(id);
    if (hit == found.end() || twice.contains(id)) {
      // A duplicate in the scan says nothing of this GPU either way, nor
      // does a scan that could not list its kind, nor can a GPU without an
      // identity be looked for.
      bool seeable =
          !id.empty() && !twice.contains(id) &&
          (k.visible.empty() ? listed : mig_listed).contains(k.vendor);
      uint32_t missed = seeable ? k.missed + 1 : k.missed;
      plan.missed.push_back(k.removed ? 0 : missed);
      if (!k.removed && missed >= missing_scans && k.missed < missing_scans)
        plan.vanished.push_back(k.index);
      if (!id.empty())
        matched[id] = true; // never added again under another index
      continue;
    }
    matched[id] = true;
    plan.missed.push_back(0);
    auto& s = scanned[hit->second];
    if (k.removed)
      plan.returned.emplace_back(k.index, hit->second);
    else if (s.ordinal != k.ordinal || s.visible != k.visible)
      plan.moved.emplace_back(k.index, hit->second);
  }
  for (auto& [id, i] : found)
    if (!matched.contains(id))
      plan.added.push_back(i);
  std::sort(plan.added.begin(), plan.added.end());
  return plan;
}

} // namespace cohort::devices::gpu
