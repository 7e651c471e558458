#include "actors/telemetry.hpp"

#include <caf/all.hpp>

namespace cohort::actors {

telemetry_actor::behavior_type
telemetry_impl(telemetry_actor::stateful_pointer<telemetry_state> self,
               std::shared_ptr<const device_roster> roster,
               std::chrono::milliseconds interval, heat_limits limits,
               heat_listener listener) {
  auto& state = self->state;
  state.roster = std::move(roster);
  state.interval = interval;
  if (limits.any() && listener) {
    state.limits = limits;
    state.listener = std::move(listener);
  }
  self->send(self, tick_atom::value);
  return {
      [=](tick_atom) {
        auto& st = self->state;
        auto now = std::chrono::steady_clock::now();
        // The fleet as it is now: a GPU a rescan added is sampled from the
        // next tick on, with a watch of its own.
        auto devs = st.roster->devices();
        if (st.listener && st.heat.size() < devs.size())
          st.heat.resize(devs.size(), heat_watch{st.limits});
        for (size_t i = 0; i < devs.size(); ++i) {
          auto& d = devs[i];
          devices::health::gpu_sample s;
          try {
            s = d->telemetry();
          } catch (const std::exception&) {
            // A library that throws loses this sample, not the sampler.
            continue;
          }
          if (!s.available)
            continue;
          if (!st.heat.empty())
            if (auto c = st.heat[i].observe(s, now))
              self->send(st.listener, heat_atom::value, uint32_t(i),
                         uint8_t(c->level), std::move(c->why));
          auto wall = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
          d->keep_telemetry(wall, std::move(s));
        }
        self->delayed_send(self, st.interval, tick_atom::value);
      },
  };
}

} // namespace cohort::actors
