#include "actors/telemetry.hpp"

#include <caf/all.hpp>

namespace cohort::actors {

telemetry_actor::behavior_type
telemetry_impl(telemetry_actor::stateful_pointer<telemetry_state> self,
               std::vector<std::shared_ptr<devices::device>> devs,
               std::chrono::milliseconds interval, heat_limits limits,
               heat_listener listener) {
  auto& state = self->state;
  state.devs = std::move(devs);
  state.interval = interval;
  if (limits.any() && listener) {
    state.heat.assign(state.devs.size(), heat_watch{limits});
    state.listener = std::move(listener);
  }
  self->send(self, tick_atom::value);
  return {
      [=](tick_atom) {
        auto& st = self->state;
        auto now = std::chrono::steady_clock::now();
        for (size_t i = 0; i < st.devs.size(); ++i) {
          auto& d = st.devs[i];
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
