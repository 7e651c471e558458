// Where the runtime's C++ API hears the ends of the items it submits: one
// sink for every caller, so that submitting needs no actor per call and no
// thread parked per item.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include "actors/balancer/balancer.hpp"
#include "actors/client_sink.hpp"
#include "actors/work_future.hpp"

namespace cohort::actors {

/// The client of runtime::submit and runtime::run. Its sink is an actor
/// companion: an end the balancer sends fills the item's future right in
/// the balancer's send, with no message to schedule and no thread to wake
/// unless one sleeps on that future. Callbacks run on the hub's own thread,
/// one at a time in the order items end, so that a
/// callback that blocks or submits more work never holds up the balancer.
/// Each item is tagged with the address of its slot (work_item::tag), by
/// which the balancer keys it and its end finds its way back: callers may
/// reuse ids freely, and ids stay what they gave everywhere else.
/// Thread-safe.
class client_hub {
public:
  client_hub(caf::actor_system& sys, entry_actor entry);

  /// Quits the hub's actors; `drain` first.
  ~client_hub();

  client_hub(const client_hub&) = delete;
  client_hub& operator=(const client_hub&) = delete;

  /// Submits `item`; its end fills the returned future.
  work_future submit(work_item item);

  /// Submits `item`; `done` is called with its end on the hub's thread.
  /// The ticket cancels it (cancel(ticket)).
  work_ticket submit(work_item item, work_callback done);

  /// Submits `items` in order with one message per max_submit_batch
  /// items; the futures in the same order.
  std::vector<work_future> submit(std::vector<work_item> items);

  /// Submits `items` in order; `done` is called with each one's end.
  void submit(std::vector<work_item> items, batch_callback done);

  /// Cancels the item of `f` (see the balancer's cancel): one that waits
  /// ends with cancelled; one that runs ends when its launch does, and its
  /// result is dropped.
  void cancel(const work_future& f);

  /// Cancels the item of `t`, by the same rules; nothing once it ended.
  void cancel(const work_ticket& t);

  /// Cancels every item submitted through the hub whose work_item::id is
  /// `id`, by the same rules.
  void cancel(uint64_t id);

  /// Waits until every callback of an item that ended so far has run (from
  /// a callback: returns at once).
  void drain();

  /// From a callback: runs `fn` on the callback thread once every callback
  /// of the batch being run has returned (before what they submitted is
  /// sent). Elsewhere: runs `fn` at once.
  void after_callbacks(std::function<void()> fn);

  /// From now on, what callbacks submitted and the hub still holds ends
  /// with shutting_down instead of being sent; what was sent before is in
  /// the entry's mailbox when this returns. The runtime's stop calls it
  /// before it closes the entry.
  void close();

  /// True on the thread that runs the callbacks.
  bool on_callback_thread() const;

  /// The number of the actor its items' ends go to (item_view::client).
  uint64_t client() const;

  /// On the callback thread: sends what its callbacks submitted and the hub
  /// still holds (all of it, or only when due unless `now`). Elsewhere it
  /// does nothing.
  void flush_held(bool now = true);

  /// A future that is already filled with `x` (for calls that end before
  /// anything is sent, such as after stop).
  static work_future ready(uint64_t id, caf::expected<work_result> x);

private:
  class callback_queue;

  /// Sends tagged items to the entry, max_submit_batch per message (held
  /// instead on the callback thread).
  void send_batches(std::vector<work_item> items);

  /// Sends tagged items to the entry now, max_submit_batch per message.
  void post(std::vector<work_item> items);

  /// Sends a tagged item, or holds it when on the callback thread.
  void send_one(work_item item);

  caf::actor_system& sys_;
  entry_actor entry_;
  /// Where an end that names an object and is never taken releases it
  /// (set on every slot; closed when the hub goes).
  std::shared_ptr<detail::object_home> home_;
  caf::actor companion_;
  client_sink sink_;
  /// What callbacks submitted, not yet sent (callback thread only).
  std::vector<work_item> held_;
  std::chrono::steady_clock::time_point held_since_;
  std::mutex close_mtx_;
  bool closed_ = false;
  /// Declared last: destroyed (its thread joined) first.
  std::unique_ptr<callback_queue> callbacks_;
};

} // namespace cohort::actors
