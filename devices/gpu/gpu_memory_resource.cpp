#include "devices/gpu/gpu_memory_resource.hpp"

#include <string_view>

#include "devices/gpu/gpu_device.hpp"
#include "messages/errc.hpp"

namespace cohort::devices::gpu {

gpu_memory_resource::gpu_memory_resource(std::shared_ptr<api> rt, int ordinal,
                                         std::string device)
    : rt_(std::move(rt)), ordinal_(ordinal), device_(std::move(device)) {
  // nop
}

caf::expected<void*>
gpu_memory_resource::do_allocate(size_t bytes, memory::stream_ref,
                                 const memory::owner_tag&) {
  if (auto rc = rt_->set_device(ordinal_); rc.failed())
    return to_error(*rt_, rc, device_, "selecting the device", __FILE__,
                    __LINE__);
  void* p = nullptr;
  if (auto rc = rt_->malloc_device(p, bytes); rc.failed())
    return to_error(*rt_, rc, device_,
                    "allocating a " + std::to_string(bytes) +
                        "-byte slab of device memory",
                    __FILE__, __LINE__);
  // A reset context may hand out an address a forgotten slab had.
  blocks_.insert_or_assign(p, bytes);
  used_ += bytes;
  return p;
}

void gpu_memory_resource::do_forget_all() {
  blocks_.clear();
  used_ = 0;
}

caf::error gpu_memory_resource::do_deallocate(void* p, size_t bytes,
                                              memory::stream_ref) {
  auto i = blocks_.find(p);
  if (i == blocks_.end() || i->second != bytes)
    return make_error(errc::invalid_free,
                      device_ + ": a slab of " + std::to_string(bytes) +
                          " bytes returned that the driver did not hand out");
  blocks_.erase(i);
  used_ -= bytes;
  rt_->set_device(ordinal_);
  // Synchronizes the device: only trimming and shutdown get here.
  if (auto rc = rt_->free_device(p); rc.failed())
    return to_error(*rt_, rc, device_, "freeing a slab", __FILE__, __LINE__);
  return caf::none;
}

caf::expected<memory::shared_region>
gpu_memory_resource::do_share(const void* p) {
  auto* c = static_cast<const char*>(p);
  auto i = blocks_.upper_bound(const_cast<void*>(p));
  if (i == blocks_.begin())
    return make_error(errc::invalid_arguments,
                      device_ + ": no slab holds that address");
  --i;
  auto* base = static_cast<const char*>(i->first);
  if (c >= base + i->second)
    return make_error(errc::invalid_arguments,
                      device_ + ": no slab holds that address");
  memory::shared_region r;
  r.how = std::string_view{rt_->vendor()} == "HIP"
              ? memory::shared_region::kind::hip_ipc
              : memory::shared_region::kind::cuda_ipc;
  rt_->set_device(ordinal_);
  if (auto rc = rt_->ipc_get_handle(i->first, r.ipc); rc.failed())
    return to_error(*rt_, rc, device_,
                    "getting the IPC handle of a slab to share an object",
                    __FILE__, __LINE__);
  r.offset = static_cast<uint64_t>(c - base);
  r.region_bytes = i->second;
  return r;
}

} // namespace cohort::devices::gpu
