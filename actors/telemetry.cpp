#include "actors/telemetry.hpp"

#include <caf/all.hpp>

namespace cohort::actors {

telemetry_actor::behavior_type
telemetry_impl(telemetry_actor::stateful_pointer<telemetry_state> self,
               std::vector<std::shared_ptr<devices::device>> devs,
               std::chrono::milliseconds interval) {
  self->state.devs = std::move(devs);
  self->state.interval = interval;
  self->send(self, tick_atom::value);
  return {
      [=](tick_atom) {
        auto& st = self->state;
        for (auto& d : st.devs) {
          devices::health::gpu_sample s;
          try {
            s = d->telemetry();
          } catch (const std::exception&) {
            // A library that throws loses this sample, not the sampler.
            continue;
          }
          if (!s.available)
            continue;
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
