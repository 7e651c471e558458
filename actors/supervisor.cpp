#include "actors/supervisor.hpp"

#include <signal.h>

#include <algorithm>

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <caf/openssl/all.hpp>

#include "devices/memory/device_memory.hpp"
#include "messages/errc.hpp"
#include "objects/share_table.hpp"

namespace cohort::actors {

namespace {

using self_ptr = supervisor_actor::stateful_pointer<supervisor_state>;
using clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

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
  if (*after != before)
    device_event(self, e.dev->info().name,
                 std::string{"supervisor: "} + to_string(before) + " -> " +
                     to_string(*after) + " (" + to_string(ev) + ": " + why +
                     ")");
  // A device that is still hot comes back degraded (restarted, online, at
  // start): its heat level changes only when its readings do.
  if (*after == device_status::available && e.heat == heat_level::hot) {
    e.last_warning = std::chrono::steady_clock::now();
    after = e.life.apply(lifecycle_event::warning);
    device_event(self, e.dev->info().name,
                 "supervisor: available -> degraded (warning: still hot)");
  }
  if (changed != nullptr)
    *changed = *after != before;
  return caf::none;
}

// A change of status while the device's actor runs reaches the balancer.
caf::error transition_running(self_ptr self, uint32_t index, lifecycle_event ev,
                              const std::string& why) {
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

// Why a device that lost its actor (or could not start its host) is given
// up: `reason`, past the restart intensity.
caf::error restart_limit_reached(const supervisor_config& cfg,
                                 const caf::error& reason) {
  return make_error(errc::device_lost,
                    describe(reason) + " (restart limit of " +
                        std::to_string(cfg.max_restarts) + " per " +
                        std::to_string(cfg.restart_period.count()) +
                        " ms reached)");
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

// What the work of a device gone from the machine is told.
caf::error removed_error(const supervisor_state::entry& e) {
  return make_error(errc::device_lost,
                    e.dev->info().name +
                        ": removed from the machine: " + e.removed_why);
}

// -- devices in host processes (docs/device-hosts.md) -------------------------

// The first start of each host process is part of the reply to start.
void settle_start(self_ptr self) {
  auto& st = self->state;
  if (st.starting > 0 && --st.starting == 0 && st.started.pending())
    st.started.deliver(true);
}

// Ends device `index`'s host process, if it has one; returns how it ended.
std::string end_process(self_ptr self, uint32_t index,
                        std::chrono::milliseconds grace = {}) {
  auto& e = self->state.devices[index];
  if (e.relay) {
    // Linked so that it goes down with the supervisor, not the other way.
    self->unlink_from(e.relay);
    self->send_exit(e.relay, caf::exit_reason::kill);
    e.relay = device_listener{};
  }
  if (e.hosted)
    e.hosted->set_gate({}, {});
  if (e.pid <= 0)
    return {};
  auto pid = std::exchange(e.pid, 0);
  e.hosted->set_pid(0);
  auto p = self->state.hosts->take(pid);
  if (p.pid <= 0)
    return {};
  return "its host process " + std::to_string(pid) + " " + end_host(p, grace);
}

// A start of device `index`'s host process under way is abandoned: its
// process ends now, or as it comes up (its launch number is stale).
void cancel_launch(self_ptr self, uint32_t index) {
  auto& e = self->state.devices[index];
  if (!e.launching || !e.hosted || e.hosted->remote())
    return;
  e.launching = false;
  ++e.launch;
  end_process(self, index);
}

// A join of device `index`'s remote host failed (unreachable, refused):
// tried again after a pause that doubles with each failure in a row, up to
// the longest restart delay, for as long as it takes. Not a loss of its
// own: a machine that comes back after an hour rejoins.
void join_failed(self_ptr self, uint32_t index, const caf::error& err) {
  auto& st = self->state;
  auto& e = st.devices[index];
  e.launching = false;
  end_process(self, index);
  auto first = std::exchange(e.first_start, false);
  if (e.life.status() == device_status::resetting) {
    auto delay = backoff(st.cfg, e.join_failures);
    // The first failure of a run is audited, and then every hundredth.
    if (e.join_failures % 100 == 0)
      device_event(
          self, e.dev->info().name,
          "supervisor: cannot rejoin its remote host " + e.dev->info().remote +
              " (attempt " + std::to_string(e.join_failures + 1) +
              "): " + describe(err) + "; trying again in " +
              std::to_string(delay.count()) + " ms, then at most " + "every " +
              std::to_string(
                  std::max(st.cfg.max_restart_delay, st.cfg.restart_delay)
                      .count()) +
              " ms");
    ++e.join_failures;
    e.own_loss = false;
    self->delayed_send(self, delay, restart_atom::value, index);
  }
  if (first)
    settle_start(self);
}

// A start of device `index`'s host process failed: a loss of its own,
// retried within the restart intensity.
void host_failed(self_ptr self, uint32_t index, const caf::error& err) {
  auto& st = self->state;
  auto& e = st.devices[index];
  if (e.hosted->remote()) {
    join_failed(self, index, err);
    return;
  }
  e.launching = false;
  auto how = end_process(self, index);
  auto reason =
      make_error(errc::device_lost, e.dev->info().name + ": " + describe(err) +
                                        (how.empty() ? "" : " (" + how + ")"));
  // The reply to start goes after what the balancer hears.
  auto first = std::exchange(e.first_start, false);
  // Taken offline while it started: it stays so. A host that found another
  // GPU than the one the node probed would find it again: given up now.
  if (e.life.status() == device_status::resetting) {
    if (code_of(err) == errc::unknown_device) {
      give_up(self, index,
              make_error(errc::device_lost, describe(reason) +
                                                " (not tried again: a new host "
                                                "process would find the same "
                                                "GPU)"));
    } else if (recent_restarts(st, e) >= st.cfg.max_restarts) {
      give_up(self, index, restart_limit_reached(st.cfg, reason));
    } else {
      device_event(self, e.dev->info().name,
                   "supervisor: its host process did not start: " +
                       describe(reason));
      e.own_loss = true;
      self->delayed_send(self, backoff(st.cfg, recent_restarts(st, e)),
                         restart_atom::value, index);
    }
  }
  if (first)
    settle_start(self);
}

// Device `index`'s host process is up and its gate gave the device actor.
void host_up(self_ptr self, uint32_t index, const caf::actor& dev,
             const host_gate_actor& gate) {
  auto& st = self->state;
  auto& e = st.devices[index];
  if (!dev) {
    host_failed(self, index,
                make_error(errc::device_lost, "its gate gave no device"));
    return;
  }
  e.launching = false;
  // The reply to start goes after what the balancer hears.
  auto first = std::exchange(e.first_start, false);
  if (e.life.status() != device_status::resetting) {
    // Taken offline while it started. A remote host's device actor is
    // ended here (a host process ends with its actor).
    if (e.hosted->remote())
      self->send_exit(dev, caf::exit_reason::kill);
    end_process(self, index);
  } else {
    e.handle = caf::actor_cast<device_actor>(dev);
    e.addr = e.handle.address();
    e.hosted->set_gate(gate, e.token);
    if (e.join_failures > 0)
      e.start_why += " after " + std::to_string(e.join_failures) +
                     " failed attempt" + (e.join_failures == 1 ? "" : "s");
    e.join_failures = 0;
    ++e.generation;
    self->monitor(e.handle);
    transition(self, index, lifecycle_event::restarted, e.start_why);
    tell(self, index, device_cause::started, {}, e.start_why);
  }
  if (first)
    settle_start(self);
}

// What a host's device actor reports to in place of the balancer: passes on
// what carries the device's own index, until the supervisor ends it with
// the host. A host is given this relay and never the balancer itself: a
// remote node's reference keeps an actor alive in CAF until it quits, and
// the balancer outlives stop for its clients; and a dead host's late
// reports die with its relay.
device_listener::behavior_type relay_impl(device_listener::pointer self,
                                          device_listener to, uint32_t index) {
  return {
      [=](done_atom, uint32_t i, std::vector<work_done>& batch) {
        if (i != index)
          return;
        // The balancer measures the crossing to here (docs/placement.md).
        auto now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                       std::chrono::steady_clock::now().time_since_epoch())
                       .count();
        for (auto& done : batch)
          done.relayed_at_ns = now;
        self->send(to, done_atom::value, i, std::move(batch));
      },
      [=](failed_atom, uint32_t i, uint64_t ticket, caf::error& err) {
        if (i == index)
          self->send(to, failed_atom::value, i, ticket, std::move(err));
      },
  };
}

void greet_host(self_ptr self, uint32_t index, uint64_t n,
                const endpoint& where);

// Starts a host process for device `index`, off the supervisor's thread
// (`launched` carries on), or joins its remote host.
void start_hosted(self_ptr self, uint32_t index) {
  auto& st = self->state;
  auto& e = st.devices[index];
  e.launching = true;
  auto n = ++e.launch;
  if (e.hosted->remote()) {
    // Its remote host runs already: it is reached and greeted, with the
    // fleet's token. Not while the chaos harness holds its network down.
    e.token = st.cfg.fleet_token;
    auto held = e.hosted->held_until() - clock::now();
    if (held.count() > 0) {
      // Tried again as the hold ends.
      auto ms =
          std::chrono::duration_cast<std::chrono::milliseconds>(held) + 1ms;
      e.launching = false;
      device_event(self, e.dev->info().name,
                   "supervisor: its connection to " + e.dev->info().remote +
                       " is held cut by the chaos harness for " +
                       std::to_string(ms.count()) + " more ms");
      self->delayed_send(self, ms, restart_atom::value, index);
      if (std::exchange(e.first_start, false))
        settle_start(self);
      return;
    }
    greet_host(self, index, n, e.hosted->where());
    return;
  }
  auto spec = e.hosted->spec();
  e.token = objects::random_token();
  spec.set_token(e.token);
  auto binary = st.cfg.host_binary;
  auto timeout = st.cfg.host_start_timeout;
  auto hosts = st.hosts;
  auto me = caf::actor_cast<supervisor_actor>(self);
  // A blocking actor has a thread of its own: the start waits for the
  // process to publish its gate.
  self->spawn([=](caf::blocking_actor* starter) {
    int pid = 0;
    auto p = start_host(binary, spec, timeout, [&](int spawned) {
      pid = spawned;
      return hosts->starting(spawned);
    });
    if (!p) {
      if (pid > 0)
        hosts->failed(pid);
      starter->send(me, launched_atom::value, index, n, int32_t{0}, uint16_t{0},
                    p.error());
      return;
    }
    if (!hosts->started(*p)) {
      // Its supervisor is gone.
      end_host(*p);
      return;
    }
    starter->send(me, launched_atom::value, index, n, int32_t(p->pid), p->port,
                  caf::error{});
  });
}

// The host of device `index` (start `n`) publishes its gate at `where`: a
// host process on 127.0.0.1, reached through the middleman, or a remote
// host, reached through CAF's TLS module; then greeted with its token.
void greet_host(self_ptr self, uint32_t index, uint64_t n,
                const endpoint& where) {
  auto& st = self->state;
  auto remote = st.devices[index].hosted->remote();
  auto timeout = remote ? st.cfg.connect_timeout : st.cfg.host_start_timeout;
  auto current = [=] {
    auto& e = self->state.devices[index];
    return e.launching && e.launch == n;
  };
  auto failed = [=](const caf::error& err) {
    if (current())
      host_failed(self, index, err);
  };
  auto mm = remote ? self->system().openssl_manager().actor_handle()
                   : self->system().middleman().actor_handle();
  auto what = remote ? std::string{"its remote host "} + to_string(where)
                     : std::string{"its host process"};
  self->request(mm, timeout, caf::connect_atom::value, where.host, where.port)
      .then(
          [=](const caf::node_id&, caf::strong_actor_ptr& gate,
              const std::set<std::string>&) {
            if (!current())
              return;
            if (!gate) {
              failed(
                  make_error(errc::device_lost, what + " published no gate"));
              return;
            }
            auto& st = self->state;
            auto& e = st.devices[index];
            e.relay = self->spawn<caf::linked>(relay_impl, st.balancer, index);
            host_hello hello;
            hello.index = index;
            hello.device = e.hosted->remote_index();
            hello.name = e.dev->info().name;
            hello.kernel_timeout_ms = st.cfg.kernel_timeout.count();
            for (auto t : st.cfg.kernel_timeouts)
              hello.kernel_timeouts_ms.push_back(t.count());
            for (auto& [code, action] : st.cfg.xid_policy.rules()) {
              hello.xid_codes.push_back(code);
              hello.xid_actions.push_back(uint8_t(action));
            }
            self->request(caf::actor_cast<host_gate_actor>(gate), timeout,
                          hello_atom::value, e.token, hello,
                          caf::actor_cast<caf::actor>(e.relay),
                          caf::actor_cast<caf::actor>(self))
                .then(
                    [=](caf::actor& dev) {
                      if (current())
                        host_up(self, index, dev,
                                caf::actor_cast<host_gate_actor>(gate));
                    },
                    [=](caf::error& err) {
                      failed(make_error(
                          errc::device_lost,
                          what + " refused the supervisor: " + describe(err)));
                    });
          },
          [=](caf::error& err) {
            failed(
                make_error(errc::device_lost,
                           what + " could not be reached: " + describe(err)));
          });
}

// The actor of device `index` went down.
void on_device_down(self_ptr self, uint32_t index, const caf::error& down) {
  auto& st = self->state;
  auto& e = st.devices[index];
  e.handle = device_actor{};
  e.addr = caf::actor_addr{};
  auto reason = down;
  // A remote host whose connection dropped: not a loss of the device's
  // own, and never given up; the node rejoins when the host is back.
  bool dropped = false;
  if (e.hosted && e.hosted->remote()) {
    end_process(self, index);
    dropped = down == caf::exit_reason::remote_link_unreachable;
    if (dropped)
      reason = make_error(errc::device_lost,
                          e.dev->info().name + ": the connection to its " +
                              "remote host " + e.dev->info().remote +
                              " dropped (" + describe(down) + ")");
  } else if (e.hosted) {
    // Whatever took its actor down, its process goes too: a new one is
    // the device's restart (a sticky error, a hang and a crash alike).
    // Its connection went first: the process died (a crash, a kill) or
    // stopped answering (a hang), which the heartbeat tells.
    auto link_lost = down == caf::exit_reason::remote_link_unreachable;
    auto how = end_process(self, index,
                           link_lost ? std::chrono::milliseconds{100}
                                     : std::chrono::milliseconds{0});
    if (!how.empty() && link_lost)
      reason = make_error(errc::device_lost, e.dev->info().name + ": " + how +
                                                 " (" + describe(down) + ")");
  }
  auto sibling = std::exchange(e.by_sibling, false);
  if (std::exchange(e.removing, false) || e.removed) {
    e.by_operator = false;
    if (e.removed) {
      // Gone from the machine (a rescan): not restarted. What its launches
      // held is released (the GPU took its memory with it).
      release_memory(e);
      tell(self, index, device_cause::removed, removed_error(e));
      return;
    }
    // Back on the machine before its old actor was gone: restarted now.
    tell(self, index, device_cause::restarting,
         make_error(errc::device_restarted,
                    e.dev->info().name + ": back on the machine"));
    self->send(self, restart_atom::value, index);
    return;
  }
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
  // The Xid policy isolated it (its device ended with device_offline): out
  // of service, not restarted, until an operator brings it online. Also when
  // a sibling's restart (one_for_all) asked it to go at the same time: a
  // sibling's exit is device_restarted, a dropped connection device_lost.
  if (code_of(reason) == errc::device_offline) {
    give_up(self, index, reason);
    return;
  }
  if (!sibling && !dropped && recent_restarts(st, e) >= st.cfg.max_restarts) {
    give_up(self, index, restart_limit_reached(st.cfg, reason));
    return;
  }
  transition(self, index, lifecycle_event::lost, describe(reason));
  e.own_loss = !sibling && !dropped;
  if (sibling)
    tell(self, index, device_cause::restarting,
         make_error(errc::device_restarted,
                    e.dev->info().name + ": " + describe(reason)));
  else
    tell(self, index,
         is_device_fault(code_of(reason)) ? device_cause::fault
                                          : device_cause::crashed,
         reason);
  auto delay = sibling || dropped ? st.cfg.restart_delay
                                  : backoff(st.cfg, recent_restarts(st, e));
  self->delayed_send(self, delay, restart_atom::value, index);
  // A dropped connection takes the devices of that host alone.
  if (sibling || dropped || st.cfg.strategy != restart_strategy::one_for_all)
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

// Device `index`'s readings put it at `level` (the telemetry sampler's
// word, docs/supervision.md "Health that acts"): critical drains it,
// unless an operator drained it already; hot degrades it while it lasts;
// back to ok undoes what the heat did.
// Starts device `index`'s first actor: at the supervisor's start, or
// when it was `added` to the roster later. A hosted device starts in its
// host process, or on its remote host (its start is audited when it is
// up); any other here at once.
void start_device(self_ptr self, uint32_t index, bool added) {
  auto& e = self->state.devices[index];
  if (e.hosted) {
    e.start_why = std::string{added ? "added, " : ""} +
                  (e.hosted->remote()
                       ? "joined on its remote host " + e.dev->info().remote
                       : "started in a host process");
    start_hosted(self, index);
    return;
  }
  auto why = added ? "added" : "started";
  spawn_device(self, index);
  transition(self, index, lifecycle_event::restarted, why);
  tell(self, index, device_cause::started, {}, why);
}

void heat_changed(self_ptr self, uint32_t index, heat_level level,
                  const std::string& why) {
  auto& st = self->state;
  auto& e = st.devices[index];
  auto was = e.heat;
  e.heat = level;
  auto& name = e.dev->info().name;
  device_event(self, name,
               std::string{"heat "} + to_string(was) + " -> " +
                   to_string(level) + ": " + why);
  auto status = e.life.status();
  if (level == heat_level::critical) {
    if (!e.life.drain_requested() && status != device_status::offline &&
        !transition_running(self, index, lifecycle_event::drain,
                            "too hot: " + why))
      e.heat_drained = true;
    return;
  }
  if (was == heat_level::critical && e.heat_drained) {
    e.heat_drained = false;
    if (status == device_status::draining)
      transition_running(self, index, lifecycle_event::online,
                         "cooled: " + why);
    else if (status == device_status::resetting)
      e.life.forget_drain();
  }
  if (level == heat_level::hot) {
    e.last_warning = clock::now();
    transition_running(self, index, lifecycle_event::warning, "hot: " + why);
  } else if (e.life.status() == device_status::degraded) {
    // Cool: available again once quiet (its last warning was when it grew
    // hot, so at the next tick unless a warning came since).
    schedule_quiet_tick(self);
  }
}

} // namespace

bool host_registry::starting(int pid) {
  std::lock_guard<std::mutex> guard{mtx_};
  if (closed_)
    return false;
  starting_.insert(pid);
  return true;
}

bool host_registry::started(const host_process& p) {
  std::lock_guard<std::mutex> guard{mtx_};
  starting_.erase(p.pid);
  if (closed_)
    return false;
  held_.emplace(p.pid, p);
  return true;
}

void host_registry::failed(int pid) {
  std::lock_guard<std::mutex> guard{mtx_};
  starting_.erase(pid);
}

host_process host_registry::take(int pid) {
  std::lock_guard<std::mutex> guard{mtx_};
  auto i = held_.find(pid);
  if (i == held_.end())
    return {};
  auto p = i->second;
  held_.erase(i);
  return p;
}

void host_registry::close() {
  std::map<int, host_process> ending;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    closed_ = true;
    // Not reaped here: their starters own them until they return, which
    // they do at once now.
    for (auto pid : starting_)
      ::kill(pid, SIGKILL);
    ending.swap(held_);
  }
  for (auto& [pid, p] : ending)
    end_host(p);
}

namespace {

// Appends the entry of `dev` (its actor not started yet).
supervisor_state::entry& add_entry(supervisor_state& st,
                                   const std::shared_ptr<devices::device>& dev,
                                   const supervisor_config& cfg) {
  auto& e = st.devices.emplace_back();
  dev->set_xid_policy(cfg.xid_policy);
  e.hosted = std::dynamic_pointer_cast<hosted_device>(dev);
  e.dev = dev;
  return e;
}

} // namespace

supervisor_actor::behavior_type
supervisor_impl(supervisor_actor::stateful_pointer<supervisor_state> self,
                std::shared_ptr<const device_roster> roster,
                balancer_actor balancer, audit_actor audit,
                supervisor_config cfg) {
  auto& st = self->state;
  for (auto& dev : roster->devices())
    add_entry(st, dev, cfg);
  st.roster = std::move(roster);
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
  // Host processes end with their supervisor, however it ends (a kill or
  // an exception skips the exit handler), those still starting too.
  self->attach_functor([hosts = st.hosts] { hosts->close(); });
  self->set_exit_handler([=](caf::exit_msg& msg) {
    auto& st = self->state;
    for (auto& e : st.devices)
      if (e.handle)
        self->send_exit(e.handle, msg.reason);
    // Ended before the supervisor is seen down: whoever stops it finds its
    // hosts gone.
    st.hosts->close();
    self->quit(msg.reason);
  });
  return {
      [=](start_atom) -> caf::result<bool> {
        auto& st = self->state;
        for (uint32_t i = 0; i < st.devices.size(); ++i) {
          auto& e = st.devices[i];
          if (e.hosted) {
            ++st.starting;
            e.first_start = true;
          }
          start_device(self, i, false);
        }
        if (st.starting == 0)
          return true;
        st.started = self->make_response_promise<bool>();
        return st.started;
      },
      [=](launched_atom, uint32_t index, uint64_t n, int32_t pid, uint16_t port,
          const caf::error& why) {
        auto& st = self->state;
        auto& e = st.devices.at(index);
        if (!e.launching || e.launch != n) {
          if (pid > 0) {
            auto p = st.hosts->take(pid);
            end_host(p);
          }
          return;
        }
        if (pid <= 0) {
          host_failed(self, index, why);
          return;
        }
        e.pid = pid;
        e.hosted->set_pid(pid, port);
        greet_host(self, index, n, endpoint{"127.0.0.1", port});
      },
      [=](restart_atom, uint32_t index) {
        auto& e = self->state.devices.at(index);
        if (e.life.status() != device_status::resetting || e.handle ||
            e.launching)
          return;
        auto by_operator = std::exchange(e.operator_restart, false);
        if (e.hosted && e.hosted->gone()) {
          // Lost permanently: a new process would bring back a simulated
          // device that the node's process could not reset.
          give_up(self, index,
                  make_error(errc::device_lost,
                             e.dev->info().name +
                                 ": reset failed, the device is gone (lost "
                                 "permanently)"));
          return;
        }
        if (e.hosted) {
          // Its old process is gone: a new one is its reset. A remote
          // host resets the device when it is greeted again.
          auto counted = std::exchange(e.own_loss, false);
          if (counted)
            e.restarts.push_back(clock::now());
          auto& cfg = self->state.cfg;
          e.start_why =
              std::string{e.hosted->remote() ? "rejoined its remote host " +
                                                   e.dev->info().remote + ", "
                                             : "new host process, "} +
              (counted
                   ? "restart " + std::to_string(e.restarts.size()) + " of " +
                         std::to_string(cfg.max_restarts) + " in its period"
                   : std::string{"restart not counted"});
          start_hosted(self, index);
          return;
        }
        // An Xid its policy isolates on may have come while the device was
        // down (a reset would drop it): it is read first, unless this is an
        // operator's online, which ends an isolation.
        if (auto err = e.dev->health();
            !by_operator && code_of(err) == errc::device_offline) {
          give_up(self, index, std::move(err));
          return;
        }
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
      [=](heat_atom, uint32_t index, uint8_t level, std::string& why) {
        auto& st = self->state;
        if (level > uint8_t(heat_level::critical))
          return;
        if (index < st.devices.size())
          heat_changed(self, index, heat_level(level), why);
        else if (st.roster->at(index))
          st.early_heat[index] = {heat_level(level), std::move(why)};
      },
      [=](tick_atom) {
        auto& st = self->state;
        st.quiet_tick_scheduled = false;
        bool still = false;
        auto now = clock::now();
        for (uint32_t i = 0; i < st.devices.size(); ++i) {
          auto& e = st.devices[i];
          // A hot device stays degraded while it is hot.
          if (e.life.status() != device_status::degraded ||
              e.heat != heat_level::ok)
            continue;
          if (now - e.last_warning >= st.cfg.degraded_quiet)
            transition_running(
                self, i, lifecycle_event::quiet,
                "no warning for " +
                    std::to_string(st.cfg.degraded_quiet.count()) + " ms");
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
        // says so). An operator's drain is the operator's to end.
        if (auto err = transition_running(self, uint32_t(i),
                                          lifecycle_event::drain, "operator"))
          return err;
        self->state.devices[size_t(i)].heat_drained = false;
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
        e.heat_drained = false;
        if (e.handle) {
          e.by_operator = true;
          self->send_exit(e.handle, make_error(errc::device_offline,
                                               "taken offline by an operator"));
        } else {
          // Resetting: the pending restart finds it offline and does
          // nothing, so the memory of the launches lost with it is
          // released now.
          release_memory(e);
          tell(
              self, uint32_t(i), device_cause::offline,
              make_error(errc::device_offline, "taken offline by an operator"));
        }
        return true;
      },
      [=](online_atom, const std::string& name) -> caf::result<bool> {
        auto& st = self->state;
        auto i = find_device(st, name);
        if (i < 0)
          return unknown_device(name);
        auto& e = st.devices[size_t(i)];
        if (e.removed)
          return make_error(errc::invalid_transition,
                            name + " was removed from the machine (" +
                                e.removed_why +
                                "): a rescan that finds it again brings it "
                                "back");
        auto was = e.life.status();
        if (auto err = transition_running(self, uint32_t(i),
                                          lifecycle_event::online, "operator"))
          return err;
        // Online over a drain for heat: the operator's word holds until
        // the device's level changes again.
        e.heat_drained = false;
        if (was == device_status::offline) {
          // An operator's restart does not count against the intensity, and
          // the operator starts it with a clean record.
          e.restarts.clear();
          e.own_loss = false;
          e.operator_restart = true;
          self->send(self, restart_atom::value, uint32_t(i));
        }
        return true;
      },
      [=](remove_atom, uint32_t index, std::string& why) {
        auto& st = self->state;
        if (index >= st.devices.size() || st.devices[index].removed)
          return;
        auto& e = st.devices[index];
        e.removed = true;
        e.removed_why = std::move(why);
        e.removed_was = e.life.status();
        e.heat_drained = false;
        transition(self, index, lifecycle_event::offline,
                   "removed from the machine: " + e.removed_why);
        // A host process starting for it would open whatever GPU now has
        // its ordinal: abandoned.
        cancel_launch(self, index);
        if (std::exchange(e.first_start, false))
          settle_start(self);
        if (e.handle) {
          e.removing = true;
          self->send_exit(e.handle, removed_error(e));
          // Its host process ends now, even with its device stuck in a
          // driver call; the actor's down follows.
          if (e.hosted && !e.hosted->remote())
            end_process(self, index);
          return;
        }
        release_memory(e);
        tell(self, index, device_cause::removed, removed_error(e));
      },
      [=](move_atom, uint32_t index, int32_t ordinal, std::string& visible) {
        auto& st = self->state;
        if (index >= st.devices.size() || ordinal < 0)
          return;
        auto& e = st.devices[index];
        if (!e.hosted || e.hosted->remote() || !e.hosted->spec().has_gpu())
          return;
        auto* g = e.hosted->mutable_spec().mutable_gpu();
        if (g->ordinal() == uint32_t(ordinal) && g->visible() == visible)
          return;
        g->set_ordinal(uint32_t(ordinal));
        g->set_visible(visible);
        // A start under way opens the old ordinal, where another GPU is
        // now: it starts again at the new one.
        if (e.launching) {
          cancel_launch(self, index);
          if (e.life.status() == device_status::resetting)
            self->send(self, restart_atom::value, index);
        }
      },
      [=](add_atom, uint32_t index) -> caf::result<bool> {
        auto& st = self->state;
        auto dev = st.roster->at(index);
        if (index != st.devices.size() || !dev)
          return make_error(errc::invalid_arguments,
                            "supervisor: device " + std::to_string(index) +
                                " is not the next one of the roster (" +
                                std::to_string(st.devices.size()) + ")");
        add_entry(st, dev, st.cfg);
        start_device(self, index, true);
        if (auto h = st.early_heat.find(index); h != st.early_heat.end()) {
          auto [level, why] = std::move(h->second);
          st.early_heat.erase(h);
          heat_changed(self, index, level, why);
        }
        return true;
      },
      [=](restore_atom, uint32_t index) {
        auto& st = self->state;
        if (index >= st.devices.size() || !st.devices[index].removed)
          return;
        auto& e = st.devices[index];
        e.removed = false;
        e.removed_why.clear();
        // Offline before it was removed (an operator, the Xid policy, the
        // restart limit): it stays offline.
        if (e.removed_was == device_status::offline) {
          device_event(self, e.dev->info().name,
                       "supervisor: back on the machine; it stays offline, "
                       "as it was before it was removed");
          return;
        }
        if (transition(self, index, lifecycle_event::online,
                       "back on the machine (rescan)"))
          return;
        if (e.removed_was == device_status::draining)
          transition(self, index, lifecycle_event::drain,
                     "drained before it was removed");
        // A clean record, as an operator's online gives.
        e.restarts.clear();
        e.own_loss = false;
        e.operator_restart = true;
        self->send(self, restart_atom::value, index);
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
