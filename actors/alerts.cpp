#include "actors/alerts.hpp"

#include <cstdio>

#include <caf/all.hpp>

#include "messages/errc.hpp"

namespace cohort::actors {

namespace {

using clock = std::chrono::steady_clock;

std::string percent(double x) {
  return std::to_string(int(x * 100 + 0.5)) + "%";
}

std::string rate(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f/s", x);
  return buf;
}

} // namespace

std::vector<alert_evaluator::change>
alert_evaluator::evaluate(const alert_inputs& in) {
  std::map<std::pair<std::string, std::string>, cohort::alert> now_firing;
  auto fire = [&](std::string name, std::string subject, const char* severity,
                  std::string detail) {
    cohort::alert a;
    a.name = std::move(name);
    a.subject = std::move(subject);
    a.severity = severity;
    a.detail = std::move(detail);
    auto key = std::make_pair(a.name, a.subject);
    now_firing.emplace(std::move(key), std::move(a));
  };
  double dt =
      first_ ? 0 : std::chrono::duration<double>(in.now - last_).count();
  for (auto& m : in.memory) {
    if (m.limit > 0 && double(m.used) > rules_.vram_high_fraction * m.limit)
      fire("vram_high", m.device, "warning",
           percent(double(m.used) / m.limit) + " of its memory limit in use");
    uint64_t refused = 0;
    for (auto& [why, n] : m.refused)
      refused += n;
    auto& before = refused_before_[m.device];
    if (dt > 0 && refused > before &&
        double(refused - before) / dt > rules_.allocation_failure_rate)
      fire("allocation_failures", m.device, "warning",
           rate(double(refused - before) / dt) + " allocations refused");
    before = refused;
  }
  for (auto& d : in.stats.devices) {
    bool down = d.status == device_status::resetting ||
                d.status == device_status::offline;
    if (!down) {
      down_since_.erase(d.name);
    } else {
      auto since = down_since_.emplace(d.name, in.now).first->second;
      if (in.now - since >= rules_.device_unavailable)
        fire("device_unavailable", d.name, "critical",
             std::string{to_string(d.status)} + " for " +
                 std::to_string(
                     std::chrono::duration_cast<std::chrono::milliseconds>(
                         in.now - since)
                         .count()) +
                 " ms");
    }
    if (d.circuit != circuit_state::closed)
      fire("circuit_open", d.name, "warning",
           std::string{"circuit "} + to_string(d.circuit) + " after " +
               std::to_string(d.circuit_opens) + " opening(s)");
  }
  auto ended = in.stats.completed + in.stats.failed;
  if (!first_ && ended >= ended_before_ &&
      in.stats.fallbacks >= fallbacks_before_) {
    auto n = ended - ended_before_;
    auto fb = in.stats.fallbacks - fallbacks_before_;
    if (n >= rules_.fallback_min_items &&
        double(fb) > rules_.fallback_fraction * double(n))
      fire("fallback_rate_high", "runtime", "warning",
           std::to_string(fb) + " CPU fallbacks out of " + std::to_string(n) +
               " items ended");
  }
  ended_before_ = ended;
  fallbacks_before_ = in.stats.fallbacks;
  if (in.audit.failing)
    fire("audit_unavailable", "runtime", "critical",
         "the audit log " + in.audit.segment + " cannot be written (" +
             std::to_string(in.audit.write_errors) +
             " failed writes or syncs, " + std::to_string(in.audit.pending) +
             " records waiting, " + std::to_string(in.audit.dropped) +
             " dropped)");
  for (auto& t : in.headroom.tenants) {
    auto f = rules_.tenant_quota_fraction;
    if (t.memory_quota > 0 && double(t.memory) >= f * double(t.memory_quota))
      fire("tenant_near_quota", t.tenant, "warning",
           percent(double(t.memory) / double(t.memory_quota)) +
               " of its device memory quota");
    else if (t.max_inflight > 0 &&
             double(t.inflight) >= f * double(t.max_inflight))
      fire("tenant_near_quota", t.tenant, "warning",
           std::to_string(t.inflight) + " of " +
               std::to_string(t.max_inflight) + " items in flight");
  }
  for (auto& x : in.xids) {
    auto& before = xids_before_[x.device];
    auto& times = xid_times_[x.device];
    // The first look only learns the count: Xids before the node started
    // watching have no time.
    if (!first_ && x.count > before)
      for (uint64_t k = 0;
           k < std::min<uint64_t>(x.count - before, rules_.xid_count); ++k)
        times.push_back(in.now);
    before = x.count;
    while (!times.empty() && in.now - times.front() > rules_.xid_window)
      times.pop_front();
    while (times.size() > rules_.xid_count)
      times.pop_front();
    if (rules_.xid_count > 0 && times.size() >= rules_.xid_count)
      fire("xid_errors", x.device, "critical",
           std::to_string(times.size()) + " Xid errors within " +
               std::to_string(rules_.xid_window.count() / 1000) +
               " s (the last: Xid " + std::to_string(x.last) + ")");
  }
  for (auto& [bundle, why] : refused_bundles_)
    fire("kernel_bundle_refused", bundle, "critical", why);
  first_ = false;
  last_ = in.now;
  std::vector<change> out;
  auto wall = wall_clock_ns();
  for (auto& [key, a] : now_firing) {
    auto i = firing_.find(key);
    if (i == firing_.end()) {
      a.since_ns = wall;
      out.push_back({a, true});
    } else {
      a.since_ns = i->second.since_ns;
    }
  }
  for (auto& [key, a] : firing_)
    if (now_firing.count(key) == 0)
      out.push_back({a, false});
  firing_ = std::move(now_firing);
  return out;
}

void alert_evaluator::bundle_outcome(const std::string& bundle,
                                     std::string why) {
  if (why.empty())
    refused_bundles_.erase(bundle);
  else
    refused_bundles_[bundle] = std::move(why);
}

std::vector<cohort::alert> alert_evaluator::firing() const {
  std::vector<cohort::alert> out;
  for (auto& [key, a] : firing_)
    out.push_back(a);
  return out;
}

namespace {

using self_ptr = alert_actor::stateful_pointer<alert_state>;

constexpr auto ask_timeout = std::chrono::seconds(5);

void next_tick(self_ptr self) {
  self->state.busy = false;
  self->delayed_send(self, self->state.eval.rules().interval, tick_atom::value);
}

void audit_changes(self_ptr self,
                   const std::vector<alert_evaluator::change>& changes) {
  if (changes.empty())
    return;
  std::vector<audit_event> evs;
  for (auto& c : changes) {
    // A refused bundle's subject is its directory: neither a tenant nor a
    // device.
    bool bundle = c.what.name == "kernel_bundle_refused";
    bool device = c.what.name != "tenant_near_quota" &&
                  c.what.name != "fallback_rate_high" && !bundle;
    bool tenant = !device && !bundle;
    evs.push_back({audit_kind::alert, tenant ? c.what.subject : std::string{},
                   0, device ? c.what.subject : std::string{}, "",
                   (c.firing ? "firing: " : "resolved: ") + c.what.name + " " +
                       c.what.severity + " (" + c.what.subject +
                       "): " + c.what.detail,
                   wall_clock_ns()});
  }
  self->send(self->state.audit, record_atom::value, std::move(evs));
}

} // namespace

alert_actor::behavior_type
alert_impl(alert_actor::stateful_pointer<alert_state> self, alert_rules rules,
           balancer_actor balancer, supervisor_actor supervisor,
           quota_actor quota, audit_actor audit, xid_source xids) {
  auto& st = self->state;
  st.xids = std::move(xids);
  st.eval = alert_evaluator{rules};
  st.balancer = std::move(balancer);
  st.supervisor = std::move(supervisor);
  st.quota = std::move(quota);
  st.audit = std::move(audit);
  if (rules.enabled)
    self->delayed_send(self, rules.interval, tick_atom::value);
  return {
      [=](tick_atom) {
        auto& st = self->state;
        if (st.busy)
          return;
        st.busy = true;
        auto in = std::make_shared<alert_inputs>();
        auto failed = [=](caf::error&) { next_tick(self); };
        self->request(st.balancer, ask_timeout, stats_atom::value)
            .then(
                [=](balancer_stats& s) {
                  in->stats = std::move(s);
                  self->request(self->state.supervisor, ask_timeout,
                                memory_atom::value)
                      .then(
                          [=](std::vector<memory_snapshot>& m) {
                            in->memory = std::move(m);
                            self->request(self->state.quota, ask_timeout,
                                          headroom_atom::value, std::string{})
                                .then(
                                    [=](headroom_report& h) {
                                      in->headroom = std::move(h);
                                      self->request(self->state.audit,
                                                    ask_timeout,
                                                    stats_atom::value)
                                          .then(
                                              [=](cohort::audit_stats& a) {
                                                in->audit = std::move(a);
                                                if (self->state.xids)
                                                  in->xids = self->state.xids();
                                                in->now = clock::now();
                                                audit_changes(
                                                    self,
                                                    self->state.eval.evaluate(
                                                        *in));
                                                next_tick(self);
                                              },
                                              failed);
                                    },
                                    failed);
                          },
                          failed);
                },
                failed);
      },
      [=](alerts_atom) { return self->state.eval.firing(); },
      [=](bundle_atom, const std::string& bundle, std::string& why) {
        self->state.eval.bundle_outcome(bundle, std::move(why));
      },
  };
}

} // namespace cohort::actors
