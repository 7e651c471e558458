#include "actors/balancer/objects.hpp"

#include <algorithm>

#include "devices/memory/memory_resource.hpp"
#include "messages/errc.hpp"

namespace cohort::actors::balancer {

namespace {

// Every input of `item` (a work_item, const or not), every stage's.
template <class Item, class F> void for_each_input(Item& item, F&& f) {
  for (auto& in : item.inputs)
    f(in);
  for (auto& st : item.then)
    for (auto& in : st.inputs)
      f(in);
}

std::string name_of(uint64_t id) {
  return "object " + std::to_string(id);
}

} // namespace

uint64_t object_block_bytes(uint64_t bytes) {
  return std::max<uint64_t>(
      devices::memory::align_up(bytes, devices::memory::block_alignment), 1);
}

std::vector<uint64_t> objects_read(const work_item& item) {
  std::vector<uint64_t> out;
  for_each_input(item, [&](const host_buffer& in) {
    if (in.object() != 0 &&
        std::find(out.begin(), out.end(), in.object()) == out.end())
      out.push_back(in.object());
  });
  return out;
}

caf::error check_objects(const objects::object_directory& dir,
                         const work_item& item) {
  caf::error err;
  for_each_input(item, [&](const host_buffer& in) {
    if (err || in.object() == 0)
      return;
    auto* e = dir.find(in.object());
    if (e == nullptr) {
      err = make_error(errc::invalid_arguments,
                       name_of(in.object()) +
                           " does not exist (it was never made, or freed "
                           "when its last handle went)");
      return;
    }
    if (e->tenant != item.tenant) {
      err = make_error(errc::not_granted,
                       name_of(e->id) + " belongs to another tenant than '" +
                           item.tenant + "'");
      return;
    }
    if (e->type != in.type() || e->elements != in.size()) {
      err = make_error(
          errc::invalid_arguments,
          name_of(e->id) + " holds " + std::to_string(e->elements) + " " +
              std::string{kernels::name(e->type)} + " elements, not the " +
              std::to_string(in.size()) + " " +
              std::string{kernels::name(in.type())} + " the item names");
      return;
    }
    if (!e->has_host && e->replicas == 0 && e->storing == 0 && !e->rebuilding)
      err = make_error(errc::object_lost,
                       name_of(e->id) +
                           ": every copy was lost with its device, and it "
                           "had no host copy to be made again from");
  });
  return err;
}

uint64_t object_mask(const objects::object_directory& dir,
                     const std::vector<uint64_t>& ids) {
  uint64_t mask = ~uint64_t{0};
  for (auto id : ids)
    if (auto* e = dir.find(id); e != nullptr && !e->has_host && !e->rebuilding)
      mask &= e->replicas;
  return mask;
}

caf::expected<work_item> item_for(const objects::object_directory& dir,
                                  const work_item& item, size_t d) {
  auto out = item;
  caf::error err;
  for_each_input(out, [&](host_buffer& in) {
    if (err || in.object() == 0)
      return;
    auto* e = dir.find(in.object());
    if (e != nullptr && objects::has_device(e->replicas, d))
      return;
    if (e == nullptr || !e->has_host) {
      err = make_error(errc::object_lost,
                       name_of(in.object()) +
                           " has no copy on the device the item was placed "
                           "on, and no host copy");
      return;
    }
    in = e->host;
  });
  if (err)
    return err;
  return out;
}

object_info describe_object(const objects::object_entry& e,
                            const std::vector<std::string>& names,
                            int64_t now_ns) {
  object_info out;
  out.id = e.id;
  out.tenant = e.tenant;
  out.type = e.type;
  out.elements = e.elements;
  for (size_t d = 0; d < names.size(); ++d)
    if (objects::has_device(e.replicas, d))
      out.devices.push_back(names[d]);
  out.host_copy = e.has_host;
  out.handles = e.handles;
  out.readers = e.reader_count();
  out.age_ms = std::max<int64_t>(0, (now_ns - e.created_ns) / 1000000);
  return out;
}

} // namespace cohort::actors::balancer
