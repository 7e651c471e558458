#include "actors/audit.hpp"

#include <chrono>

#include <caf/all.hpp>

#include "messages/errc.hpp"

namespace cohort::actors {

namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

using self_ptr = audit_actor::stateful_pointer<audit_state>;

void keep_first(self_ptr self, caf::error err) {
  if (err && !self->state.write_error)
    self->state.write_error = std::move(err);
}

// Makes sure a tick arrives by the time buffered records are due to be
// written (20 ms) or written ones synced (audit_fsync::interval). A tick
// that turns out early does no harm: it only writes what is there.
void schedule_tick(self_ptr self) {
  auto& st = self->state;
  std::optional<milliseconds> delay;
  if (st.log->pending() > 0)
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
                                      std::shared_ptr<audit_log> log) {
  // The actor is the only user of the log from now on.
  self->state.log = std::move(log);
  return {
      [=](record_atom, std::vector<audit_event>& events) {
        auto& st = self->state;
        // More events already waiting: let a full batch grow so that one
        // write and one fdatasync cover them too (group commit). The last
        // message of a burst writes what is full.
        bool more = !self->mailbox().empty();
        for (auto& ev : events)
          keep_first(self, st.log->append(ev, more));
        schedule_tick(self);
      },
      [=](flush_atom) -> caf::result<uint64_t> {
        keep_first(self, self->state.log->flush(true));
        if (self->state.write_error)
          return self->state.write_error;
        return self->state.log->records();
      },
      [=](stats_atom) { return self->state.log->stats(); },
      [=](tick_atom) {
        auto& st = self->state;
        // Forgets any other tick in flight: at worst one more is scheduled.
        st.next_tick = steady_clock::time_point::max();
        keep_first(self, st.log->tick());
        schedule_tick(self);
      },
  };
}

} // namespace cohort::actors
