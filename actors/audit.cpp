#include "actors/audit.hpp"

#include <chrono>

#include <caf/all.hpp>

#include "messages/errc.hpp"

namespace cohort::actors {

namespace {

void write_buffered(audit_actor::stateful_pointer<audit_state> self,
                    bool sync) {
  if (auto err = self->state.log->flush(sync); err && !self->state.write_error)
    self->state.write_error = err;
}

} // namespace

audit_actor::behavior_type
audit_impl(audit_actor::stateful_pointer<audit_state> self,
           std::shared_ptr<audit_log> log) {
  // The actor is the only user of the log from now on.
  self->state.log = std::move(log);
  return {
      [=](record_atom, std::vector<audit_event>& events) {
        auto& st = self->state;
        for (auto& ev : events)
          if (auto err = st.log->append(ev); err && !st.write_error)
            st.write_error = err;
        if (st.log->pending() > 0 && !st.tick_scheduled) {
          st.tick_scheduled = true;
          self->delayed_send(self, std::chrono::milliseconds(20),
                             tick_atom::value);
        }
      },
      [=](flush_atom) -> caf::result<uint64_t> {
        write_buffered(self, true);
        if (self->state.write_error)
          return self->state.write_error;
        return self->state.log->records();
      },
      [=](tick_atom) {
        self->state.tick_scheduled = false;
        write_buffered(self, false);
      },
  };
}

} // namespace cohort::actors
