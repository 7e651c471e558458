#include "devices/gpu/gpu_stream_ordering.hpp"

#include "devices/gpu/gpu_device.hpp"
#include "messages/errc.hpp"

namespace cohort::devices::gpu {

gpu_stream_ordering::gpu_stream_ordering(std::shared_ptr<api> rt, int ordinal,
                                         std::string device,
                                         const std::vector<stream_t>* streams,
                                         uint32_t count)
    : rt_(std::move(rt)), ordinal_(ordinal), device_(std::move(device)),
      streams_(streams), count_(count), lanes_(count) {
  // nop
}

gpu_stream_ordering::~gpu_stream_ordering() {
  // Events left here belong to a context that is gone or going; the device
  // destroys live ones with destroy_events before its streams.
}

uint32_t gpu_stream_ordering::streams() const {
  return count_;
}

caf::error gpu_stream_ordering::check(result rc, const char* what, int line) {
  if (!rc.failed())
    return caf::none;
  return to_error(*rt_, rc, device_, what, __FILE__, line);
}

stream_t gpu_stream_ordering::stream(memory::stream_ref s) const {
  return s.index < streams_->size() ? (*streams_)[s.index] : nullptr;
}

caf::expected<uint64_t> gpu_stream_ordering::record(memory::stream_ref s) {
  // Events belong to the current device.
  if (auto err =
          check(rt_->set_device(ordinal_), "selecting the device", __LINE__))
    return err;
  auto st = stream(s);
  if (st == nullptr)
    return make_error(errc::device_lost, device_ + ": no stream " +
                                             std::to_string(s.index) +
                                             " (a reset did not complete)");
  event_t e = nullptr;
  if (!free_events_.empty()) {
    e = free_events_.back();
    free_events_.pop_back();
  } else if (auto err = check(rt_->event_create(e, false),
                              "creating a fence event", __LINE__)) {
    return err;
  }
  if (auto err =
          check(rt_->event_record(e, st), "recording a fence", __LINE__)) {
    free_events_.push_back(e);
    return err;
  }
  auto& l = lanes_[s.index];
  l.pending.emplace_back(++l.next, e);
  return l.next;
}

bool gpu_stream_ordering::reached(memory::stream_ref s, uint64_t seq) {
  if (s.index >= lanes_.size())
    return true;
  auto& l = lanes_[s.index];
  while (!l.pending.empty()) {
    bool done = false;
    if (rt_->event_query(l.pending.front().second, done).failed() || !done)
      break;
    l.reached = l.pending.front().first;
    free_events_.push_back(l.pending.front().second);
    l.pending.pop_front();
  }
  return seq <= l.reached;
}

caf::error gpu_stream_ordering::wait(memory::stream_ref waiter,
                                     memory::stream_ref s, uint64_t seq) {
  if (s.index >= lanes_.size() || seq <= lanes_[s.index].reached)
    return caf::none;
  auto st = stream(waiter);
  if (st == nullptr)
    return make_error(errc::device_lost,
                      device_ + ": no stream " + std::to_string(waiter.index));
  rt_->set_device(ordinal_);
  auto& pending = lanes_[s.index].pending;
  // The fence itself, or (never missing one) the first one after it.
  for (auto& [n, e] : pending)
    if (n >= seq)
      return check(rt_->stream_wait_event(st, e),
                   "ordering a stream after another's fence", __LINE__);
  // Asked for a fence not recorded yet: record one now and wait for it.
  auto rec = record(s);
  if (!rec)
    return rec.error();
  return check(rt_->stream_wait_event(st, pending.back().second),
               "ordering a stream after another's fence", __LINE__);
}

caf::error gpu_stream_ordering::zero(void* p, size_t bytes,
                                     memory::stream_ref s) {
  auto st = stream(s);
  if (st == nullptr)
    return make_error(errc::device_lost,
                      device_ + ": no stream " + std::to_string(s.index));
  rt_->set_device(ordinal_);
  return check(rt_->zero_device(p, bytes, st), "zeroing device memory",
               __LINE__);
}

void gpu_stream_ordering::reset() {
  // Numbering goes on, so that fences of the old context never match.
  for (auto& l : lanes_) {
    l.pending.clear();
    l.reached = l.next;
  }
  free_events_.clear();
}

void gpu_stream_ordering::destroy_events() {
  rt_->set_device(ordinal_);
  for (auto& l : lanes_) {
    for (auto& [n, e] : l.pending)
      rt_->event_destroy(e);
    l.pending.clear();
    l.reached = l.next;
  }
  for (auto e : free_events_)
    rt_->event_destroy(e);
  free_events_.clear();
}

size_t gpu_stream_ordering::pending() const {
  size_t n = 0;
  for (auto& l : lanes_)
    n += l.pending.size();
  return n;
}

} // namespace cohort::devices::gpu
