#include "actors/supervisor.hpp"

#include <caf/all.hpp>

#include "devices/memory/device_memory.hpp"
#include "messages/errc.hpp"

namespace cohort::actors {

namespace {

using self_ptr = supervisor_actor::stateful_pointer<supervisor_state>;

void spawn_device(self_ptr self, uint32_t index) {
  auto& e = self->state.devices[index];
  device_actor_config dcfg;
  dcfg.index = index;
  dcfg.kernel_timeout = self->state.cfg.kernel_timeout;
  device_listener listener = self->state.balancer;
  if (e.dev->asynchronous()) {
    // A GPU's actor gets its own thread, bound to the GPU's NUMA node; it
    // never blocks on the GPU (completions arrive as messages).
    dcfg.bind_numa = true;
    e.handle = self->spawn<caf::detached>(device_impl, e.dev, listener, dcfg);
  } else {
    e.handle = self->spawn(device_impl, e.dev, listener, dcfg);
  }
  e.addr = e.handle.address();
  self->monitor(e.handle);
  self->send(self->state.balancer, up_atom::value, index, e.handle);
}

void device_event(self_ptr self, const std::string& device,
                  std::string detail) {
  std::vector<audit_event> evs{{audit_kind::device_event, "", 0, device, "",
                                std::move(detail), wall_clock_ns()}};
  self->send(self->state.audit, record_atom::value, std::move(evs));
}

// A device's memory read without its actor (it has none now).
memory_snapshot snapshot_of(devices::device& dev) {
  if (auto* mem = dev.memory())
    return mem->snapshot();
  memory_snapshot none;
  none.device = dev.info().name;
  return none;
}

void take_offline(self_ptr self, uint32_t index, caf::error reason) {
  auto& e = self->state.devices[index];
  e.offline = true;
  device_event(self, e.dev->info().name,
               "supervisor: offline for good: " + describe(reason));
  self->send(self->state.balancer, down_atom::value, index, std::move(reason),
             true);
}

} // namespace

supervisor_actor::behavior_type
supervisor_impl(supervisor_actor::stateful_pointer<supervisor_state> self,
                std::vector<std::shared_ptr<devices::device>> devices,
                balancer_actor balancer, audit_actor audit,
                supervisor_config cfg) {
  auto& st = self->state;
  for (auto& dev : devices)
    st.devices.emplace_back().dev = std::move(dev);
  st.balancer = std::move(balancer);
  st.audit = std::move(audit);
  st.cfg = cfg;
  self->set_down_handler([=](caf::down_msg& dm) {
    auto& st = self->state;
    for (uint32_t i = 0; i < st.devices.size(); ++i) {
      auto& e = st.devices[i];
      if (e.addr != dm.source)
        continue;
      e.handle = device_actor{};
      e.addr = caf::actor_addr{};
      auto now = std::chrono::steady_clock::now();
      while (!e.restarts.empty() &&
             now - e.restarts.front() > st.cfg.restart_period)
        e.restarts.pop_front();
      if (e.restarts.size() >= st.cfg.max_restarts) {
        take_offline(
            self, i,
            make_error(errc::device_lost,
                       describe(dm.reason) + " (restart limit of " +
                           std::to_string(st.cfg.max_restarts) + " per " +
                           std::to_string(st.cfg.restart_period.count()) +
                           " ms reached)"));
        return;
      }
      device_event(self, e.dev->info().name,
                   "supervisor: device actor down: " + describe(dm.reason));
      self->send(st.balancer, down_atom::value, i, dm.reason, false);
      self->delayed_send(self, st.cfg.restart_delay, restart_atom::value, i);
      return;
    }
  });
  self->set_exit_handler([=](caf::exit_msg& msg) {
    for (auto& e : self->state.devices)
      if (e.handle)
        self->send_exit(e.handle, msg.reason);
    self->quit(msg.reason);
  });
  return {
      [=](start_atom) {
        for (uint32_t i = 0; i < self->state.devices.size(); ++i)
          spawn_device(self, i);
        return true;
      },
      [=](restart_atom, uint32_t index) {
        auto& e = self->state.devices.at(index);
        if (e.offline || e.handle)
          return;
        if (auto err = e.dev->reset()) {
          take_offline(self, index, std::move(err));
          return;
        }
        e.restarts.push_back(std::chrono::steady_clock::now());
        device_event(self, e.dev->info().name,
                     "supervisor: reset and restarted (restart " +
                         std::to_string(e.restarts.size()) + ")");
        spawn_device(self, index);
      },
      [=](memory_atom) {
        using snapshots = std::vector<memory_snapshot>;
        auto rp = self->make_response_promise<snapshots>();
        auto& st = self->state;
        auto out = std::make_shared<snapshots>(st.devices.size());
        auto left = std::make_shared<size_t>(st.devices.size());
        if (*left == 0) {
          rp.deliver(snapshots{});
          return rp;
        }
        for (size_t i = 0; i < st.devices.size(); ++i) {
          auto one_done = [=](memory_snapshot s) mutable {
            (*out)[i] = std::move(s);
            if (--*left == 0)
              rp.deliver(std::move(*out));
          };
          auto& e = st.devices[i];
          if (!e.handle) {
            one_done(snapshot_of(*e.dev));
            continue;
          }
          auto name = e.dev->info().name;
          self->request(e.handle, std::chrono::seconds(10), memory_atom::value)
              .then([=](memory_snapshot& s) mutable { one_done(std::move(s)); },
                    [=](caf::error& err) mutable {
                      memory_snapshot gone;
                      gone.device = name;
                      gone.leak_report = "unavailable: " + describe(err);
                      one_done(std::move(gone));
                    });
        }
        return rp;
      },
  };
}

} // namespace cohort::actors
