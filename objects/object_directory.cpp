#include "objects/object_directory.hpp"

#include <algorithm>

namespace cohort::objects {

uint64_t object_directory::create(std::string tenant, kernels::dtype type,
                                  uint64_t elements,
                                  std::optional<host_buffer> host,
                                  int64_t now_ns) {
  auto id = next_id_++;
  create_as(id, std::move(tenant), type, elements, std::move(host), now_ns);
  return id;
}

bool object_directory::create_as(uint64_t id, std::string tenant,
                                 kernels::dtype type, uint64_t elements,
                                 std::optional<host_buffer> host,
                                 int64_t now_ns) {
  if (id == 0 || id >= next_id_ || entries_.count(id) != 0)
    return false;
  object_entry e;
  e.id = id;
  e.tenant = std::move(tenant);
  e.type = type;
  e.elements = elements;
  if (host) {
    e.host = std::move(*host);
    e.has_host = true;
  }
  e.handles = 1;
  e.last_use = ++clock_;
  e.created_ns = now_ns;
  entries_.emplace(id, std::move(e));
  return true;
}

object_entry* object_directory::find(uint64_t id) {
  auto i = entries_.find(id);
  return i != entries_.end() ? &i->second : nullptr;
}

const object_entry* object_directory::find(uint64_t id) const {
  auto i = entries_.find(id);
  return i != entries_.end() ? &i->second : nullptr;
}

std::vector<const object_entry*> object_directory::list() const {
  std::vector<const object_entry*> out;
  out.reserve(entries_.size());
  for (auto& [id, e] : entries_)
    out.push_back(&e);
  std::sort(out.begin(), out.end(),
            [](auto* a, auto* b) { return a->id < b->id; });
  return out;
}

void object_directory::storing(uint64_t id, size_t d) {
  if (auto* e = find(id))
    e->storing |= device_bit(d);
}

void object_directory::stored(uint64_t id, size_t d) {
  if (auto* e = find(id)) {
    e->storing &= ~device_bit(d);
    e->replicas |= device_bit(d);
  }
}

void object_directory::unstored(uint64_t id, size_t d) {
  if (auto* e = find(id)) {
    e->storing &= ~device_bit(d);
    e->replicas &= ~device_bit(d);
  }
}

void object_directory::set_host(uint64_t id, host_buffer host) {
  if (auto* e = find(id)) {
    e->host = std::move(host);
    e->has_host = true;
  }
}

void object_directory::retain(uint64_t id) {
  if (auto* e = find(id))
    ++e->handles;
}

bool object_directory::release(uint64_t id) {
  auto* e = find(id);
  if (e == nullptr || e->handles == 0)
    return false;
  --e->handles;
  return unreferenced(id);
}

void object_directory::pin(uint64_t id, size_t d) {
  if (auto* e = find(id)) {
    ++e->readers[uint32_t(d)];
    e->last_use = ++clock_;
  }
}

void object_directory::attach(uint64_t id, uint32_t key) {
  if (auto* e = find(id)) {
    ++e->attached[key];
    e->last_use = ++clock_;
  }
}

bool object_directory::detach(uint64_t id, uint32_t key) {
  auto* e = find(id);
  if (e == nullptr)
    return false;
  auto i = e->attached.find(key);
  if (i == e->attached.end())
    return false;
  if (--i->second == 0)
    e->attached.erase(i);
  return unreferenced(id);
}

void object_directory::depend(uint64_t id) {
  if (auto* e = find(id))
    ++e->dependents;
}

bool object_directory::undepend(uint64_t id) {
  auto* e = find(id);
  if (e == nullptr || e->dependents == 0)
    return false;
  --e->dependents;
  return unreferenced(id);
}

void object_directory::drop_host(uint64_t id) {
  if (auto* e = find(id)) {
    e->host = {};
    e->has_host = false;
  }
}

bool object_directory::unpin(uint64_t id, size_t d) {
  auto* e = find(id);
  if (e == nullptr)
    return false;
  auto i = e->readers.find(uint32_t(d));
  if (i == e->readers.end())
    return false;
  if (--i->second == 0)
    e->readers.erase(i);
  return unreferenced(id);
}

void object_directory::erase(uint64_t id) {
  entries_.erase(id);
}

bool object_directory::unreferenced(uint64_t id) const {
  auto* e = find(id);
  return e != nullptr && e->handles == 0 && e->readers.empty() &&
         e->attached.empty() && e->dependents == 0;
}

uint64_t object_directory::resident_bytes(const std::vector<uint64_t>& ids,
                                          size_t d) const {
  uint64_t total = 0;
  for (auto id : ids)
    if (auto* e = find(id); e != nullptr && has_device(e->replicas, d))
      total += e->bytes();
  return total;
}

void object_directory::touch(uint64_t id) {
  if (auto* e = find(id))
    e->last_use = ++clock_;
}

std::vector<eviction>
object_directory::evictable(size_t d, uint64_t bytes, const std::string& tenant,
                            uint64_t (*block_bytes)(uint64_t)) const {
  std::vector<const object_entry*> candidates;
  for (auto& [id, e] : entries_) {
    if (!has_device(e.replicas, d))
      continue;
    if (!tenant.empty() && e.tenant != tenant)
      continue;
    if (e.readers.count(uint32_t(d)) != 0 || e.attached.count(uint32_t(d)) != 0)
      continue;
    candidates.push_back(&e);
  }
  std::sort(candidates.begin(), candidates.end(),
            [](auto* a, auto* b) { return a->last_use < b->last_use; });
  std::vector<eviction> out;
  uint64_t freed = 0;
  for (auto* e : candidates) {
    if (freed >= bytes)
      break;
    auto others = e->replicas & ~device_bit(d);
    auto size = block_bytes(e->bytes());
    out.push_back({e->id, size, !e->has_host && others == 0});
    freed += size;
  }
  return out;
}

loss_report object_directory::device_lost(size_t d) {
  loss_report out;
  for (auto& [id, e] : entries_) {
    auto bit = device_bit(d);
    if (((e.replicas | e.storing) & bit) == 0)
      continue;
    e.replicas &= ~bit;
    e.storing &= ~bit;
    if (e.has_host || e.replicas != 0)
      out.kept.push_back(id);
    else if (e.producer)
      out.rerun.push_back(id);
    else
      out.lost.push_back(id);
  }
  for (auto* v : {&out.kept, &out.rerun, &out.lost})
    std::sort(v->begin(), v->end());
  return out;
}

} // namespace cohort::objects
