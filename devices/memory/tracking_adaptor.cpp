#include "devices/memory/tracking_adaptor.hpp"

#include <algorithm>
#include <cstdio>
#include <map>

#include "messages/errc.hpp"

namespace cohort::devices::memory {

tracking_adaptor::tracking_adaptor(memory_resource& upstream,
                                   std::string device)
    : upstream_(upstream), device_(std::move(device)) {
  live_.reserve(1024);
}

std::vector<allocation_record> tracking_adaptor::live() const {
  std::vector<allocation_record> out;
  out.reserve(live_.size());
  for (auto& [p, rec] : live_)
    out.push_back(rec);
  std::sort(out.begin(), out.end(),
            [](auto& a, auto& b) { return a.seq < b.seq; });
  return out;
}

std::string tracking_adaptor::leak_report(size_t max_lines) const {
  if (live_.empty())
    return {};
  auto now = std::chrono::steady_clock::now();
  std::string out = device_ + ": " + std::to_string(live_.size()) +
                    " allocation(s), " + std::to_string(bytes_) +
                    " bytes still held:\n";
  auto recs = live();
  for (size_t i = 0; i < recs.size() && i < max_lines; ++i) {
    auto& r = recs[i];
    char held[32];
    std::snprintf(held, sizeof(held), "%.3f",
                  std::chrono::duration<double>(now - r.at).count());
    out += "  " + std::to_string(r.bytes) + " bytes for tenant '" +
           r.owner.tenant + "', work " + std::to_string(r.owner.work_id) +
           " (" + r.owner.what + "), held " + held + " s\n";
  }
  if (recs.size() > max_lines)
    out += "  ... and " + std::to_string(recs.size() - max_lines) + " more\n";
  return out;
}

size_t tracking_adaptor::forget_all() {
  auto n = live_.size();
  live_.clear();
  bytes_ = 0;
  return n;
}

caf::expected<void*> tracking_adaptor::do_allocate(size_t bytes,
                                                   stream_ref stream,
                                                   const owner_tag& owner) {
  auto p = upstream_.allocate(bytes, stream, owner);
  if (!p)
    return p;
  live_.emplace(*p, allocation_record{*p, bytes, owner, ++seq_,
                                      std::chrono::steady_clock::now()});
  bytes_ += bytes;
  return p;
}

caf::error tracking_adaptor::do_deallocate(void* p, size_t bytes,
                                           stream_ref stream) {
  auto i = live_.find(p);
  if (i == live_.end())
    return make_error(errc::invalid_free,
                      device_ + ": " + std::to_string(bytes) +
                          " bytes returned that are not held: a double free "
                          "or a pointer this device never handed out");
  if (i->second.bytes != bytes)
    return make_error(errc::invalid_free,
                      device_ + ": an allocation of " +
                          std::to_string(i->second.bytes) + " bytes for '" +
                          i->second.owner.tenant + "' returned as " +
                          std::to_string(bytes) + " bytes");
  auto err = upstream_.deallocate(p, bytes, stream);
  if (code_of(err) == errc::invalid_free)
    return err;
  bytes_ -= i->second.bytes;
  live_.erase(i);
  return err;
}

} // namespace cohort::devices::memory
