#include "devices/sim/sim_device.hpp"

#include <algorithm>
#include <cstring>
#include <utility>

#include "devices/memory/host_slab_resource.hpp"
#include "messages/errc.hpp"
#include "messages/work.hpp"

namespace cohort::devices::sim {

namespace {

// A uniform draw in [0, 1) from a seed and a counter (splitmix64): the same
// launches spike in every run.
double spike_draw(uint64_t seed, uint64_t n) {
  uint64_t z = seed + (n + 1) * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return double(z >> 11) * 0x1.0p-53;
}

uint64_t aligned(uint64_t bytes) {
  return memory::align_up(bytes, memory::block_alignment);
}

// What the balancer charges a tenant (item_bytes) is what this device
// allocates.
static_assert(item_alignment == memory::block_alignment);

} // namespace

device_info sim_info(const sim_params& p) {
  device_info info;
  info.name = p.name;
  info.kind = p.cpu ? device_kind::cpu : device_kind::sim_gpu;
  info.simulated = true;
  info.model = p.cpu ? "simulated CPU worker" : "simulated GPU";
  info.numa_node = p.numa_node;
  if (p.cpu)
    info.cores = 1;
  else
    info.input_cache_bytes =
        p.input_cache_bytes > 0 ? p.input_cache_bytes : p.memory_bytes / 4;
  info.memory_bytes = p.memory_bytes;
  info.streams = p.streams;
  info.speed = p.speed;
  return info;
}

sim_device::sim_device(sim_params params,
                       std::unique_ptr<memory::device_memory> mem)
    : device(sim_info(params)), params_(std::move(params)),
      memory_(std::move(mem)),
      spike_seed_(std::hash<std::string>{}(params_.name)),
      inputs_(info().input_cache_bytes) {
  // nop
}

sim_device::~sim_device() {
  // Launches still held (a run cut short) give their blocks back, so that a
  // ledger shared with other devices is refunded.
  while (!held_.empty())
    do_finish(held_.begin()->first);
  drop_all_objects();
}

void sim_device::lose(bool permanent) {
  std::lock_guard<std::mutex> guard{mtx_};
  lost_ = true;
  permanent_ = permanent_ || permanent;
  lost_reason_ = permanent ? "lost permanently (injected)" : "lost (injected)";
}

void sim_device::lose_at(std::chrono::steady_clock::time_point when,
                         bool permanent) {
  std::lock_guard<std::mutex> guard{mtx_};
  lose_at_ = when;
  lose_at_permanent_ = permanent;
}

void sim_device::fail_next_allocations(uint32_t n) {
  memory_->faults().fail_next(n);
}

void sim_device::raise_xid(uint32_t xid) {
  note_xid(xid);
  auto action = xid_action_of(xid);
  auto what = "Xid " + std::to_string(xid) +
              (is_device_level_xid(xid) ? " (device-level, injected)"
                                        : " (application-level, injected)");
  std::lock_guard<std::mutex> guard{mtx_};
  // An application's fault fails its launch whatever the policy does with
  // the device; each Xid fails one, and a storm past the cap is already a
  // storm.
  if (!is_device_level_xid(xid) && pending_xids_.size() < max_pending_xids)
    pending_xids_.push_back(xid);
  switch (action) {
  case xid_action::ignore:
    break;
  case xid_action::degrade:
    warnings_.push_back(std::move(what));
    break;
  case xid_action::reset:
    if (!lost_) {
      lost_ = true;
      lost_reason_ = std::move(what);
    }
    break;
  case xid_action::isolate:
    if (!isolated_) {
      lost_ = true;
      isolated_ = true;
      lost_reason_ = std::move(what);
    }
    break;
  }
}

void sim_device::poison() {
  std::lock_guard<std::mutex> guard{mtx_};
  lost_ = true;
  poisoned_ = true;
  lost_reason_ = "sticky error, the context is poisoned (injected)";
}

void sim_device::warn(std::string what) {
  std::lock_guard<std::mutex> guard{mtx_};
  warnings_.push_back(std::move(what) + " (injected)");
}

std::vector<std::string> sim_device::do_take_warnings() {
  std::lock_guard<std::mutex> guard{mtx_};
  return std::exchange(warnings_, {});
}

void sim_device::hang_stream(uint32_t stream) {
  std::lock_guard<std::mutex> guard{mtx_};
  hung_streams_.insert(stream);
}

void sim_device::slow_down(double factor) {
  std::lock_guard<std::mutex> guard{mtx_};
  slow_factor_ = factor > 0 ? factor : 1.0;
}

caf::error sim_device::lost_error_locked() {
  if (!lost_ && std::chrono::steady_clock::now() >= lose_at_) {
    lost_ = true;
    permanent_ = permanent_ || lose_at_permanent_;
    lost_reason_ = "lost at its scheduled time (injected)";
    lose_at_ = std::chrono::steady_clock::time_point::max();
  }
  if (!lost_)
    return caf::none;
  if (isolated_)
    return isolated_by_xid(lost_reason_);
  return make_error(errc::device_lost, info().name + ": " + lost_reason_);
}

caf::expected<launch_result>
sim_device::do_launch(uint32_t stream, uint64_t ticket, kernels::kernel_id id,
                      const kernels::kernel_args& args,
                      kernels::typed_inputs inputs,
                      const memory::owner_tag& owner) {
  stage_view single{id, args, {inputs.begin(), inputs.end()}, -1};
  return do_launch_chain(stream, ticket, {&single, 1}, owner);
}

caf::expected<launch_result>
sim_device::do_launch_chain(uint32_t stream, uint64_t ticket,
                            std::span<const stage_view> chain,
                            const memory::owner_tag& owner) {
  double slow = 1.0;
  bool hung = false;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    if (auto err = lost_error_locked())
      return err;
    if (!pending_xids_.empty()) {
      auto xid = pending_xids_.front();
      pending_xids_.pop_front();
      return make_error(errc::kernel_fault,
                        info().name + ": Xid " + std::to_string(xid) + " in " +
                            std::string{kernels::name(chain.front().id)} +
                            " (application-level, injected)");
    }
    slow = slow_factor_;
    hung = hung_streams_.erase(stream) > 0;
  }
  bool spike = params_.spike_fraction > 0 &&
               spike_draw(spike_seed_, launches_++) < params_.spike_fraction;
  // One block for the chain: host inputs, then each stage's output, each
  // aligned (what item_bytes charges the tenant for).
  uint64_t total = 0;
  uint64_t previous = 0;
  for (auto& st : chain) {
    kernels::input_shape lens;
    for (size_t i = 0; i < st.inputs.size(); ++i) {
      bool chained = st.from_previous == int32_t(i);
      lens.push_back(chained ? previous : st.inputs[i].size);
      // Resident objects are read where they are.
      if (!chained && (st.resident >> i & 1) == 0)
        total += aligned(st.inputs[i].bytes());
    }
    total += aligned(kernels::output_bytes(st.id, st.args, lens));
    previous = kernels::output_elements(st.id, st.args, lens);
  }
  auto block = memory_->allocate(std::max<uint64_t>(total, 1),
                                 memory::stream_ref{stream}, owner);
  if (!block)
    return block.error();
  auto* cursor = static_cast<char*>(*block);
  launch_result res;
  kernels::typed_view prev;
  for (auto& st : chain) {
    kernels::small_vector<kernels::typed_view, 4> in;
    // Inputs it already holds are not transferred again (modeled).
    uint64_t held = 0;
    for (size_t i = 0; i < st.inputs.size(); ++i) {
      if (st.from_previous == int32_t(i)) {
        in.push_back(prev);
        continue;
      }
      if ((st.resident >> i & 1) != 0) {
        // A device-resident object: in device memory already, no transfer.
        held += st.inputs[i].bytes();
        in.push_back(st.inputs[i]);
        continue;
      }
      // The host-to-device copy.
      auto bytes = st.inputs[i].bytes();
      if (inputs_.use(st.inputs[i].data, bytes))
        held += bytes;
      if (bytes > 0)
        std::memcpy(cursor, st.inputs[i].data, bytes);
      in.push_back({cursor, st.inputs[i].size, st.inputs[i].type});
      cursor += aligned(bytes);
    }
    kernels::kernel_output out;
    try {
      out = kernels::run_cpu(st.id, st.args, kernels::typed_inputs{in},
                             kernel_timeout(st.id));
    } catch (...) {
      // A kernel that failed (its error, a crash of its kernel host) gives
      // the block back: the item may be tried again.
      memory_->deallocate(*block, std::max<uint64_t>(total, 1),
                          memory::stream_ref{stream});
      throw;
    }
    // The output lives in device memory; the next stage reads it there.
    auto* out_at = cursor;
    auto ov = out.view();
    if (ov.bytes() > 0)
      std::memcpy(out_at, ov.data, ov.bytes());
    if (!out.indices.empty())
      std::memcpy(out_at + ov.bytes(), out.indices.data(),
                  out.indices.size() * sizeof(int64_t));
    cursor += aligned(ov.bytes() + out.indices.size() * sizeof(int64_t));
    prev = {out_at, ov.size, ov.type};
    kernels::input_shape lens;
    for (auto& v : in)
      lens.push_back(v.size);
    auto c = kernels::cost(st.id, st.args, kernels::input_lengths{lens});
    double moved = c.bytes - std::min(c.bytes, double(held));
    double seconds = std::max(c.flops / (params_.gflops * 1e9),
                              moved / (params_.gbytes_per_s * 1e9)) /
                     params_.speed;
    res.device_time += std::chrono::duration_cast<std::chrono::nanoseconds>(
        (params_.launch_latency +
         std::chrono::nanoseconds{int64_t(seconds * 1e9)}) *
        slow);
    // The device-to-host copy of the last output is the vector itself.
    res.output = std::move(out);
  }
  // A ticket launched again (after a reset) replaces its old block.
  do_finish(ticket);
  held_.emplace(ticket,
                held_block{*block, std::max<uint64_t>(total, 1), stream});
  note_held();
  res.hung = hung;
  if (spike)
    res.reported_factor = params_.spike_factor;
  return res;
}

void sim_device::do_finish(uint64_t ticket) {
  auto i = held_.find(ticket);
  if (i == held_.end())
    return;
  memory_->deallocate(i->second.p, i->second.bytes,
                      memory::stream_ref{i->second.stream});
  held_.erase(i);
  note_held();
}

void sim_device::heat(int32_t degrees) {
  heat_.store(degrees);
}

health::gpu_sample sim_device::telemetry() const {
  health::gpu_sample s;
  if (params_.cpu) {
    s.unavailable_reason =
        info().name + " is a simulated CPU worker: no health counters";
    return s;
  }
  auto busy = std::min(1.0, double(held_now_.load(std::memory_order_relaxed)) /
                                double(std::max(1u, params_.streams)));
  s.available = true;
  s.source = "simulated";
  s.gpu_util_percent = uint32_t(busy * 100 + 0.5);
  s.temperature_c = int32_t(35 + 45 * busy + 0.5) + heat_.load();
  s.power_w = 60 + 240 * busy;
  s.power_limit_w = 300;
  return s;
}

caf::error sim_device::do_health() {
  std::lock_guard<std::mutex> guard{mtx_};
  return lost_error_locked();
}

caf::error sim_device::do_reset() {
  std::lock_guard<std::mutex> guard{mtx_};
  if (permanent_)
    return make_error(errc::device_lost,
                      info().name + ": reset failed, the device is gone");
  if (poisoned_)
    return make_error(errc::context_poisoned,
                      info().name + ": a sticky error survived the reset; "
                                    "only a new context clears it");
  lost_ = false;
  isolated_ = false;
  lost_reason_.clear();
  pending_xids_.clear();
  hung_streams_.clear();
  // A reset takes the device's memory along: launches in flight were lost
  // (and re-placed); their blocks go back to the host.
  held_.clear();
  note_held();
  inputs_.clear();
  memory_->reset(false);
  return caf::none;
}

void sim_device::do_release_memory() {
  std::lock_guard<std::mutex> guard{mtx_};
  // The launches' blocks go with the books: freeing them later (at the
  // latest in the destructor) would return blocks the memory has forgotten.
  held_.clear();
  note_held();
  inputs_.clear();
  memory_->reset(false);
}

caf::error sim_device::do_recreate() {
  {
    std::lock_guard<std::mutex> guard{mtx_};
    if (permanent_)
      return make_error(errc::device_lost,
                        info().name + ": the device is gone");
    // A new context: nothing of the old one survives, the poison included.
    poisoned_ = false;
    warnings_.clear();
  }
  return do_reset();
}

caf::expected<std::shared_ptr<sim_device>> make_sim_device(sim_params params) {
  auto opts = params.memory;
  auto mem = memory::device_memory::make(
      params.name, true, params.memory_bytes,
      std::make_unique<memory::host_slab_resource>(params.name,
                                                   params.memory_bytes),
      std::make_unique<memory::host_stream_ordering>(params.streams, true),
      std::move(opts));
  if (!mem)
    return make_error(errc::malformed_config,
                      "simulated GPU '" + params.name +
                          "': " + describe(mem.error()));
  return std::make_shared<sim_device>(std::move(params), std::move(*mem));
}

} // namespace cohort::devices::sim
