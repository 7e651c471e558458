#include "actors/balancer/trace.hpp"

#include <algorithm>
#include <utility>

namespace cohort::actors::balancer {

trace_recorder::trace_recorder(uint64_t max_events, int64_t now_ns,
                               int64_t wall_ns)
    : max_events_(max_events), started_ns_(now_ns), started_wall_ns_(wall_ns) {
  // Grown as events come, from a small start: a trace that records little
  // takes little.
  events_.reserve(size_t(std::min<uint64_t>(max_events, 4096)));
}

void trace_recorder::add(trace_event e, std::string_view text) {
  if (events_.size() >= max_events_) {
    ++dropped_;
    return;
  }
  text = text.substr(0, max_text);
  if (auto i = text_index_.find(text); i != text_index_.end()) {
    e.text = i->second;
  } else if (text_bytes_ + text.size() <= max_text_bytes) {
    e.text = uint32_t(texts_.size());
    texts_.emplace_back(text);
    text_index_.emplace(texts_.back(), e.text);
    text_bytes_ += text.size();
  }
  events_.push_back(e);
}

trace_snapshot trace_recorder::snapshot(std::vector<trace_device> devices,
                                        std::vector<std::string> tenants,
                                        int64_t now_ns, bool stop) {
  trace_snapshot x;
  x.recording = !stop;
  x.started_ns = started_ns_;
  x.started_wall_ns = started_wall_ns_;
  x.taken_ns = now_ns;
  x.max_events = max_events_;
  x.dropped = dropped_;
  x.devices = std::move(devices);
  x.tenants = std::move(tenants);
  x.texts.assign(texts_.begin(), texts_.end());
  if (stop) {
    x.events = std::move(events_);
    events_ = {};
    text_index_.clear();
    texts_.clear();
    text_bytes_ = 0;
  } else {
    x.events = events_;
  }
  return x;
}

} // namespace cohort::actors::balancer
