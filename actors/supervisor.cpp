#include "actors/supervisor.hpp"

#include <algorithm>

#include <caf/all.hpp>

#include "devices/memory/device_memory.hpp"
#include "messages/errc.hpp"

namespace cohort::actors {

namespace {

using self_ptr = supervisor_actor::stateful_pointer<supervisor_state>;
using clock = std::chrono::steady_clock;

void device_event(self_ptr self, const std::string& device,
                  std::string detail) {
  std::vector<audit_event> evs{{audit_kind::device_event, "", 0, device, "",
                                std::move(detail), wall_clock_ns()}};
  self->send(self->state.audit, record_atom::value, std::move(evs));
}

// Tells the balancer that device `index` changed: its generation and
// status now, and why. The one message per change of its life cycle.
void tell(self_ptr self, uint32_t index, device_cause cause,
          caf::error reason = {}, std::string why = {}) {
  auto& e = self->state.devices[index];
  device_change c;
  c.index = index;
  c.generation = e.generation;
  c.status = e.life.status();
  c.cause = cause;
  c.reason = std::move(reason);
  c.why = why.empty() && c.reason ? describe(c.reason) : std::move(why);
  if (cause == device_cause::started)
    c.handle = e.handle;
  self->send(self->state.balancer, device_atom::value, std::move(c));
}

// Moves device `index` through its life cycle and tells the audit log when
// its status changes; the caller tells the balancer. Sets `changed`.
caf::error transition(self_ptr self, uint32_t index, lifecycle_event ev,
                      const std::string& why, bool* changed = nullptr) {
  auto& e = self->state.devices[index];
  auto before = e.life.status();
  auto after = e.life.apply(ev);
  if (!after)
    return after.error();
  if (changed != nullptr)
    *changed = *after != before;
  if (*after != before)
    device_event(self, e.dev->info().name,
                 std::string{"supervisor: "} + to_string(before) + " -> " +
                     to_string(*after) + " (" + to_string(ev) + ": " + why +
                     ")");
  return caf::none;
}

// A change of status while the device's actor runs reaches the balancer.
caf::error transition_running(self_ptr self, uint32_t index,
                              lifecycle_event ev, const std::string& why) {
  bool changed = false;
  if (auto err = transition(self, index, ev, why, &changed))
    return err;
  if (changed && self->state.devices[index].handle)
    tell(self, index, device_cause::health, {}, why);
  return caf::none;
}

void spawn_device(self_ptr self, uint32_t index) {
  auto& st = self->state;
  auto& e = st.devices[index];
  device_actor_config dcfg;
  dcfg.index = index;
  dcfg.kernel_timeout = st.cfg.kernel_timeout;
  dcfg.kernel_timeouts = st.cfg.kernel_timeouts;
  dcfg.health = self;
  device_listener listener = st.balancer;
  if (e.dev->asynchronous()) {
    // A GPU's actor gets its own thread, bound to the GPU's NUMA node; it
    // never blocks on the GPU (completions arrive as messages).
    dcfg.bind_numa = true;
    e.handle = self->spawn<caf::detached>(device_impl, e.dev, listener, dcfg);
  } else {
    e.handle = self->spawn(device_impl, e.dev, listener, dcfg);
  }
  e.addr = e.handle.address();
  ++e.generation;
  self->monitor(e.handle);
}

// A device's memory read without its actor (it has none now).
memory_snapshot snapshot_of(devices::device& dev) {
  if (auto* mem = dev.memory())
    return mem->snapshot();
  memory_snapshot none;
  none.device = dev.info().name;
  return none;
}

// A device without an actor that will not be restarted now: its memory's
// books are cleared, so that the tenant ledger stops charging the blocks of
// the launches lost with it (a simulated GPU's blocks go back to the host; a
// real GPU's went with its context). The balancer refunds them when it
// hears that the device is gone for good. Through the device, which drops
// what its launches held along with the books.
void release_memory(supervisor_state::entry& e) {
  e.dev->release_memory();
}

void give_up(self_ptr self, uint32_t index, caf::error reason) {
  release_memory(self->state.devices[index]);
  transition(self, index, lifecycle_event::gave_up, describe(reason));
  tell(self, index, device_cause::gave_up, std::move(reason));
}

// Recent restarts of `e` (within the period), oldest dropped.
size_t recent_restarts(supervisor_state& st, supervisor_state::entry& e) {
  auto now = clock::now();
  while (!e.restarts.empty() &&
         now - e.restarts.front() > st.cfg.restart_period)
    e.restarts.pop_front();
  return e.restarts.size();
}

// The pause before the next restart: doubled per recent restart.
std::chrono::milliseconds backoff(const supervisor_config& cfg, size_t n) {
  auto d = cfg.restart_delay;
  for (size_t i = 0; i < n && d < cfg.max_restart_delay; ++i)
    d *= 2;
  return std::min(d, std::max(cfg.max_restart_delay, cfg.restart_delay));
}

int find_device(supervisor_state& st, const std::string& name) {
  for (size_t i = 0; i < st.devices.size(); ++i)
    if (st.devices[i].dev->info().name == name)
      return int(i);
  return -1;
}

caf::error unknown_device(const std::string& name) {
  return make_error(errc::unknown_device, "no device is named '" + name + "'");
}

// The actor of device `index` went down.
void on_device_down(self_ptr self, uint32_t index, const caf::error& reason) {
  auto& st = self->state;
  auto& e = st.devices[index];
  e.handle = device_actor{};
  e.addr = caf::actor_addr{};
  auto sibling = std::exchange(e.by_sibling, false);
  if (std::exchange(e.by_operator, false)) {
    // Taken offline on purpose. The reset gives back what its launches held.
    e.dev->reset();
    auto why = make_error(errc::device_offline, "taken offline by an operator");
    if (e.life.status() == device_status::resetting) {
      // Brought online again before its actor was gone: restart it now.
      e.own_loss = false;
      tell(self, index, device_cause::restarting, std::move(why));
      self->send(self, restart_atom::value, index);
      return;
    }
    tell(self, index, device_cause::offline, std::move(why));
    return;
  }
  if (!sibling && recent_restarts(st, e) >= st.cfg.max_restarts) {
    give_up(self, index,
            make_error(errc::device_lost,
                       describe(reason) + " (restart limit of " +
                           std::to_string(st.cfg.max_restarts) + " per " +
                           std::to_string(st.cfg.restart_period.count()) +
                           " ms reached)"));
    return;
  }
  transition(self, index, lifecycle_event::lost, describe(reason));
  e.own_loss = !sibling;
  if (sibling)
    tell(self, index, device_cause::restarting,
         make_error(errc::device_restarted,
                    e.dev->info().name + ": " + describe(reason)));
  else
    tell(self, index,
         is_device_fault(code_of(reason)) ? device_cause::fault : device_cause::crashed,
         reason);
  auto delay =
      sibling ? st.cfg.restart_delay : backoff(st.cfg, recent_restarts(st, e));
  self->delayed_send(self, delay, restart_atom::value, index);
  if (sibling || st.cfg.strategy != restart_strategy::one_for_all)
    return;
  // One for all: every other live device restarts with it.
  for (uint32_t j = 0; j < st.devices.size(); ++j) {
    auto& other = st.devices[j];
    if (j == index || !other.handle)
      continue;
    other.by_sibling = true;
    self->send_exit(
        other.handle,
        make_error(errc::device_restarted,
                   "restarted with " + e.dev->info().name + " (one_for_all)"));
  }
}

void schedule_quiet_tick(self_ptr self) {
  auto& st = self->state;
  if (st.quiet_tick_scheduled)
    return;
  st.quiet_tick_scheduled = true;
  self->delayed_send(self,
                     st.cfg.degraded_quiet / 4 + std::chrono::milliseconds(1),
                     tick_atom::value);
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
    for (uint32_t i = 0; i < st.devices.size(); ++i)
      if (st.devices[i].addr == dm.source) {
        on_device_down(self, i, dm.reason);
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
        for (uint32_t i = 0; i < self->state.devices.size(); ++i) {
          spawn_device(self, i);
          transition(self, i, lifecycle_event::restarted, "started");
          tell(self, i, device_cause::started, {}, "started");
        }
        return true;
      },
      [=](restart_atom, uint32_t index) {
        auto& e = self->state.devices.at(index);
        if (e.life.status() != device_status::resetting || e.handle)
          return;
        auto err = e.dev->reset();
        bool recreated = false;
        if (code_of(err) == errc::context_poisoned) {
          // A sticky error: only a new context clears it.
          device_event(self, e.dev->info().name,
                       "supervisor: " + describe(err) +
                           "; recreating the context");
          err = e.dev->recreate();
          recreated = !err;
        }
        if (err) {
          give_up(self, index, std::move(err));
          return;
        }
        // Only restarts after its own losses count against the intensity.
        auto counted = std::exchange(e.own_loss, false);
        if (counted)
          e.restarts.push_back(clock::now());
        spawn_device(self, index);
        auto& cfg = self->state.cfg;
        auto why =
            std::string{recreated ? "new context, " : "reset, "} +
            (counted ? "restart " + std::to_string(e.restarts.size()) + " of " +
                           std::to_string(cfg.max_restarts) + " in its period"
                     : std::string{"restart not counted"});
        transition(self, index, lifecycle_event::restarted, why);
        tell(self, index, device_cause::started, {}, why);
      },
      [=](health_atom, uint32_t index, std::vector<std::string>& warnings) {
        auto& st = self->state;
        if (index >= st.devices.size() || warnings.empty())
          return;
        auto& e = st.devices[index];
        e.last_warning = clock::now();
        for (auto& w : warnings)
          device_event(self, e.dev->info().name, "warning: " + w);
        transition_running(self, index, lifecycle_event::warning,
                           warnings.back());
        if (e.life.status() == device_status::degraded)
          schedule_quiet_tick(self);
      },
      [=](tick_atom) {
        auto& st = self->state;
        st.quiet_tick_scheduled = false;
        bool still = false;
        auto now = clock::now();
        for (uint32_t i = 0; i < st.devices.size(); ++i) {
          auto& e = st.devices[i];
          if (e.life.status() != device_status::degraded)
            continue;
          if (now - e.last_warning >= st.cfg.degraded_quiet)
            transition_running(self, i, lifecycle_event::quiet,
                       "no warning for " +
                           std::to_string(st.cfg.degraded_quiet.count()) +
                           " ms");
          else
            still = true;
        }
        if (still)
          schedule_quiet_tick(self);
      },
      [=](drain_atom, const std::string& name) -> caf::result<bool> {
        auto i = find_device(self->state, name);
        if (i < 0)
          return unknown_device(name);
        // Drained while being reset: it comes back draining (its restart
        // says so).
        if (auto err = transition_running(self, uint32_t(i),
                                          lifecycle_event::drain, "operator"))
          return err;
        return true;
      },
      [=](offline_atom, const std::string& name) -> caf::result<bool> {
        auto& st = self->state;
        auto i = find_device(st, name);
        if (i < 0)
          return unknown_device(name);
        auto& e = st.devices[size_t(i)];
        auto was = e.life.status();
        if (was == device_status::offline)
          return true;
        transition(self, uint32_t(i), lifecycle_event::offline, "operator");
        if (e.handle) {
          e.by_operator = true;
          self->send_exit(e.handle, make_error(errc::device_offline,
                                               "taken offline by an operator"));
        } else {
          // Resetting: the pending restart finds it offline and does
          // nothing, so the memory of the launches lost with it is
          // released now.
          release_memory(e);
          tell(self, uint32_t(i), device_cause::offline,
               make_error(errc::device_offline,
                          "taken offline by an operator"));
        }
        return true;
      },
      [=](online_atom, const std::string& name) -> caf::result<bool> {
        auto& st = self->state;
        auto i = find_device(st, name);
        if (i < 0)
          return unknown_device(name);
        auto& e = st.devices[size_t(i)];
        auto was = e.life.status();
        if (auto err = transition_running(self, uint32_t(i),
                                          lifecycle_event::online, "operator"))
          return err;
        if (was == device_status::offline) {
          // An operator's restart does not count against the intensity, and
          // the operator starts it with a clean record.
          e.restarts.clear();
          e.own_loss = false;
          self->send(self, restart_atom::value, uint32_t(i));
        }
        return true;
      },
      [=](crash_atom, const std::string& name) -> caf::result<bool> {
        auto& st = self->state;
        auto i = find_device(st, name);
        if (i < 0)
          return unknown_device(name);
        auto& e = st.devices[size_t(i)];
        if (!e.handle)
          return make_error(errc::invalid_transition,
                            name + " has no actor to crash (" +
                                to_string(e.life.status()) + ")");
        self->send(e.handle, crash_atom::value);
        return true;
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
