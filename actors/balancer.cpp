#include "actors/balancer.hpp"

#include <caf/all.hpp>

#include "messages/errc.hpp"

namespace cohort::actors {

namespace {

using self_ptr = balancer_actor::stateful_pointer<balancer_state>;

// Weight of the newest measurement in the per-kernel rate estimate.
constexpr double rate_weight = 0.2;

bool is_retryable(errc code) {
  switch (code) {
  case errc::out_of_memory:
  case errc::device_lost:
  case errc::kernel_fault:
  case errc::kernel_timeout:
    return true;
  default:
    return false;
  }
}

bool is_gpu(const device_info& info) {
  return info.kind != device_kind::cpu;
}

void audit(self_ptr self, audit_kind kind, const balancer_state::record& r,
           std::string device, std::string detail = {}) {
  auto& st = self->state;
  audit_event ev{kind,
                 r.item.tenant,
                 r.item.id,
                 std::move(device),
                 std::string{kernels::name(r.item.kernel)},
                 std::move(detail),
                 wall_clock_ns()};
  st.audit.add(self, std::move(ev));
}

void device_event(self_ptr self, const std::string& device,
                  std::string detail) {
  self->state.audit.add(self,
                        audit_event{audit_kind::device_event, "", 0, device, "",
                                    std::move(detail), wall_clock_ns()});
}

// Predicted device time of `r` on `s`. A device with no measurement for the
// kernel yet is assumed as fast as the best measured one (optimism explores
// it); with no measurement anywhere, the device's nominal speed decides.
double predict_ns(const balancer_state& st, const balancer_state::slot& s,
                  const balancer_state::record& r) {
  auto k = static_cast<size_t>(r.item.kernel);
  double rate = s.ns_per_unit[k];
  if (rate <= 0) {
    for (auto& other : st.devices)
      if (other.ns_per_unit[k] > 0 &&
          (rate <= 0 || other.ns_per_unit[k] < rate))
        rate = other.ns_per_unit[k];
    if (rate <= 0)
      rate = 1.0 / std::max(s.info.speed, 1e-3);
  }
  return rate * r.cost_units;
}

// Ends an item with a definitive error.
void end_failed(self_ptr self, uint64_t ticket, caf::error err) {
  auto& st = self->state;
  auto i = st.outstanding.find(ticket);
  auto& r = i->second;
  audit(self, audit_kind::failed, r,
        r.device >= 0 ? st.devices[size_t(r.device)].info.name : "",
        describe(err));
  // Quota first: a client that resubmits on hearing of the end must find
  // the quota already released.
  self->send(st.quota, release_atom::value, r.item.tenant, r.bytes);
  self->send(r.sink, failed_atom::value, r.item.id, std::move(err));
  ++st.counters.failed;
  st.outstanding.erase(i);
}

// Requests a device actor may hold unanswered before the balancer queues;
// enough to keep every stream busy while an answer travels back.
uint32_t send_window(const balancer_state::slot& s) {
  return 2 * std::max(1u, s.info.streams);
}

// Most items in one run message.
constexpr size_t max_run_batch = 64;

// Sends device `index` the queued tickets still placed on it, as one message.
void send_queued(self_ptr self, size_t index) {
  auto& st = self->state;
  auto& s = st.devices[index];
  if (s.queued.empty() || s.sent >= send_window(s))
    return;
  auto n = std::min(s.queued.size(), max_run_batch);
  std::vector<run_request> batch;
  batch.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    auto r = st.outstanding.find(s.queued[i]);
    // Skip tickets that ended or moved on since they were queued.
    if (r != st.outstanding.end() && r->second.device == int32_t(index))
      batch.push_back({s.queued[i], r->second.bytes, r->second.item});
  }
  s.queued.erase(s.queued.begin(), s.queued.begin() + std::ptrdiff_t(n));
  if (batch.empty())
    return;
  s.sent += uint32_t(batch.size());
  self->send(s.handle, run_atom::value, std::move(batch));
}

// Hands a placed ticket to its device: at once while the device has room in
// its window, otherwise with the next batch.
void dispatch(self_ptr self, size_t index, uint64_t ticket) {
  self->state.devices[index].queued.push_back(ticket);
  send_queued(self, index);
}

// Places (or re-places) one item; `why` says why it moves, empty the first
// time.
void place(self_ptr self, uint64_t ticket, const std::string& why) {
  auto& st = self->state;
  auto& r = st.outstanding.at(ticket);
  if (r.attempts >= st.cfg.max_attempts) {
    end_failed(self, ticket,
               make_error(errc::retries_exhausted,
                          "placed " + std::to_string(r.attempts) +
                              " times; last failure: " + why));
    return;
  }
  int best = -1;
  double best_ns = 0;
  bool waiting = false;
  // Devices that already failed this item are a last resort.
  for (int pass = 0; pass < 2 && best < 0; ++pass) {
    for (size_t i = 0; i < st.devices.size(); ++i) {
      auto& s = st.devices[i];
      uint64_t bit = uint64_t{1} << i;
      if (!(r.device_mask & bit))
        continue;
      if (s.status == device_status::restarting)
        waiting = true;
      if (s.status != device_status::online ||
          (pass == 0 && (r.failed_on & bit)))
        continue;
      double t =
          s.backlog_ns / std::max(1u, s.info.streams) + predict_ns(st, s, r);
      if (best < 0 || t < best_ns) {
        best = int(i);
        best_ns = t;
      }
    }
  }
  if (best < 0) {
    if (waiting) {
      r.device = -1;
      st.parked.push_back(ticket);
      return;
    }
    end_failed(self, ticket,
               make_error(errc::no_device_available,
                          "no online device is granted to tenant '" +
                              r.item.tenant + "'" +
                              (why.empty() ? "" : "; last failure: " + why)));
    return;
  }
  auto& s = st.devices[size_t(best)];
  r.device = best;
  r.predicted_ns = predict_ns(st, s, r);
  s.backlog_ns += r.predicted_ns;
  ++r.attempts;
  if (r.attempts == 1) {
    audit(self, audit_kind::placed, r, s.info.name);
  } else {
    ++st.counters.retries;
    if (!is_gpu(s.info) && r.on_gpu_before) {
      ++st.counters.fallbacks;
      audit(self, audit_kind::fallback, r, s.info.name, why);
    } else {
      audit(self, audit_kind::placed, r, s.info.name, "retry: " + why);
    }
  }
  dispatch(self, size_t(best), ticket);
}

// Records that the item's current placement failed and moves it on.
void replace_after_failure(self_ptr self, uint64_t ticket,
                           const caf::error& err) {
  auto& st = self->state;
  auto& r = st.outstanding.at(ticket);
  auto& s = st.devices[size_t(r.device)];
  s.backlog_ns = std::max(0.0, s.backlog_ns - r.predicted_ns);
  ++s.stats.failed_placements;
  r.failed_on |= uint64_t{1} << r.device;
  r.on_gpu_before = r.on_gpu_before || is_gpu(s.info);
  place(self, ticket, describe(err));
}

// Ends an item with the result its device reported, unless it already
// ended or moved on (then the late completion is dropped and counted).
void complete(self_ptr self, uint32_t index, work_done& done) {
  auto& st = self->state;
  auto i = st.outstanding.find(done.id);
  if (i == st.outstanding.end() || i->second.device != int32_t(index)) {
    ++st.counters.duplicates_dropped;
    return;
  }
  auto& r = i->second;
  auto& s = st.devices[index];
  s.backlog_ns = std::max(0.0, s.backlog_ns - r.predicted_ns);
  if (r.cost_units > 0 && done.device_ns > 0) {
    auto& rate = s.ns_per_unit[static_cast<size_t>(r.item.kernel)];
    double measured = double(done.device_ns) / r.cost_units;
    rate = rate <= 0 ? measured
                     : (1 - rate_weight) * rate + rate_weight * measured;
  }
  ++s.stats.completed;
  s.stats.busy_ns += done.device_ns;
  bool fallback = !is_gpu(s.info) && r.on_gpu_before;
  audit(self, audit_kind::completed, r, s.info.name,
        r.attempts > 1 ? "after " + std::to_string(r.attempts) + " placements"
                       : std::string{});
  self->send(st.quota, release_atom::value, r.item.tenant, r.bytes);
  self->send(r.sink, result_atom::value,
             work_result{r.item.id, std::move(done.output), s.info.name,
                         r.attempts, fallback});
  st.outstanding.erase(i);
}

void retry_parked(self_ptr self) {
  auto parked = std::move(self->state.parked);
  self->state.parked = {};
  for (auto ticket : parked)
    place(self, ticket, "waited for a device to come back");
}

} // namespace

balancer_actor::behavior_type
balancer_impl(balancer_actor::stateful_pointer<balancer_state> self,
              std::vector<device_info> devices, quota_listener quota,
              audit_actor audit_dest, balancer_config cfg) {
  auto& st = self->state;
  for (auto& info : devices) {
    balancer_state::slot s;
    s.info = info;
    s.stats.name = info.name;
    s.stats.kind = to_string(info.kind);
    s.stats.simulated = info.simulated;
    s.stats.status = device_status::offline;
    st.devices.push_back(std::move(s));
  }
  st.quota = std::move(quota);
  st.audit = audit_buffer{std::move(audit_dest)};
  st.cfg = cfg;
  return {
      [=](admit_atom, uint64_t ticket, work_item& item, client_sink& sink,
          uint64_t device_mask, uint64_t bytes) {
        balancer_state::record r;
        auto c = item_cost(item);
        r.cost_units = c.flops + c.bytes;
        r.item = std::move(item);
        r.sink = std::move(sink);
        r.device_mask = device_mask;
        r.bytes = bytes;
        self->state.outstanding.emplace(ticket, std::move(r));
        place(self, ticket, {});
      },
      [=](done_atom, uint32_t index, std::vector<work_done>& batch) {
        for (auto& done : batch)
          complete(self, index, done);
        auto& s = self->state.devices[index];
        s.sent -= std::min(s.sent, uint32_t(batch.size()));
        send_queued(self, index);
      },
      [=](failed_atom, uint32_t index, uint64_t ticket, caf::error& err) {
        auto& st = self->state;
        auto& slot = st.devices[index];
        slot.sent -= std::min(slot.sent, 1u);
        auto i = st.outstanding.find(ticket);
        if (i == st.outstanding.end() || i->second.device != int32_t(index)) {
          ++st.counters.duplicates_dropped;
        } else if (is_retryable(code_of(err))) {
          replace_after_failure(self, ticket, err);
        } else {
          slot.backlog_ns =
              std::max(0.0, slot.backlog_ns - i->second.predicted_ns);
          end_failed(self, ticket, std::move(err));
        }
        send_queued(self, index);
      },
      [=](start_atom, quota_listener& quota) {
        self->state.quota = std::move(quota);
      },
      [=](up_atom, uint32_t index, device_actor& handle) {
        auto& st = self->state;
        auto& s = st.devices.at(index);
        if (s.status == device_status::restarting) {
          ++s.stats.restarts;
          device_event(self, s.info.name, "device restarted and back online");
        }
        s.handle = std::move(handle);
        s.status = device_status::online;
        s.stats.status = s.status;
        s.backlog_ns = 0;
        s.sent = 0;
        s.queued.clear();
        retry_parked(self);
      },
      [=](down_atom, uint32_t index, caf::error& reason, bool permanent) {
        auto& st = self->state;
        auto& s = st.devices.at(index);
        if (s.status == device_status::online)
          ++s.stats.losses;
        s.status =
            permanent ? device_status::offline : device_status::restarting;
        s.stats.status = s.status;
        s.handle = device_actor{};
        s.backlog_ns = 0;
        // Queued tickets are re-placed below with the ones the actor held.
        s.sent = 0;
        s.queued.clear();
        device_event(self, s.info.name,
                     std::string{permanent ? "device offline: "
                                           : "device lost, restarting: "} +
                         describe(reason));
        std::vector<uint64_t> moving;
        for (auto& [ticket, r] : st.outstanding)
          if (r.device == int32_t(index))
            moving.push_back(ticket);
        for (auto ticket : moving)
          replace_after_failure(self, ticket, reason);
        // Parked items whose devices are all gone for good cannot wait longer.
        if (permanent)
          retry_parked(self);
      },
      [=](stats_atom) {
        auto& st = self->state;
        auto out = st.counters;
        for (auto& s : st.devices)
          out.devices.push_back(s.stats);
        out.outstanding = st.outstanding.size();
        return out;
      },
      [=](flush_atom) {
        self->state.audit.flush(self);
        return true;
      },
      [=](tick_atom) { self->state.audit.on_tick(self); },
  };
}

} // namespace cohort::actors
