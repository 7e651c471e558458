#include "devices/device.hpp"

#include <cstring>

#include "devices/memory/device_memory.hpp"
#include "messages/errc.hpp"

namespace cohort::devices {

void device::set_xid_policy(xid_policy policy) {
  std::lock_guard<std::mutex> guard{xid_policy_mtx_};
  xid_policy_ = std::move(policy);
}

xid_action device::xid_action_of(uint32_t xid) const {
  std::lock_guard<std::mutex> guard{xid_policy_mtx_};
  return xid_policy_.action(xid);
}

caf::error device::isolated_by_xid(const std::string& what) const {
  return make_error(errc::device_offline,
                    info_.name + ": " + what +
                        ": isolated by the Xid policy; it stays offline "
                        "until an operator brings it online");
}

caf::error device::host_memory_exhausted() const {
  return make_error(errc::out_of_memory,
                    info_.name + ": host memory ran out while computing the "
                                 "item (std::bad_alloc)");
}

caf::error device::kernel_failed(const kernels::kernel_failure& e) const {
  return make_error(errc::kernel_error, info_.name + ": " + e.what());
}

caf::expected<launch_result>
device::do_launch_chain(uint32_t stream, uint64_t ticket,
                        std::span<const stage_view> chain,
                        const memory::owner_tag& owner) {
  launch_result total;
  for (auto& st : chain) {
    auto inputs = st.inputs;
    if (st.from_previous >= 0) {
      if (size_t(st.from_previous) >= inputs.size())
        return make_error(errc::invalid_arguments,
                          info_.name + ": a chained stage reads input " +
                              std::to_string(st.from_previous) + " of " +
                              std::to_string(inputs.size()));
      inputs[size_t(st.from_previous)] = total.output.view();
    }
    auto res = do_launch(stream, ticket, st.id, st.args, inputs, owner);
    if (!res)
      return res;
    if (res->pending)
      return make_error(errc::invalid_arguments,
                        info_.name + ": an asynchronous device must run "
                                     "chains itself");
    total.device_time += res->device_time;
    total.hung = total.hung || res->hung;
    total.output = std::move(res->output);
  }
  return total;
}

caf::expected<launch_result> device::do_collect(uint64_t ticket) {
  return make_error(errc::invalid_arguments,
                    info_.name + ": nothing to collect for launch " +
                        std::to_string(ticket) +
                        " (the device runs launches synchronously)");
}

caf::error device::do_recreate() {
  return make_error(errc::context_poisoned,
                    info_.name +
                        ": its context needs a new process to clear a sticky "
                        "error, and this backend's device actor runs in the "
                        "runtime's own process");
}

caf::error device::store_object(uint64_t id, kernels::typed_view data,
                                const memory::owner_tag& owner) {
  auto* mem = memory();
  if (mem == nullptr)
    return make_error(errc::invalid_arguments,
                      info_.name + ": a CPU worker keeps no objects in device "
                                   "memory (it reads their host copies)");
  if (objects_.count(id) != 0)
    return make_error(errc::invalid_arguments, info_.name + ": object " +
                                                   std::to_string(id) +
                                                   " is held already");
  if (auto err = health())
    return err;
  auto bytes = std::max<uint64_t>(
      memory::align_up(data.bytes(), memory::block_alignment), 1);
  // Objects are ordered on stream 0: a launch reading one is placed after
  // this call returns, when the copy is done.
  auto block = mem->allocate(bytes, memory::stream_ref{0}, owner);
  if (!block)
    return block.error();
  if (data.bytes() > 0)
    if (auto err = copy_in(*block, data.data, data.bytes())) {
      mem->deallocate(*block, bytes, memory::stream_ref{0});
      return err;
    }
  objects_.emplace(
      id, resident_object{
              {*block, data.size, data.type}, *block, bytes, owner.tenant});
  object_bytes_ += bytes;
  return caf::none;
}

caf::expected<kernels::kernel_output> device::read_object(uint64_t id) {
  auto* obj = find_object(id);
  if (obj == nullptr)
    return make_error(errc::invalid_arguments,
                      info_.name + ": no object " + std::to_string(id));
  if (auto err = health())
    return err;
  kernels::kernel_output out;
  out.resize(obj->data.type, obj->data.size);
  auto view = out.view();
  if (view.bytes() > 0)
    if (auto err = copy_out(const_cast<void*>(view.data), obj->data.data,
                            view.bytes()))
      return err;
  return out;
}

caf::expected<memory::shared_region> device::share_object(uint64_t id) {
  auto* obj = find_object(id);
  if (obj == nullptr)
    return make_error(errc::invalid_arguments,
                      info_.name + ": no object " + std::to_string(id));
  auto* mem = memory();
  if (mem == nullptr)
    return make_error(errc::invalid_arguments,
                      info_.name + ": a CPU worker keeps no objects in device "
                                   "memory");
  if (auto err = health())
    return err;
  return mem->share(obj->data.data);
}

bool device::drop_object(uint64_t id) {
  auto i = objects_.find(id);
  if (i == objects_.end())
    return false;
  if (auto* mem = memory())
    mem->deallocate(i->second.block, i->second.block_bytes,
                    memory::stream_ref{0});
  object_bytes_ -= i->second.block_bytes;
  objects_.erase(i);
  return true;
}

void device::drop_all_objects() {
  while (!objects_.empty())
    drop_object(objects_.begin()->first);
}

caf::error device::copy_in(void* dst, const void* src, size_t bytes) {
  std::memcpy(dst, src, bytes);
  return caf::none;
}

caf::error device::copy_out(void* dst, const void* src, size_t bytes) {
  std::memcpy(dst, src, bytes);
  return caf::none;
}

void device::do_release_memory() {
  if (auto* mem = memory())
    mem->reset(!info().simulated);
}

health::gpu_sample device::telemetry() const {
  health::gpu_sample s;
  s.unavailable_reason = info_.name + " has no health counters (" +
                         std::string{to_string(info_.kind)} + ")";
  return s;
}

void device::keep_telemetry(int64_t wall_ns, health::gpu_sample s) {
  std::lock_guard<std::mutex> guard{history_mtx_};
  telemetry_.push_back({wall_ns, std::move(s)});
  while (telemetry_.size() > telemetry_kept)
    telemetry_.pop_front();
}

std::vector<health::timed_sample> device::telemetry_history() const {
  std::lock_guard<std::mutex> guard{history_mtx_};
  return {telemetry_.begin(), telemetry_.end()};
}

void device::keep_xid(uint32_t xid) {
  auto now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                 std::chrono::system_clock::now().time_since_epoch())
                 .count();
  std::lock_guard<std::mutex> guard{history_mtx_};
  xids_.push_back({now, xid});
  while (xids_.size() > xids_kept)
    xids_.pop_front();
}

std::vector<health::timed_xid> device::recent_xids() const {
  std::lock_guard<std::mutex> guard{history_mtx_};
  return {xids_.begin(), xids_.end()};
}

} // namespace cohort::devices
