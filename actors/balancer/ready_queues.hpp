// The ready queues: admitted items waiting for a device, one queue per
// tenant and one more for merged launches, served by weighted fair queuing
// on virtual time (start-time fair queuing: a queue's virtual time advances
// by the cost it was served divided by its weight; the queue furthest
// behind goes first). Within a queue, items go by priority (higher first),
// then in the order they came. Plain code over tickets; the balancer decides
// what becomes of each item it takes out.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

namespace cohort::actors::balancer {

class ready_queues {
public:
  /// A waiting item: its ticket and priority (work_item::priority).
  struct entry {
    uint64_t ticket = 0;
    int32_t priority = 0;
  };

  /// `tenants` queues, plus one for merged launches.
  explicit ready_queues(size_t tenants = 0)
      : queues_(tenants + 1), vtime_(tenants + 1, 0.0) {
    // nop
  }

  /// Queues (tenants + 1).
  size_t size() const { return queues_.size(); }

  /// The queue of merged launches.
  size_t merged_queue() const { return queues_.size() - 1; }

  /// Queue `q`: highest priority first, then oldest first. Tickets that
  /// left are removed lazily: whoever walks a queue may erase them (the
  /// order of the others holds).
  std::deque<entry>& queue(size_t q) { return queues_[q]; }

  /// Puts `ticket` (`units` of cost, `priority`) in queue `q`: behind the
  /// items of its priority and higher or, when it comes back from a failed
  /// placement (`front`), ahead of the items of its priority (it keeps its
  /// turn); ahead of lower ones either way. A queue that was empty starts
  /// at the current virtual time: idle time earns no credit.
  void push(size_t q, uint64_t ticket, double units, bool front,
            int32_t priority = 0);

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
  std::vector<std::deque<entry>> queues_;
  std::vector<double> vtime_;
  double vclock_ = 0;
  uint64_t count_ = 0;
  double units_ = 0;
  uint64_t max_count_ = 0;
};

/// Who an item waits for and how urgent it is, to order waiting items:
/// tenant < 0 for an item that keeps its place (the balancer's own records,
/// tickets that left).
struct waiting_rank {
  int tenant = -1;
  int32_t priority = 0;
};

/// Reorders `tickets` (a list several tenants' items wait in, like the
/// parked ones) so that each tenant's items take that tenant's places in
/// the order of their priority, highest first, then as they were; no other
/// item moves, so no tenant waits longer for another's priorities.
/// `rank(ticket)` gives a waiting_rank. Takes no work when all priorities
/// are alike.
template <class Tickets, class Rank>
void order_within_tenants(Tickets& tickets, Rank rank) {
  struct place {
    size_t at;
    int tenant;
    int32_t priority;
    uint64_t ticket;
  };
  std::vector<place> ranked;
  bool alike = true;
  for (size_t i = 0; i < tickets.size(); ++i) {
    waiting_rank r = rank(tickets[i]);
    if (r.tenant < 0)
      continue;
    if (!ranked.empty() && r.priority != ranked.front().priority)
      alike = false;
    ranked.push_back({i, r.tenant, r.priority, tickets[i]});
  }
  if (alike)
    return;
  // The places, by tenant then position; the tickets, by tenant then
  // priority (stable: in their order within a priority).
  auto tickets_in_order = ranked;
  std::stable_sort(
      ranked.begin(), ranked.end(),
      [](const place& a, const place& b) { return a.tenant < b.tenant; });
  std::stable_sort(tickets_in_order.begin(), tickets_in_order.end(),
                   [](const place& a, const place& b) {
                     return a.tenant != b.tenant ? a.tenant < b.tenant
                                                 : a.priority > b.priority;
                   });
  for (size_t k = 0; k < ranked.size(); ++k)
    tickets[ranked[k].at] = tickets_in_order[k].ticket;
}

/// A ticket placed on a device and not sent to it yet, with its rank.
struct ranked_ticket {
  uint64_t ticket = 0;
  waiting_rank rank;
};

/// Appends `t` to `tickets` (a device's queue in the node) and moves it
/// ahead of its tenant's items of lower priority: it takes the place of the
/// first of them, and they move back one of the tenant's places each. Other
/// tenants' places do not move, nor do items that keep their place (tenant
/// < 0). Each tenant's items stay in order of priority.
inline void insert_within_tenant(std::vector<ranked_ticket>& tickets,
                                 ranked_ticket t) {
  tickets.push_back(t);
  if (t.rank.tenant < 0)
    return;
  for (size_t at = tickets.size() - 1, j = at; j-- > 0;) {
    auto& r = tickets[j].rank;
    if (r.tenant != t.rank.tenant)
      continue;
    if (r.priority >= t.rank.priority)
      break;
    std::swap(tickets[j], tickets[at]);
    at = j;
  }
}

} // namespace cohort::actors::balancer
