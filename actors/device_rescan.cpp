#include "actors/device_rescan.hpp"

#include <algorithm>

#include "devices/topology.hpp"
#include "messages/errc.hpp"

namespace cohort::actors {

namespace {

using devices::gpu::identity;

// "NVIDIA H100 (CUDA ordinal 2, bus 0000:3b:00.0, GPU-...)".
std::string describe_gpu(const devices::gpu::scanned_gpu& s) {
  auto& x = s.info;
  std::string out = x.model.empty() ? std::string{"a GPU"} : x.model;
  out += " (" + s.vendor + " ordinal " + std::to_string(s.ordinal);
  if (!x.pci_bus_id.empty())
    out += ", bus " + x.pci_bus_id;
  if (!x.uuid.empty())
    out += ", " + x.uuid;
  return out + ")";
}

// How the planner knows GPU `g` of the fleet.
devices::gpu::known_gpu known_of(const rescan_gpu& g) {
  devices::gpu::known_gpu k;
  k.index = g.index;
  k.vendor = g.vendor;
  // The node's process keeps the ordinals its runtime gave it: only a
  // host process opens a GPU where a scan finds it.
  k.ordinal = g.hosted ? g.ordinal : -1;
  k.visible = g.hosted ? g.visible : std::string{};
  k.info = g.info;
  return k;
}

std::string where(const devices::gpu::scanned_gpu& s) {
  return s.vendor + " ordinal " + std::to_string(s.ordinal) +
         (s.visible.empty() ? "" : " of " + s.visible);
}

} // namespace

device_rescanner::device_rescanner(std::vector<rescan_gpu> gpus,
                                   rescan_settings settings, rescan_actions act)
    : settings_(settings), act_(std::move(act)), gpus_(std::move(gpus)) {
  settings_.missing_scans = std::max<uint32_t>(settings_.missing_scans, 1);
  if (!act_.scan)
    act_.scan = [](std::chrono::milliseconds timeout,
                   const std::function<bool()>& cancelled) {
      return devices::gpu::scan_gpus(timeout, cancelled);
    };
  for (auto& g : gpus_)
    known_.push_back(known_of(g));
}

device_rescanner::~device_rescanner() {
  stop();
}

caf::expected<rescan_report> device_rescanner::rescan() {
  // An HTTP thread asks too: it is not held waiting for another scan.
  std::unique_lock<std::mutex> one{scan_mtx_, std::try_to_lock};
  if (!one.owns_lock())
    return make_error(errc::invalid_transition,
                      "a rescan is under way: ask again when it ends");
  auto scan = act_.scan(settings_.timeout, [this] {
    std::lock_guard<std::mutex> guard{mtx_};
    return stopping_;
  });
  {
    // A node that stops meanwhile is not acted on, and a scan it stopped
    // is not a failure.
    std::lock_guard<std::mutex> guard{mtx_};
    if (stopping_)
      return make_error(errc::shutting_down, "the node is stopping");
  }
  if (!scan) {
    {
      std::lock_guard<std::mutex> guard{mtx_};
      ++counts_.scans;
      ++counts_.failed;
    }
    act_.audit("", "rescan failed: " + describe(scan.error()) +
                       "; the fleet is left as it was");
    return scan.error();
  }
  // known_ and gpus_ change only here, under scan_mtx_.
  auto plan =
      devices::gpu::plan_rescan(known_, scan->gpus, settings_.missing_scans,
                                scan->listed, scan->mig_listed);
  rescan_report r;
  r.notes = scan->notes;
  for (auto& why : plan.ignored)
    r.notes.push_back("left out: " + why);
  std::map<size_t, size_t> at; // device index -> position in known_
  for (size_t k = 0; k < known_.size(); ++k) {
    at[known_[k].index] = k;
    known_[k].missed = plan.missed[k];
  }
  std::unique_lock<std::mutex> guard{mtx_};
  r.scan = ++counts_.scans;
  for (auto index : plan.vanished) {
    auto k = at.at(index);
    auto& name = gpus_[k].info.name;
    auto why = "missing from " + std::to_string(known_[k].missed) +
               " scan(s) in a row (" +
               identity(gpus_[k].vendor, gpus_[k].info) + ")";
    known_[k].removed = true;
    removed_[name] = why;
    ++counts_.removed;
    act_.remove(index, why);
    act_.audit(name, "rescan: removed from the machine: " + why +
                         "; lost for good, its work moves on");
    r.removed.push_back(name + ": " + why);
  }
  for (size_t k = 0; k < known_.size(); ++k)
    if (!known_[k].removed && known_[k].missed > 0)
      r.missing.push_back(gpus_[k].info.name + ": missing from " +
                          std::to_string(known_[k].missed) + " of " +
                          std::to_string(settings_.missing_scans) +
                          " scans before it is removed");
  for (auto [index, i] : plan.returned) {
    auto k = at.at(index);
    auto& g = gpus_[k];
    auto& s = scan->gpus[i];
    auto id = "returned:" + identity(g.vendor, g.info);
    if (!g.hosted) {
      auto text = "found again at " + where(s) +
                  ", but it ran in the node's process, whose GPU runtime "
                  "lists its GPUs once: restart the node to use it";
      if (reported_.insert(id).second)
        act_.audit(g.info.name, "rescan: " + text);
      r.returned.push_back(g.info.name + ": " + text);
      continue;
    }
    reported_.erase(id);
    g.ordinal = known_[k].ordinal = s.ordinal;
    g.visible = known_[k].visible = s.visible;
    known_[k].removed = false;
    removed_.erase(g.info.name);
    ++counts_.returned;
    act_.move(index, s.ordinal, s.visible);
    act_.restore(index);
    auto text =
        "found again at " + where(s) + ": started in a new host process";
    act_.audit(g.info.name, "rescan: " + text);
    r.returned.push_back(g.info.name + ": " + text);
  }
  for (auto [index, i] : plan.moved) {
    auto k = at.at(index);
    auto& g = gpus_[k];
    if (!g.hosted)
      continue;
    auto& s = scan->gpus[i];
    auto text = "now at " + where(s) + " (was " + g.vendor + " ordinal " +
                std::to_string(g.ordinal) +
                "): its next host process opens it there";
    g.ordinal = known_[k].ordinal = s.ordinal;
    g.visible = known_[k].visible = s.visible;
    act_.move(index, s.ordinal, s.visible);
    act_.audit(g.info.name, "rescan: " + text);
    r.moved.push_back(g.info.name + ": " + text);
  }
  // GPUs the node does not run: added when they can be (from then on
  // they are the fleet's, known by identity). Those that cannot be are
  // tried again by each scan, and audited and counted once while they
  // stay on the machine.
  std::set<std::string> still;
  for (auto i : plan.added) {
    auto& s = scan->gpus[i];
    auto id = identity(s.vendor, s.info);
    auto text = describe_gpu(s);
    // Not held while the GPU joins: counts and removed devices are read
    // meanwhile (known_ and gpus_ change only under scan_mtx_).
    guard.unlock();
    auto joined = add(s);
    guard.lock();
    if (joined) {
      if (!reported_.erase(id))
        ++counts_.found;
      ++counts_.added;
      auto& name = joined->info.name;
      auto how = "added to the fleet as device " +
                 std::to_string(joined->index) +
                 ", started in a device host process of its own";
      act_.audit(name, "rescan: found " + text + ": " + how);
      r.added.push_back(name + ": " + text + ": " + how);
      known_.push_back(known_of(*joined));
      gpus_.push_back(std::move(*joined));
      continue;
    }
    still.insert(id);
    text += ": not added: " + describe(joined.error());
    if (reported_.insert(id).second) {
      ++counts_.found;
      act_.audit("", "rescan: found " + text);
    }
    r.found.push_back(std::move(text));
  }
  std::erase_if(reported_, [&](const std::string& id) {
    return !id.starts_with("returned:") && !still.contains(id);
  });
  return r;
}

void device_rescanner::start() {
  if (settings_.interval.count() <= 0 || thread_.joinable())
    return;
  thread_ = std::thread{[this] { loop(); }};
}

void device_rescanner::stop() {
  {
    std::lock_guard<std::mutex> guard{mtx_};
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable())
    thread_.join();
  // A rescan another thread asked for ends (its scan is stopped) before
  // this returns.
  std::lock_guard<std::mutex> drained{scan_mtx_};
}

void device_rescanner::loop() {
  std::unique_lock<std::mutex> lock{mtx_};
  while (
      !cv_.wait_for(lock, settings_.interval, [this] { return stopping_; })) {
    lock.unlock();
    // A failed scan is audited and counted; the next one tries again.
    (void)rescan();
    lock.lock();
  }
}

caf::expected<rescan_gpu>
device_rescanner::add(const devices::gpu::scanned_gpu& s) {
  if (!act_.add)
    return make_error(errc::invalid_transition,
                      "GPUs are not added while this node runs");
  // A GPU on the bus of one the fleet runs is that GPU seen another way
  // (its UUID unread by one side, or the runtime's view of a GPU whose MIG
  // instances the fleet runs, listed when the health library did not
  // answer): never opened twice. A MIG instance beside other instances of
  // its card is not: instances share their card's bus.
  auto bus = devices::canonical_pci_bus_id(s.info.pci_bus_id);
  for (size_t k = 0; k < known_.size() && !bus.empty(); ++k)
    if (!known_[k].removed &&
        devices::canonical_pci_bus_id(gpus_[k].info.pci_bus_id) == bus &&
        (s.visible.empty() || gpus_[k].visible.empty()))
      return make_error(errc::invalid_transition,
                        "it is on bus " + bus + ", as " + gpus_[k].info.name +
                            " is, which the node runs");
  return act_.add(s);
}

rescan_counts device_rescanner::counts() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return counts_;
}

std::map<std::string, std::string> device_rescanner::removed() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return removed_;
}

} // namespace cohort::actors
