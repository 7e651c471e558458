// The balancer's trace recorder (docs/tracing.md): while a trace is being
// recorded, the balancer adds an event for each wait, launch, failover,
// failure and device event it sees, up to a bound; past it, events are
// counted, not kept.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "messages/trace.hpp"

namespace cohort::actors::balancer {

class trace_recorder {
public:
  /// Starts recording at `now_ns` (steady clock), `wall_ns` then; keeps at
  /// most `max_events` events.
  trace_recorder(uint64_t max_events, int64_t now_ns, int64_t wall_ns);

  /// Keeps `e`, unless the bound is reached (then counts it).
  void add(const trace_event& e) {
    if (events_.size() < max_events_)
      events_.push_back(e);
    else
      ++dropped_;
  }

  /// Keeps `e` with `text` (at most max_text bytes of it; texts that
  /// repeat are kept once, and past max_text_bytes of them in all, events
  /// are kept without their text).
  void add(trace_event e, std::string_view text);

  /// What was recorded, with the names of the devices and tenants its
  /// indexes refer to. `stop`: the events move out (the recorder is done).
  trace_snapshot snapshot(std::vector<trace_device> devices,
                          std::vector<std::string> tenants, int64_t now_ns,
                          bool stop);

  uint64_t max_events() const { return max_events_; }
  size_t size() const { return events_.size(); }

  static constexpr size_t max_text = 240;
  static constexpr size_t max_text_bytes = size_t{64} << 20;

private:
  uint64_t max_events_;
  int64_t started_ns_;
  int64_t started_wall_ns_;
  uint64_t dropped_ = 0;
  std::vector<trace_event> events_;
  /// Each text once (a deque: they stay where they are, for the index's
  /// views), and their bytes.
  std::deque<std::string> texts_;
  std::unordered_map<std::string_view, uint32_t> text_index_;
  size_t text_bytes_ = 0;
};

} // namespace cohort::actors::balancer
