#include "actors/client_hub.hpp"

#include <climits>
#include <condition_variable>
#include <ctime>
#include <linux/futex.h>
#include <mutex>
#include <sched.h>
#include <sys/syscall.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include <caf/actor_companion.hpp>
#include <caf/all.hpp>

#include "messages/errc.hpp"

namespace cohort::actors {

namespace {

// A thread that waits for an end spins this many rounds (about a
// microsecond), then yields its core for up to `yield_for` (about what one
// item takes through the runtime), and only then sleeps.
constexpr int spin_rounds = 64;
constexpr auto yield_for = std::chrono::microseconds{50};

// How long items submitted from callbacks may be held to go out together.
constexpr auto hold_for = std::chrono::microseconds{20};

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

long futex(std::atomic<uint32_t>* word, int op, uint32_t val,
           const timespec* timeout) {
  return ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, val,
                   timeout, nullptr, 0);
}

// Spins `spin_rounds`, then yields the core for up to `yield_for` (a
// waiting thread must not keep the runtime's own threads off a small
// machine's cores), never past `deadline`, until `ready()`. False when the
// caller should sleep.
template <class Ready>
bool wait_briefly(const Ready& ready,
                  std::chrono::steady_clock::time_point deadline) {
  for (int i = 0; i < spin_rounds; ++i) {
    if (ready())
      return true;
    cpu_relax();
  }
  auto start = std::chrono::steady_clock::now();
  for (auto now = start; now - start < yield_for && now < deadline;
       now = std::chrono::steady_clock::now()) {
    if (ready())
      return true;
    ::sched_yield();
  }
  return false;
}

// The hub whose callback thread this is (null elsewhere): a wait on that
// thread first sends what its callbacks submitted and the hub still holds.
thread_local client_hub* holding_hub = nullptr;

detail::work_slot* slot_of(uint64_t id) {
  return reinterpret_cast<detail::work_slot*>(static_cast<uintptr_t>(id));
}

uint64_t id_of(detail::work_slot* slot) {
  return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(slot));
}

} // namespace

namespace detail {

void work_slot::fill(caf::expected<work_result> x) {
  outcome = std::move(x);
  if (state.exchange(1, std::memory_order_acq_rel) == 2)
    futex(&state, FUTEX_WAKE_PRIVATE, INT_MAX, nullptr);
}

bool work_slot::wait(const std::chrono::nanoseconds* timeout) {
  if (holding_hub != nullptr)
    holding_hub->flush_held();
  auto ready = [this] { return state.load(std::memory_order_acquire) == 1; };
  auto deadline = std::chrono::steady_clock::time_point::max();
  if (timeout != nullptr)
    deadline = std::chrono::steady_clock::now() + *timeout;
  if (wait_briefly(ready, deadline))
    return true;
  for (;;) {
    uint32_t s = 0;
    // Announce the sleeper; an end that came meanwhile shows as 1.
    if (!state.compare_exchange_strong(s, 2, std::memory_order_acq_rel) &&
        s == 1)
      return true;
    timespec ts{};
    if (timeout != nullptr) {
      auto left = deadline - std::chrono::steady_clock::now();
      if (left <= std::chrono::nanoseconds{0})
        return state.load(std::memory_order_acquire) == 1;
      auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left);
      ts.tv_sec = time_t(ns.count() / 1000000000);
      ts.tv_nsec = long(ns.count() % 1000000000);
    }
    futex(&state, FUTEX_WAIT_PRIVATE, 2, timeout ? &ts : nullptr);
    if (state.load(std::memory_order_acquire) == 1)
      return true;
  }
}

} // namespace detail

// Runs the callbacks of ended items on a thread of its own, one at a time in
// the order the items ended. An end is a pointer pushed under a mutex; the
// thread takes everything queued at once, and only a sleeping thread is
// woken. Before it sleeps it spins, then yields, for about the time one item
// takes through the runtime, as a future's waiter does. The thread shares
// the queue's state, so a queue destroyed from one of its own callbacks (a
// runtime destroyed there) lets its thread finish the queue and end.
//
// What the callbacks submit, the hub holds and sends as one message: after
// a callback once the first held item waited `hold_for` or a message is
// full, after the last callback of a batch, and before that thread waits
// for a future, cancels or stops the runtime.
class client_hub::callback_queue {
public:
  explicit callback_queue(client_hub* hub) : state_(std::make_shared<state>()) {
    state_->hub = hub;
    thread_ = std::thread([st = state_] { run(*st); });
  }

  ~callback_queue() {
    {
      std::lock_guard<std::mutex> guard{state_->mtx};
      state_->stop = true;
      state_->hub = nullptr;
    }
    state_->wake.notify_one();
    if (std::this_thread::get_id() == thread_.get_id()) {
      holding_hub = nullptr;
      thread_.detach();
    } else
      thread_.join();
  }

  void push(detail::work_slot* slot) {
    auto& st = *state_;
    bool sleeping;
    {
      std::lock_guard<std::mutex> guard{st.mtx};
      st.pending.push_back(slot);
      st.queued.store(true, std::memory_order_release);
      sleeping = st.sleeping;
    }
    if (sleeping)
      st.wake.notify_one();
  }

  bool on_own_thread() const {
    return std::this_thread::get_id() == thread_.get_id();
  }

  /// Waits until every callback queued so far has run. From a callback it
  /// returns at once (its own end would never come).
  void drain() {
    if (std::this_thread::get_id() == thread_.get_id())
      return;
    auto& st = *state_;
    std::unique_lock<std::mutex> guard{st.mtx};
    st.idle.wait(guard, [&st] { return st.pending.empty() && !st.running; });
  }

private:
  struct state {
    std::mutex mtx;
    std::condition_variable wake;
    std::condition_variable idle;
    std::vector<detail::work_slot*> pending;
    std::atomic<bool> queued{false};
    bool sleeping = false;
    bool running = false;
    bool stop = false;
    /// Null once the hub is going (set under `mtx`).
    client_hub* hub = nullptr;
    /// Functions to run after the batch (callback thread only).
    std::vector<std::function<void()>> after;
  };

  static void run(state& st) {
    holding_hub = st.hub;
    std::vector<detail::work_slot*> batch;
    std::unique_lock<std::mutex> guard{st.mtx};
    for (;;) {
      if (st.pending.empty()) {
        st.running = false;
        st.idle.notify_all();
        if (st.stop)
          return;
        guard.unlock();
        bool soon = wait_briefly(
            [&st] { return st.queued.load(std::memory_order_acquire); },
            std::chrono::steady_clock::time_point::max());
        guard.lock();
        if (!soon && st.pending.empty() && !st.stop) {
          st.sleeping = true;
          st.wake.wait(guard, [&st] { return !st.pending.empty() || st.stop; });
          st.sleeping = false;
        }
        continue;
      }
      batch.swap(st.pending);
      st.queued.store(false, std::memory_order_relaxed);
      st.running = true;
      guard.unlock();
      for (auto* slot : batch) {
        auto cb = std::move(slot->callback);
        // A callback's exception must not end the thread that runs the
        // others: it is dropped.
        try {
          cb(std::move(slot->outcome));
        } catch (...) {
        }
        // Taken by the callback, with any object the end names.
        slot->outcome = caf::error{};
        slot->release();
        if (auto* hub = holding_hub)
          hub->flush_held(false);
      }
      batch.clear();
      // What callbacks asked to run after the batch, then what they (or
      // these) submitted.
      run_after(st);
      if (auto* hub = holding_hub)
        hub->flush_held();
      guard.lock();
      // A hub going away from one of these callbacks has cleared `hub`.
      holding_hub = st.hub;
    }
  }

  std::shared_ptr<state> state_;
  std::thread thread_;

public:
  /// Runs on this thread after the current batch's callbacks (from one of
  /// them).
  void after_batch(std::function<void()> fn) {
    state_->after.push_back(std::move(fn));
  }

private:
  static void run_after(state& st) {
    // A function may ask for another: it runs in this round too.
    for (size_t i = 0; i < st.after.size(); ++i) {
      auto fn = std::move(st.after[i]);
      try {
        fn();
      } catch (...) {
      }
    }
    st.after.clear();
  }
};

caf::expected<work_result> work_future::get() {
  if (slot_ == nullptr)
    return make_error(errc::invalid_arguments,
                      "work_future::get on an empty future (default-made, "
                      "moved from, or already taken)");
  slot_->wait(nullptr);
  auto out = std::move(slot_->outcome);
  // Taken: the slot no longer answers for an object the end names.
  slot_->outcome = caf::error{};
  reset();
  return out;
}

bool work_future::wait_for(std::chrono::nanoseconds timeout) const {
  if (slot_ == nullptr)
    return false;
  return slot_->wait(&timeout);
}

client_hub::client_hub(caf::actor_system& sys, entry_actor entry)
    : sys_(sys), entry_(std::move(entry)) {
  home_ = std::make_shared<detail::object_home>();
  home_->release = [dest = caf::actor_cast<caf::actor>(entry_)](uint64_t id) {
    caf::anon_send(dest, object_atom::value, release_atom::value, id);
  };
  // Callbacks: one at a time, on a thread of their own.
  callbacks_ = std::make_unique<callback_queue>(this);
  companion_ = caf::actor_cast<caf::actor>(sys.spawn<caf::actor_companion>());
  auto* self = static_cast<caf::actor_companion*>(
      caf::actor_cast<caf::abstract_actor*>(companion_));
  auto* callbacks = callbacks_.get();
  // Runs in the sender's thread (the balancer's), once per end.
  self->on_enqueue([callbacks](caf::mailbox_element_ptr ptr) {
    if (!ptr)
      return;
    auto& msg = ptr->content();
    detail::work_slot* slot = nullptr;
    caf::expected<work_result> end{caf::error{}};
    if (msg.match_elements<result_atom, work_result>()) {
      auto& res = msg.get_mutable_as<work_result>(1);
      slot = slot_of(res.tag);
      res.tag = 0;
      end = std::move(res);
    } else if (msg.match_elements<failed_atom, uint64_t, caf::error>()) {
      // A failure carries the item's key: its tag.
      slot = slot_of(msg.get_as<uint64_t>(1));
      end = std::move(msg.get_mutable_as<caf::error>(2));
    } else {
      // Only the balancer has this address, and it sends only ends.
      return;
    }
    if (slot->callback) {
      slot->outcome = std::move(end);
      callbacks->push(slot);
      return;
    }
    slot->fill(std::move(end));
    slot->release();
  });
  sink_ = caf::actor_cast<client_sink>(companion_);
}

client_hub::~client_hub() {
  flush_held();
  drain();
  // Futures that outlive the hub release nothing.
  home_->close();
  if (auto* self = static_cast<caf::actor_companion*>(
          caf::actor_cast<caf::abstract_actor*>(companion_))) {
    // Late messages are dropped; the companion terminates (as CAF's own
    // users of it do: it never runs on a scheduler thread).
    self->on_enqueue({});
    caf::scoped_execution_unit context{&sys_};
    self->cleanup(caf::exit_reason::user_shutdown, &context);
  }
  // Ends still queued run before the thread stops.
  callbacks_->drain();
}

work_future client_hub::submit(work_item item) {
  auto* slot = new detail::work_slot;
  slot->home = home_;
  // One reference for the future, one for the item in flight.
  slot->refs.store(2, std::memory_order_relaxed);
  slot->id = item.id;
  item.tag = id_of(slot);
  send_one(std::move(item));
  return work_future{slot};
}

work_ticket client_hub::submit(work_item item, work_callback done) {
  auto* slot = new detail::work_slot;
  slot->home = home_;
  slot->id = item.id;
  slot->callback = std::move(done);
  // One reference for the end's path, one for the ticket.
  slot->refs.store(2, std::memory_order_relaxed);
  item.tag = id_of(slot);
  send_one(std::move(item));
  return work_ticket{slot};
}

void client_hub::send_one(work_item item) {
  if (holding_hub != this) {
    caf::anon_send(entry_, submit_atom::value, std::move(item), sink_);
    return;
  }
  if (held_.empty())
    held_since_ = std::chrono::steady_clock::now();
  held_.push_back(std::move(item));
}

void client_hub::flush_held(bool now) {
  if (holding_hub != this || held_.empty())
    return;
  if (!now && held_.size() < max_submit_batch &&
      std::chrono::steady_clock::now() - held_since_ < hold_for)
    return;
  std::vector<work_item> items;
  items.swap(held_);
  std::lock_guard<std::mutex> guard{close_mtx_};
  if (!closed_) {
    // Under the lock: in the entry's mailbox before close() returns, and so
    // before the runtime's stop tells the entry to close its door. More
    // than max_submit_batch (one callback's loop) go as several messages.
    post(std::move(items));
    return;
  }
  // The runtime stops: these never left, and end here as a submission
  // after stop does.
  for (auto& item : items) {
    auto* slot = slot_of(item.tag);
    auto end = caf::expected<work_result>{
        make_error(errc::shutting_down, "the runtime is stopped")};
    if (slot->callback) {
      slot->outcome = std::move(end);
      callbacks_->push(slot);
    } else {
      slot->fill(std::move(end));
      slot->release();
    }
  }
}

void client_hub::close() {
  std::lock_guard<std::mutex> guard{close_mtx_};
  closed_ = true;
}

std::vector<work_future> client_hub::submit(std::vector<work_item> items) {
  std::vector<work_future> out;
  out.reserve(items.size());
  for (auto& item : items) {
    auto* slot = new detail::work_slot;
    slot->home = home_;
    slot->refs.store(2, std::memory_order_relaxed);
    slot->id = item.id;
    item.tag = id_of(slot);
    out.push_back(work_future{slot});
  }
  send_batches(std::move(items));
  return out;
}

void client_hub::submit(std::vector<work_item> items, batch_callback done) {
  auto shared = std::make_shared<batch_callback>(std::move(done));
  for (auto& item : items) {
    auto* slot = new detail::work_slot;
    slot->home = home_;
    slot->id = item.id;
    slot->callback = [shared, id = item.id](caf::expected<work_result> x) {
      (*shared)(id, std::move(x));
    };
    item.tag = id_of(slot);
  }
  send_batches(std::move(items));
}

void client_hub::send_batches(std::vector<work_item> items) {
  if (holding_hub == this) {
    for (auto& item : items)
      send_one(std::move(item));
    flush_held(false);
    return;
  }
  post(std::move(items));
}

void client_hub::post(std::vector<work_item> items) {
  if (items.size() <= max_submit_batch) {
    caf::anon_send(entry_, submit_atom::value, std::move(items), sink_);
    return;
  }
  for (size_t i = 0; i < items.size(); i += max_submit_batch) {
    auto end = std::min(items.size(), i + max_submit_batch);
    std::vector<work_item> part{
        std::make_move_iterator(items.begin() + long(i)),
        std::make_move_iterator(items.begin() + long(end))};
    caf::anon_send(entry_, submit_atom::value, std::move(part), sink_);
  }
}

void client_hub::cancel(const work_future& f) {
  flush_held();
  if (f.slot_ != nullptr && !f.ready())
    caf::anon_send(entry_, cancel_atom::value, id_of(f.slot_), sink_);
}

void client_hub::cancel(const work_ticket& t) {
  flush_held();
  if (t.slot_ != nullptr)
    caf::anon_send(entry_, cancel_atom::value, id_of(t.slot_), sink_);
}

void client_hub::cancel(uint64_t id) {
  flush_held();
  caf::anon_send(entry_, cancel_id_atom::value, id, sink_);
}

void client_hub::drain() {
  callbacks_->drain();
}

void client_hub::after_callbacks(std::function<void()> fn) {
  if (holding_hub == this)
    callbacks_->after_batch(std::move(fn));
  else
    fn();
}

uint64_t client_hub::client() const {
  return companion_ ? uint64_t(companion_.id()) : 0;
}

bool client_hub::on_callback_thread() const {
  return callbacks_->on_own_thread();
}

work_future client_hub::ready(uint64_t id, caf::expected<work_result> x) {
  auto* slot = new detail::work_slot;
  slot->id = id;
  slot->fill(std::move(x));
  return work_future{slot};
}

} // namespace cohort::actors
