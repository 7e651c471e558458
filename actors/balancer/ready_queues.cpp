#include "actors/balancer/ready_queues.hpp"

#include <algorithm>

namespace cohort::actors::balancer {

void ready_queues::push(size_t q, uint64_t ticket, double units, bool front,
                        int32_t priority) {
  auto& queue = queues_[q];
  if (queue.empty())
    vtime_[q] = std::max(vtime_[q], vclock_);
  waiting_again(units);
  max_count_ = std::max(max_count_, count_);
  entry e{ticket, priority};
  // The queue is sorted by priority, highest first: the common cases (all
  // alike) take no search.
  if (front) {
    if (queue.empty() || queue.front().priority <= priority)
      queue.push_front(e);
    else
      queue.insert(std::lower_bound(queue.begin(), queue.end(), e,
                                    [](const entry& a, const entry& b) {
                                      return a.priority > b.priority;
                                    }),
                   e);
  } else {
    if (queue.empty() || queue.back().priority >= priority)
      queue.push_back(e);
    else
      queue.insert(std::upper_bound(queue.begin(), queue.end(), e,
                                    [](const entry& a, const entry& b) {
                                      return a.priority > b.priority;
                                    }),
                   e);
  }
}

void ready_queues::order(std::vector<size_t>& out) const {
  out.clear();
  for (size_t q = 0; q < queues_.size(); ++q)
    if (!queues_[q].empty())
      out.push_back(q);
  std::sort(out.begin(), out.end(),
            [&](size_t a, size_t b) { return vtime_[a] < vtime_[b]; });
}

void ready_queues::served(size_t q, double units, double weight) {
  vclock_ = vtime_[q];
  vtime_[q] += units / std::max(weight, 1e-9);
}

void ready_queues::left(double units) {
  units_ = std::max(0.0, units_ - units);
  count_ -= std::min<uint64_t>(count_, 1);
}

void ready_queues::waiting_again(double units) {
  units_ += units;
  ++count_;
}

} // namespace cohort::actors::balancer
