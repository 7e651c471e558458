// The end of one item submitted through runtime::submit: its result or its
// error, delivered once, without a thread parked per item.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <utility>

#include <caf/expected.hpp>

#include "messages/work.hpp"

namespace cohort::detail {
/// The public API's bridge to the slot of a future (api/cohort.cpp).
struct slot_access;
} // namespace cohort::detail

namespace cohort::actors {

/// What a callback of runtime::submit gets: the item's result or why it
/// ended without one.
using work_callback = std::function<void(caf::expected<work_result>)>;

/// What a callback of a batched runtime::submit gets: the id the client
/// gave the item, and its result or why it ended without one.
using batch_callback =
    std::function<void(uint64_t id, caf::expected<work_result>)>;

namespace detail {

/// Where the handles of one runtime's objects are released (the public
/// API's object_ref, and ends whose object nobody took): the runtime while
/// it lives, nowhere once it has stopped. Thread-safe.
struct object_home {
  std::mutex mtx;
  std::function<void(uint64_t)> release;

  /// Releases one handle of object `id`.
  void drop(uint64_t id) {
    std::lock_guard<std::mutex> guard{mtx};
    if (release)
      release(id);
  }

  /// The runtime stops: later drops do nothing.
  void close() {
    std::lock_guard<std::mutex> guard{mtx};
    release = nullptr;
  }
};

/// One submitted item's end, shared by its work_future (if any) and the
/// runtime's client hub until both let go. Thread-safe as used: the hub
/// fills it once, then only the future reads it.
struct work_slot {
  /// 0 pending, 1 ended, 2 pending with a thread asleep on it (futex word).
  std::atomic<uint32_t> state{0};
  std::atomic<uint32_t> refs{1};
  /// The id the client gave the item (its tag is the slot's address).
  uint64_t id = 0;
  caf::expected<work_result> outcome{caf::error{}};
  /// Called with the end instead of filling `outcome`, when set.
  work_callback callback;
  /// Set by the public API: an end that names an object and is never
  /// taken releases the object's handle there.
  std::shared_ptr<object_home> home;

  work_slot() = default;
  work_slot(const work_slot&) = delete;
  work_slot& operator=(const work_slot&) = delete;
  ~work_slot() {
    if (home && outcome && outcome->object.id != 0)
      home->drop(outcome->object.id);
  }

  /// Stores the end and wakes a waiter (a futex wake only if one sleeps).
  void fill(caf::expected<work_result> x);

  /// Waits until the end is in; false if `timeout` (when given) passed
  /// first. Spins briefly before it sleeps: an end that comes within a few
  /// microseconds costs no wake-up.
  bool wait(const std::chrono::nanoseconds* timeout);

  void release() {
    if (refs.fetch_sub(1, std::memory_order_acq_rel) == 1)
      delete this;
  }
};

} // namespace detail

/// The end of one submitted item. Move-only; `get` takes the end out once.
/// Dropping a future does not cancel its item (runtime::cancel does): the
/// item still ends exactly once, and its end is then discarded. Not
/// thread-safe: one thread uses a future at a time.
class work_future {
public:
  work_future() = default;

  work_future(work_future&& other) noexcept
      : slot_(std::exchange(other.slot_, nullptr)) {
    // nop
  }

  work_future& operator=(work_future&& other) noexcept {
    if (this != &other) {
      reset();
      slot_ = std::exchange(other.slot_, nullptr);
    }
    return *this;
  }

  work_future(const work_future&) = delete;
  work_future& operator=(const work_future&) = delete;

  ~work_future() { reset(); }

  /// False for a default-constructed future and after `get`.
  bool valid() const { return slot_ != nullptr; }

  /// The item's id, as the client gave it.
  uint64_t id() const { return slot_ ? slot_->id : 0; }

  /// True once the item has ended (get will not wait).
  bool ready() const {
    return slot_ && slot_->state.load(std::memory_order_acquire) == 1;
  }

  /// Waits for the item's end and returns it; the future is then empty. On
  /// an empty future: invalid_arguments.
  caf::expected<work_result> get();

  /// Waits at most `timeout` for the end; true if it is in.
  bool wait_for(std::chrono::nanoseconds timeout) const;

private:
  friend class client_hub;
  friend struct cohort::detail::slot_access;

  explicit work_future(detail::work_slot* slot) : slot_(slot) {
    // nop
  }

  void reset() {
    if (slot_ != nullptr)
      std::exchange(slot_, nullptr)->release();
  }

  detail::work_slot* slot_ = nullptr;
};

/// The handle of one item submitted with a callback: runtime::cancel(ticket)
/// cancels that item and no other. It keeps the item's slot, so its tag
/// names no other item while the ticket lives, even after the item ended
/// (a cancel then does nothing). Move-only; dropping it changes nothing
/// for the item.
class work_ticket {
public:
  work_ticket() = default;
  work_ticket(work_ticket&& other) noexcept
      : slot_(std::exchange(other.slot_, nullptr)) {
    // nop
  }
  work_ticket& operator=(work_ticket&& other) noexcept {
    if (this != &other) {
      reset();
      slot_ = std::exchange(other.slot_, nullptr);
    }
    return *this;
  }
  work_ticket(const work_ticket&) = delete;
  work_ticket& operator=(const work_ticket&) = delete;
  ~work_ticket() { reset(); }

  /// False for a default-constructed ticket (an item refused at once).
  bool valid() const { return slot_ != nullptr; }

private:
  friend class client_hub;
  friend struct cohort::detail::slot_access;

  explicit work_ticket(detail::work_slot* slot) : slot_(slot) {
    // nop
  }

  void reset() {
    if (slot_ != nullptr)
      std::exchange(slot_, nullptr)->release();
  }

  detail::work_slot* slot_ = nullptr;
};

} // namespace cohort::actors
