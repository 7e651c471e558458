#include "actors/balancer/ready_queues.hpp"

#include <algorithm>

namespace cohort::actors::balancer {

void ready_queues::push(size_t q, uint64_t ticket, double units, bool front) {
  if (queues_[q].empty())
    vtime_[q] = std::max(vtime_[q], vclock_);
  waiting_again(units);
  max_count_ = std::max(max_count_, count_);
  if (front)
    queues_[q].push_front(ticket);
  else
    queues_[q].push_back(ticket);
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
