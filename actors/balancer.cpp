#include "actors/balancer.hpp"

#include <caf/all.hpp>

#include "messages/errc.hpp"

namespace cohort::actors {

namespace {

using self_ptr = balancer_actor::stateful_pointer<balancer_state>;
using clock = balancer_state::clock;

// Weight of the newest measurement in the per-kernel rate estimate.
constexpr double rate_weight = 0.2;

// Longest pause between two looks at held-back and waiting items.
constexpr auto retry_interval = std::chrono::milliseconds(20);

bool is_retryable(errc code) {
  switch (code) {
  case errc::out_of_memory:
  case errc::device_lost:
  case errc::kernel_fault:
  case errc::kernel_timeout:
  // A device's own limit refused what the balancer's estimate let through
  // (its exact layout is a little larger): another device may take it.
  case errc::memory_limit:
  case errc::over_memory_quota:
  case errc::context_poisoned:
  case errc::device_offline:
  case errc::device_restarted:
    return true;
  default:
    return false;
  }
}

bool is_gpu(const device_info& info) {
  return info.kind != device_kind::cpu;
}

// Failures that speak of the device (and count against its circuit), as
// opposed to limits a tenant met there. A full device (hard OOM) is not
// failing: the item just moves.
bool is_device_failure(errc code) {
  switch (code) {
  case errc::device_lost:
  case errc::kernel_fault:
  case errc::kernel_timeout:
  case errc::context_poisoned:
    return true;
  default:
    return false;
  }
}

bool takes_work(device_status s) {
  return s == device_status::available || s == device_status::degraded;
}

void audit(self_ptr self, audit_kind kind, const work_item& item,
           std::string device, std::string detail = {}) {
  auto& st = self->state;
  st.audit.add(self, audit_event{kind, item.tenant, item.id, std::move(device),
                                 std::string{kernels::name(item.kernel)},
                                 std::move(detail), wall_clock_ns()});
}

void device_event(self_ptr self, const std::string& device,
                  std::string detail) {
  self->state.audit.add(self,
                        audit_event{audit_kind::device_event, "", 0, device, "",
                                    std::move(detail), wall_clock_ns()});
}

// Refuses an item before admission.
void reject(self_ptr self, const work_item& item, const client_sink& sink,
            caf::error err) {
  auto& adm = self->state.counters.admission;
  ++adm.rejected;
  ++adm.rejected_by_reason[to_string(code_of(err))];
  audit(self, audit_kind::rejected, item, "", describe(err));
  self->send(sink, failed_atom::value, item.id, std::move(err));
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

void schedule_retry(self_ptr self) {
  auto& st = self->state;
  if (st.retry_scheduled)
    return;
  st.retry_scheduled = true;
  self->delayed_send(self, retry_interval, retry_atom::value);
}

void wake(self_ptr self);

// Takes an item off its device (the quota book's charge and the backlog).
void unplace(self_ptr self, balancer_state::record& r) {
  auto& st = self->state;
  if (r.device < 0)
    return;
  auto& s = st.devices[size_t(r.device)];
  s.backlog_ns = std::max(0.0, s.backlog_ns - r.predicted_ns);
  st.book.refund(r.tenant, size_t(r.device), r.bytes);
  r.device = -1;
}

// Ends an admitted item with a definitive error.
void end_failed(self_ptr self, uint64_t ticket, caf::error err) {
  auto& st = self->state;
  auto i = st.outstanding.find(ticket);
  auto& r = i->second;
  audit(self, audit_kind::failed, r.item,
        r.device >= 0 ? st.devices[size_t(r.device)].info.name : "",
        describe(err));
  // A half-open circuit's probe that ends here frees its slot.
  if (r.device >= 0)
    st.devices[size_t(r.device)].breaker.abandoned();
  // Quota first: a client that resubmits on hearing of the end must find
  // it already released.
  unplace(self, r);
  st.book.end(r.tenant);
  self->send(r.sink, failed_atom::value, r.item.id, std::move(err));
  ++st.counters.failed;
  st.outstanding.erase(i);
  wake(self);
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
      batch.push_back({s.queued[i], r->second.item});
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

// Holds an admitted item until device memory frees up (or its time is up).
void wait_for_memory(self_ptr self, uint64_t ticket, const caf::error& why) {
  auto& st = self->state;
  auto& r = st.outstanding.at(ticket);
  if (!r.waiting_memory) {
    r.waiting_memory = true;
    r.deadline = clock::now() + std::chrono::milliseconds(
                                    st.book.policy(r.tenant).queue_timeout_ms);
    ++st.counters.admission.memory_waits;
    audit(self, audit_kind::placed, r.item, "",
          "waiting for device memory: " + describe(why));
  }
  st.memory_waiting.push_back(ticket);
  schedule_retry(self);
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
  int best_cpu = -1;
  double best_ns = 0;
  double best_cpu_ns = 0;
  // Devices that may take it later: being reset, or their circuit is open.
  bool may_return = false;
  // Read only when a circuit is not closed.
  clock::time_point now{};
  auto circuit_allows = [&](circuit_breaker& b) {
    if (b.closed())
      return true;
    if (now == clock::time_point{})
      now = clock::now();
    return b.allows(now);
  };
  bool memory_online = false;
  bool memory_fits = false;
  caf::error memory_why;
  // Devices that already failed this item are a last resort.
  for (int pass = 0; pass < 2 && best < 0; ++pass) {
    for (size_t i = 0; i < st.devices.size(); ++i) {
      auto& s = st.devices[i];
      uint64_t bit = uint64_t{1} << i;
      if (!(r.device_mask & bit))
        continue;
      if (s.status == device_status::resetting)
        may_return = true;
      if (!takes_work(s.status) || (pass == 0 && (r.failed_on & bit)))
        continue;
      if (!circuit_allows(s.breaker)) {
        may_return = true;
        continue;
      }
      double t =
          s.backlog_ns / std::max(1u, s.info.streams) + predict_ns(st, s, r);
      if (s.status == device_status::degraded)
        t *= st.cfg.degraded_penalty;
      if (s.has_memory) {
        memory_online = true;
        if (auto err = st.book.check_place(r.tenant, i, r.bytes)) {
          memory_why = std::move(err);
          continue;
        }
        memory_fits = true;
      } else if (best_cpu < 0 || t < best_cpu_ns) {
        best_cpu = int(i);
        best_cpu_ns = t;
      }
      if (best < 0 || t < best_ns) {
        best = int(i);
        best_ns = t;
      }
    }
  }
  bool memory_fallback = false;
  if (memory_online && !memory_fits) {
    // Every device with memory it may use is full for it (soft OOM): its
    // tenant's policy decides.
    switch (st.book.policy(r.tenant).on_limit) {
    case limit_policy::reject:
      end_failed(self, ticket, memory_why);
      return;
    case limit_policy::cpu_fallback:
      if (best_cpu >= 0) {
        best = best_cpu;
        memory_fallback = true;
        break;
      }
      [[fallthrough]];
    case limit_policy::queue:
      r.device = -1;
      wait_for_memory(self, ticket, memory_why);
      return;
    }
  }
  if (best < 0) {
    if (may_return) {
      r.device = -1;
      st.parked.push_back(ticket);
      schedule_retry(self);
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
  r.waiting_memory = false;
  r.predicted_ns = predict_ns(st, s, r);
  s.backlog_ns += r.predicted_ns;
  if (!s.breaker.closed())
    s.breaker.placed(clock::now());
  st.book.charge(r.tenant, size_t(best), r.bytes);
  ++r.attempts;
  if (memory_fallback) {
    r.memory_fallback = true;
    ++st.counters.fallbacks;
    ++st.counters.fallbacks_by_reason["device_memory"];
    ++st.counters.admission.memory_fallbacks;
    audit(self, audit_kind::fallback, r.item, s.info.name,
          "device memory: " + describe(memory_why));
  } else if (r.attempts == 1) {
    audit(self, audit_kind::placed, r.item, s.info.name);
  } else {
    ++st.counters.retries;
    if (!is_gpu(s.info) && r.on_gpu_before) {
      ++st.counters.fallbacks;
      ++st.counters.fallbacks_by_reason[to_string(r.last_failure)];
      audit(self, audit_kind::fallback, r.item, s.info.name, why);
    } else {
      audit(self, audit_kind::placed, r.item, s.info.name, "retry: " + why);
    }
  }
  dispatch(self, size_t(best), ticket);
}

// A launch failed on device `index` because of the device: its circuit
// counts it.
void note_failure(self_ptr self, size_t index, const caf::error& err) {
  auto& s = self->state.devices[index];
  if (!s.breaker.failed(clock::now()))
    return;
  ++s.stats.circuit_opens;
  device_event(self, s.info.name,
               "circuit open for " +
                   std::to_string(s.breaker.config().open_for.count()) +
                   " ms after: " + describe(err));
}

// Records that the item's current placement failed and moves it on. A loss
// of the whole device counts once against its circuit, not once per item:
// `counted` says it was.
void replace_after_failure(self_ptr self, uint64_t ticket,
                           const caf::error& err, bool counted = false) {
  auto& st = self->state;
  auto& r = st.outstanding.at(ticket);
  auto index = r.device;
  auto& s = st.devices[size_t(index)];
  ++s.stats.failed_placements;
  if (!counted && is_device_failure(code_of(err)))
    note_failure(self, size_t(index), err);
  else
    s.breaker.abandoned();
  r.failed_on |= uint64_t{1} << index;
  r.on_gpu_before = r.on_gpu_before || is_gpu(s.info);
  r.last_failure = code_of(err);
  unplace(self, r);
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
  if (r.cost_units > 0 && done.device_ns > 0) {
    auto& rate = s.ns_per_unit[static_cast<size_t>(r.item.kernel)];
    double measured = double(done.device_ns) / r.cost_units;
    rate = rate <= 0 ? measured
                     : (1 - rate_weight) * rate + rate_weight * measured;
  }
  ++s.stats.completed;
  ++st.counters.completed;
  s.stats.busy_ns += done.device_ns;
  auto now = clock::now();
  if (!s.breaker.closed() && s.breaker.succeeded(now))
    device_event(self, s.info.name, "circuit closed: its probes passed");
  {
    auto& cell = st.latency[index * kernels::kernel_id_limit +
                            static_cast<size_t>(r.item.kernel)];
    double took_s = std::chrono::duration<double>(now - r.admitted_at).count();
    size_t b = 0;
    while (b < latency_bounds_s.size() && took_s > latency_bounds_s[b])
      ++b;
    ++cell.buckets[b];
    ++cell.count;
    cell.sum_s += took_s;
  }
  bool fallback = !is_gpu(s.info) && (r.on_gpu_before || r.memory_fallback);
  if (fallback) {
    // The price of falling back, against the tenant's budget.
    auto& fb = st.counters.fallback_by_tenant[r.item.tenant];
    auto took = std::chrono::duration_cast<std::chrono::nanoseconds>(
                    now - r.admitted_at)
                    .count();
    fb.budget_ns =
        int64_t(st.book.policy(r.tenant).fallback_budget_ms) * 1000000;
    ++fb.items;
    fb.total_ns += took;
    fb.max_ns = std::max(fb.max_ns, took);
    if (fb.budget_ns > 0 && took > fb.budget_ns) {
      ++fb.over_budget;
      audit(self, audit_kind::fallback, r.item, s.info.name,
            "over the fallback latency budget: " +
                std::to_string(took / 1000000) + " ms against " +
                std::to_string(fb.budget_ns / 1000000) + " ms");
    }
  }
  audit(self, audit_kind::completed, r.item, s.info.name,
        r.attempts > 1 ? "after " + std::to_string(r.attempts) + " placements"
                       : std::string{});
  unplace(self, r);
  st.book.end(r.tenant);
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

// Admits an item whose checks passed.
void admit(self_ptr self, int t, work_item item, client_sink sink,
           uint64_t bytes, clock::time_point now, const std::string& note) {
  auto& st = self->state;
  st.book.admit(t, now);
  ++st.counters.admission.admitted;
  auto ticket = ++st.next_ticket;
  audit(self, audit_kind::admitted, item, "",
        std::to_string(bytes) + " bytes" + note);
  balancer_state::record r;
  auto c = item_cost(item);
  r.cost_units = c.flops + c.bytes;
  r.tenant = t;
  r.device_mask = st.book.policy(t).device_mask;
  r.bytes = bytes;
  r.admitted_at = now;
  r.item = std::move(item);
  r.sink = std::move(sink);
  st.outstanding.emplace(ticket, std::move(r));
  place(self, ticket, {});
}

// Admits held-back items that fit now, in order, tenant by tenant.
void drain_held(self_ptr self, clock::time_point now) {
  auto& st = self->state;
  for (size_t t = 0; t < st.held.size(); ++t) {
    auto& q = st.held[t];
    while (!q.empty() && !st.closed) {
      if (st.book.check_admit(int(t), now))
        break;
      auto h = std::move(q.front());
      q.pop_front();
      admit(self, int(t), std::move(h.item), std::move(h.sink), h.bytes, now,
            " (was held back)");
    }
  }
}

// Places items that wait for device memory and fit now, in order.
void drain_memory_waiting(self_ptr self) {
  auto& st = self->state;
  auto n = st.memory_waiting.size();
  for (size_t k = 0; k < n && !st.memory_waiting.empty(); ++k) {
    auto ticket = st.memory_waiting.front();
    st.memory_waiting.pop_front();
    auto i = st.outstanding.find(ticket);
    if (i == st.outstanding.end() || !i->second.waiting_memory)
      continue;
    // place() puts it back at the end if it still does not fit.
    place(self, ticket, "waited for device memory");
  }
}

// Something ended or memory came free: held and waiting items get a look.
void wake(self_ptr self) {
  auto& st = self->state;
  if (st.stopping)
    return;
  if (st.waking) {
    st.wake_again = true;
    return;
  }
  st.waking = true;
  do {
    st.wake_again = false;
    bool any_held = false;
    for (auto& q : st.held)
      any_held |= !q.empty();
    if (any_held)
      drain_held(self, clock::now());
    if (!st.memory_waiting.empty())
      drain_memory_waiting(self);
  } while (st.wake_again);
  st.waking = false;
}

// Ends held and waiting items whose time is up.
void expire(self_ptr self, clock::time_point now) {
  auto& st = self->state;
  for (size_t t = 0; t < st.held.size(); ++t) {
    auto& q = st.held[t];
    while (!q.empty() && q.front().deadline <= now) {
      auto h = std::move(q.front());
      q.pop_front();
      auto why = st.book.check_admit(int(t), now);
      ++st.counters.admission.timeouts;
      reject(self, h.item, h.sink,
             make_error(
                 why ? code_of(why) : errc::over_inflight_quota,
                 (why ? describe(why) : std::string{"held back"}) +
                     " (held back for " +
                     std::to_string(st.book.policy(int(t)).queue_timeout_ms) +
                     " ms, its queue timeout)"));
    }
  }
  std::vector<uint64_t> late;
  for (auto ticket : st.memory_waiting)
    if (auto i = st.outstanding.find(ticket); i != st.outstanding.end() &&
                                              i->second.waiting_memory &&
                                              i->second.deadline <= now)
      late.push_back(ticket);
  for (auto ticket : late) {
    auto& r = st.outstanding.at(ticket);
    r.waiting_memory = false;
    ++st.counters.admission.timeouts;
    caf::error why;
    for (size_t d = 0; d < st.devices.size() && !why; ++d)
      if ((r.device_mask & (uint64_t{1} << d)) && st.devices[d].has_memory)
        why = st.book.check_place(r.tenant, d, r.bytes);
    end_failed(
        self, ticket,
        make_error(
            why ? code_of(why) : errc::memory_limit,
            (why ? describe(why) : std::string{"no memory"}) + " (waited " +
                std::to_string(st.book.policy(r.tenant).queue_timeout_ms) +
                " ms for device memory, its queue timeout)"));
  }
}

bool anything_held(const balancer_state& st) {
  if (!st.memory_waiting.empty())
    return true;
  for (auto& q : st.held)
    if (!q.empty())
      return true;
  return false;
}

void on_submit(self_ptr self, work_item& item, client_sink& sink) {
  auto& st = self->state;
  if (st.closed)
    return reject(self, item, sink,
                  make_error(errc::shutting_down, "the runtime is stopping"));
  auto t = st.book.tenant_index(item.tenant);
  if (t < 0)
    return reject(self, item, sink, no_grant(item.tenant));
  auto& pol = st.book.policy(t);
  for (size_t i = 0; i <= item.then.size(); ++i) {
    auto k = i == 0 ? item.kernel : item.then[i - 1].kernel;
    if (!kernels::is_known(static_cast<uint8_t>(k)))
      return reject(
          self, item, sink,
          make_error(errc::unknown_kernel,
                     std::string{i == 0 ? "kernel" : "chained kernel"} +
                         " id " + std::to_string(int(k)) +
                         " is not in the catalog"));
    if (!(pol.kernel_mask & (1u << static_cast<uint8_t>(k))))
      return reject(
          self, item, sink,
          make_error(errc::not_granted, "tenant '" + item.tenant +
                                            "' is not granted kernel " +
                                            std::string{kernels::name(k)}));
  }
  if (auto why = validate_item(item); !why.empty())
    return reject(self, item, sink,
                  make_error(errc::invalid_arguments, std::move(why)));
  auto bytes = item_bytes(item);
  if (auto err = st.book.check_ever(t, bytes, pol.device_mask))
    return reject(self, item, sink, std::move(err));
  auto now = clock::now();
  auto& q = st.held[size_t(t)];
  // Later items wait behind held-back ones: order within a tenant holds.
  caf::error blocked = st.book.check_admit(t, now);
  if (!blocked && !q.empty())
    blocked = make_error(code_of(q.front().why), describe(q.front().why) +
                                                     " (items are held back "
                                                     "before it)");
  if (!blocked)
    return admit(self, t, std::move(item), std::move(sink), bytes, now, "");
  if (pol.on_limit == limit_policy::reject)
    return reject(self, item, sink, std::move(blocked));
  if (q.size() >= pol.queue_limit)
    return reject(
        self, item, sink,
        make_error(code_of(blocked), describe(blocked) + "; its queue of " +
                                         std::to_string(pol.queue_limit) +
                                         " held-back items is full"));
  ++st.counters.admission.held;
  q.push_back({std::move(item), std::move(sink), bytes,
               now + std::chrono::milliseconds(pol.queue_timeout_ms),
               std::move(blocked)});
  schedule_retry(self);
}

} // namespace

balancer_actor::behavior_type
balancer_impl(balancer_actor::stateful_pointer<balancer_state> self,
              std::vector<device_info> devices, quota_lease lease,
              audit_actor audit_dest, balancer_config cfg) {
  auto& st = self->state;
  for (size_t i = 0; i < devices.size(); ++i) {
    auto& info = devices[i];
    balancer_state::slot s;
    s.info = info;
    s.has_memory = i < lease.devices.size() && lease.devices[i].has_memory;
    s.stats.name = info.name;
    s.stats.kind = to_string(info.kind);
    s.stats.simulated = info.simulated;
    s.stats.status = device_status::resetting;
    st.devices.push_back(std::move(s));
  }
  st.book = quota_book{std::move(lease)};
  st.held.resize(st.book.tenants());
  st.audit = audit_buffer{std::move(audit_dest)};
  st.cfg = cfg;
  for (auto& s : st.devices)
    s.breaker = circuit_breaker{cfg.circuit};
  st.latency.resize(st.devices.size() * kernels::kernel_id_limit);
  // Stopped with items still in flight (the runtime drained what it could
  // first): each ends now, once, with shutting_down.
  self->set_exit_handler([=](caf::exit_msg& msg) {
    auto& st = self->state;
    st.stopping = true;
    st.closed = true;
    for (auto& q : st.held)
      while (!q.empty()) {
        auto h = std::move(q.front());
        q.pop_front();
        reject(self, h.item, h.sink,
               make_error(errc::shutting_down, "the runtime stopped"));
      }
    std::vector<uint64_t> left;
    for (auto& [ticket, r] : st.outstanding)
      left.push_back(ticket);
    for (auto ticket : left)
      if (st.outstanding.count(ticket) > 0)
        end_failed(self, ticket,
                   make_error(errc::shutting_down,
                              "the runtime stopped before the item finished"));
    st.audit.flush(self);
    self->quit(msg.reason);
  });
  return {
      [=](submit_atom, work_item& item, client_sink& sink) {
        on_submit(self, item, sink);
      },
      [=](lease_atom, quota_lease& lease) {
        // New limits for the same tenants: use so far carries over. Items in
        // flight and held back refer to tenants by position.
        auto& st = self->state;
        bool same = lease.policies.size() == st.book.tenants() &&
                    lease.devices.size() == st.devices.size();
        for (size_t t = 0; same && t < lease.policies.size(); ++t)
          same = lease.policies[t].tenant == st.book.policy(int(t)).tenant;
        if (!same) {
          device_event(self, "",
                       "balancer: refused a lease that changes the tenants or "
                       "devices (restart the runtime for that)");
          return;
        }
        auto usage = st.book.usage();
        for (auto& s : st.devices)
          s.has_memory = false;
        for (size_t i = 0; i < lease.devices.size() && i < st.devices.size();
             ++i)
          st.devices[i].has_memory = lease.devices[i].has_memory;
        st.book = quota_book{std::move(lease)};
        st.book.set_usage(usage);
        wake(self);
      },
      [=](done_atom, uint32_t index, std::vector<work_done>& batch) {
        for (auto& done : batch)
          complete(self, index, done);
        auto& s = self->state.devices[index];
        s.sent -= std::min(s.sent, uint32_t(batch.size()));
        send_queued(self, index);
        wake(self);
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
          end_failed(self, ticket, std::move(err));
        }
        send_queued(self, index);
        wake(self);
      },
      [=](up_atom, uint32_t index, device_actor& handle) {
        auto& st = self->state;
        auto& s = st.devices.at(index);
        if (s.started) {
          ++s.stats.restarts;
          device_event(self, s.info.name, "device restarted and back online");
        }
        s.started = true;
        s.handle = std::move(handle);
        s.status =
            s.draining ? device_status::draining : device_status::available;
        s.stats.status = s.status;
        s.backlog_ns = 0;
        s.sent = 0;
        s.queued.clear();
        retry_parked(self);
        wake(self);
      },
      [=](down_atom, uint32_t index, caf::error& reason, bool permanent) {
        auto& st = self->state;
        auto& s = st.devices.at(index);
        // Taken down on purpose (an operator, a sibling's restart): not a
        // loss of this device.
        auto on_purpose = code_of(reason) == errc::device_offline ||
                          code_of(reason) == errc::device_restarted;
        if ((takes_work(s.status) || s.status == device_status::draining) &&
            !on_purpose) {
          ++s.stats.losses;
          if (is_device_failure(code_of(reason)))
            note_failure(self, index, reason);
        }
        s.status =
            permanent ? device_status::offline : device_status::resetting;
        if (permanent)
          s.draining = false;
        s.stats.status = s.status;
        s.handle = device_actor{};
        s.backlog_ns = 0;
        // Queued tickets are re-placed below with the ones the actor held.
        s.sent = 0;
        s.queued.clear();
        device_event(self, s.info.name,
                     std::string{permanent    ? "device offline: "
                                 : on_purpose ? "device restarting: "
                                              : "device lost, restarting: "} +
                         describe(reason));
        std::vector<uint64_t> moving;
        for (auto& [ticket, r] : st.outstanding)
          if (r.device == int32_t(index))
            moving.push_back(ticket);
        for (auto ticket : moving)
          replace_after_failure(self, ticket, reason, true);
        // Parked items whose devices are all gone for good cannot wait longer.
        if (permanent)
          retry_parked(self);
        wake(self);
      },
      [=](status_atom, uint32_t index, uint8_t status, std::string& why) {
        auto& st = self->state;
        auto& s = st.devices.at(index);
        if (!s.handle) {
          // Drained while it is being reset: it comes back draining.
          s.draining =
              static_cast<device_status>(status) == device_status::draining;
          return;
        }
        s.status = static_cast<device_status>(status);
        s.stats.status = s.status;
        s.draining = s.status == device_status::draining;
        if (s.status == device_status::draining) {
          // What runs there finishes; what waits for it moves on now.
          auto queued = std::move(s.queued);
          s.queued = {};
          for (auto ticket : queued) {
            auto i = st.outstanding.find(ticket);
            if (i == st.outstanding.end() || i->second.device != int32_t(index))
              continue;
            s.breaker.abandoned();
            unplace(self, i->second);
            --i->second.attempts;
            place(self, ticket, "device draining: " + why);
          }
        } else {
          retry_parked(self);
        }
        wake(self);
      },
      [=](down_atom) {
        auto& st = self->state;
        st.closed = true;
        auto stopping = [] {
          return make_error(errc::shutting_down, "the runtime is stopping");
        };
        for (auto& q : st.held) {
          while (!q.empty()) {
            auto h = std::move(q.front());
            q.pop_front();
            reject(self, h.item, h.sink, stopping());
          }
        }
        auto waiting = std::move(st.memory_waiting);
        st.memory_waiting = {};
        for (auto ticket : waiting)
          if (auto i = st.outstanding.find(ticket);
              i != st.outstanding.end() && i->second.waiting_memory)
            end_failed(self, ticket, stopping());
        return true;
      },
      [=](stats_atom) {
        auto& st = self->state;
        auto out = st.counters;
        auto now = clock::now();
        for (auto& s : st.devices) {
          out.devices.push_back(s.stats);
          out.devices.back().circuit = s.breaker.state(now);
        }
        for (auto& [ticket, r] : st.outstanding)
          if (r.device >= 0)
            ++out.devices[size_t(r.device)].queued;
        for (size_t d = 0; d < st.devices.size(); ++d)
          for (size_t k = 0; k < kernels::kernel_id_limit; ++k) {
            auto& cell = st.latency[d * kernels::kernel_id_limit + k];
            if (cell.count == 0)
              continue;
            latency_histogram h;
            h.kernel =
                std::string{kernels::name(static_cast<kernels::kernel_id>(k))};
            h.device = st.devices[d].info.name;
            h.buckets.assign(cell.buckets.begin(), cell.buckets.end());
            h.count = cell.count;
            h.sum_s = cell.sum_s;
            out.latency.push_back(std::move(h));
          }
        out.outstanding = st.outstanding.size();
        auto u = st.book.usage();
        for (auto& tu : u.tenants)
          out.admission.inflight[tu.tenant] = tu.inflight;
        return out;
      },
      [=](usage_atom) {
        auto& st = self->state;
        auto u = st.book.usage();
        for (size_t t = 0; t < u.tenants.size() && t < st.held.size(); ++t)
          u.tenants[t].waiting = st.held[t].size();
        for (auto ticket : st.memory_waiting)
          if (auto i = st.outstanding.find(ticket);
              i != st.outstanding.end() && i->second.waiting_memory)
            ++u.tenants[size_t(i->second.tenant)].waiting;
        return u;
      },
      [=](flush_atom) {
        self->state.audit.flush(self);
        return true;
      },
      [=](tick_atom) { self->state.audit.on_tick(self); },
      [=](retry_atom) {
        auto& st = self->state;
        st.retry_scheduled = false;
        expire(self, clock::now());
        // Items parked behind an open circuit or a reset get another look.
        if (!st.parked.empty())
          retry_parked(self);
        wake(self);
        if (anything_held(st) || !st.parked.empty())
          schedule_retry(self);
      },
  };
}

} // namespace cohort::actors
