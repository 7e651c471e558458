#include "actors/audit.hpp"

#include <algorithm>
#include <chrono>
#include <span>

#include <caf/all.hpp>

#include "messages/errc.hpp"

namespace cohort::actors {

namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

using self_ptr = audit_actor::stateful_pointer<audit_state>;

// While writes fail, the next try comes this long after the last.
constexpr auto retry_interval = milliseconds(100);

// Tells the listener when the log stopped or started being writable.
void report(self_ptr self, const caf::error& err) {
  auto& st = self->state;
  bool failing = st.log->failing();
  if (failing == st.failing)
    return;
  st.failing = failing;
  st.why = failing ? describe(err) : std::string{};
  if (st.listener)
    self->send(st.listener, audit_atom::value, !failing, st.why);
}

// Makes sure a tick arrives by the time buffered records are due to be
// written (20 ms) or written ones synced (audit_fsync::interval). A tick
// that turns out early does no harm: it only writes what is there.
void schedule_tick(self_ptr self) {
  auto& st = self->state;
  std::optional<milliseconds> delay;
  if (st.log->failing())
    delay = retry_interval;
  else if (st.log->pending() > 0)
    delay = milliseconds(20);
  if (auto sync = st.log->sync_due_in(); sync && (!delay || *sync < *delay))
    delay = std::max(*sync, milliseconds(1));
  if (!delay)
    return;
  auto at = steady_clock::now() + *delay;
  if (at >= st.next_tick)
    return;
  st.next_tick = at;
  self->delayed_send(self, *delay, tick_atom::value);
}

} // namespace

audit_actor::behavior_type audit_impl(self_ptr self,
                                      std::shared_ptr<audit::audit_log> log) {
  // The actor is the only user of the log from now on.
  self->state.log = std::move(log);
  return {
      [=](record_atom, std::vector<audit_event>& events) {
        auto& st = self->state;
        // More events already waiting: let a full batch grow so that one
        // write and one fdatasync cover them too (group commit). The last
        // message of a burst writes what is full.
        bool more = !self->mailbox().empty();
        caf::error err;
        for (auto& ev : events)
          if (auto e = st.log->append(ev, more); e && !err)
            err = std::move(e);
        report(self, err);
        schedule_tick(self);
      },
      [=](record_atom, audit_batch& batch) {
        auto& st = self->state;
        bool more = !self->mailbox().empty();
        caf::error err;
        auto note = [&](caf::error e) {
          if (e && !err)
            err = std::move(e);
        };
        std::span<const audit_entry> entries{batch.entries};
        size_t from = 0;
        for (size_t i = 0; i <= batch.events.size(); ++i) {
          bool last = i == batch.events.size();
          auto at = i < batch.at.size() ? size_t(batch.at[i]) : from;
          auto to = last ? entries.size()
                         : std::clamp<size_t>(at, from, entries.size());
          if (to > from)
            note(st.log->append(entries.subspan(from, to - from),
                                more || !last));
          from = to;
          if (!last)
            note(st.log->append(batch.events[i],
                                more || i + 1 < batch.events.size() ||
                                    from < entries.size()));
        }
        report(self, err);
        schedule_tick(self);
      },
      [=](flush_atom) -> caf::result<uint64_t> {
        auto err = self->state.log->flush(true);
        report(self, err);
        schedule_tick(self);
        if (err)
          return err;
        return self->state.log->records();
      },
      [=](stats_atom) { return self->state.log->stats(); },
      [=](tick_atom) {
        auto& st = self->state;
        // Forgets any other tick in flight: at worst one more is scheduled.
        st.next_tick = steady_clock::time_point::max();
        // While writes fail, a tick tries to write everything again.
        report(self, st.log->failing() ? st.log->flush(true) : st.log->tick());
        schedule_tick(self);
      },
      [=](watch_atom, audit_listener& listener) {
        auto& st = self->state;
        st.listener = std::move(listener);
        if (st.failing)
          self->send(st.listener, audit_atom::value, false, st.why);
      },
      [=](device_atom, uint32_t index, std::string& name) {
        self->state.log->set_device_name(index, std::move(name));
        return true;
      },
  };
}

} // namespace cohort::actors
