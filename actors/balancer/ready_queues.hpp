// The ready queues: admitted items waiting for a device, one queue per
// tenant and one more for merged launches, served by weighted fair queuing
// on virtual time (start-time fair queuing: a queue's virtual time advances
// by the cost it was served divided by its weight; the queue furthest
// behind goes first). Plain code over tickets; the balancer decides what
// becomes of each item it takes out.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

namespace cohort::actors::balancer {

class ready_queues {
public:
  /// `tenants` queues, plus one for merged launches.
  explicit ready_queues(size_t tenants = 0)
      : queues_(tenants + 1), vtime_(tenants + 1, 0.0) {
    // nop
  }

  /// Queues (tenants + 1).
  size_t size() const { return queues_.size(); }

  /// The queue of merged launches.
  size_t merged_queue() const { return queues_.size() - 1; }

  /// Queue `q` (tickets, oldest first). Tickets that left are removed
  /// lazily: whoever walks a queue may erase them.
  std::deque<uint64_t>& queue(size_t q) { return queues_[q]; }

  /// Puts `ticket` (`units` of cost) in queue `q`, at its back or, when it
  /// comes back from a failed placement, at its front. A queue that was
  /// empty starts at the current virtual time: idle time earns no credit.
  void push(size_t q, uint64_t ticket, double units, bool front);

  /// The non-empty queues, the one furthest behind in virtual time first,
  /// into `out` (cleared first; kept by the caller so that it allocates no
  /// more once grown).
  void order(std::vector<size_t>& out) const;

  /// Queue `q` was served an item of `units`: its virtual time advances by
  /// units / weight, and the virtual clock moves to where it was.
  void served(size_t q, double units, double weight);

  /// An item of `units` left the queues (placed, ended, moved on), or came
  /// back in the same place (`waiting_again`).
  void left(double units);
  void waiting_again(double units);

  /// Items and cost units waiting, and the most items that ever waited.
  uint64_t count() const { return count_; }
  double units() const { return units_; }
  uint64_t max_count() const { return max_count_; }

  /// Queue `q`'s virtual time (for tests and stats).
  double vtime(size_t q) const { return vtime_[q]; }

private:
  std::vector<std::deque<uint64_t>> queues_;
  std::vector<double> vtime_;
  double vclock_ = 0;
  uint64_t count_ = 0;
  double units_ = 0;
  uint64_t max_count_ = 0;
};

} // namespace cohort::actors::balancer
