#include "actors/balancer/balancer.hpp"

#include "kernels/registry.hpp"

#include "actors/balancer/admission_rules.hpp"
#include "actors/balancer/gang_planner.hpp"
#include "actors/balancer/host_kernels.hpp"
#include "actors/balancer/objects.hpp"
#include "actors/balancer/placement_policy.hpp"
#include "actors/balancer/state.hpp"
#include "quota/simulation.hpp"

#include <algorithm>
#include <array>
#include <limits>
#include <map>
#include <optional>

#include <caf/all.hpp>
#include <unistd.h>

#include "devices/memory/memory_resource.hpp"
#include "kernels/small_vector.hpp"
#include "messages/errc.hpp"
#include "messages/output_buffer.hpp"

namespace cohort::actors {

using namespace balancer;

namespace {

using self_ptr = balancer_actor::stateful_pointer<balancer_state>;
using clock = balancer_state::clock;

// Longest pause between two looks at held-back and waiting items.
constexpr auto retry_interval = std::chrono::milliseconds(20);

// How long a measured crossing counts (docs/placement.md).
constexpr auto crossing_max_age = std::chrono::seconds(1);

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

// A device refused the item's memory (hard OOM in its pool, or its exact
// accounting of a limit or quota): not a failure of the device.
bool is_memory_refusal(errc code) {
  return code == errc::out_of_memory || code == errc::memory_limit ||
         code == errc::over_memory_quota;
}

// The pause after the n-th memory refusal of one item: 1 ms doubling, at
// most 32 ms.
std::chrono::milliseconds refusal_backoff(uint32_t n) {
  return std::chrono::milliseconds(1 << std::min(n == 0 ? 0u : n - 1, 5u));
}

bool takes_work(device_status s) {
  return s == device_status::available || s == device_status::degraded;
}

// Device `d`'s placement view changed (its backlog, room, status, circuit or
// throughput): the fleet index catches up before the next placement.
void touch(balancer_state& st, size_t d) {
  st.fleet_dirty |= uint64_t{1} << d;
}

void touch_all(balancer_state& st) {
  auto n = st.devices.size();
  st.fleet_dirty = n >= 64 ? ~uint64_t{0} : (uint64_t{1} << n) - 1;
}

// A device that does not take work now but may again: being reset, drained
// or taken offline by an operator (operators' actions are usually
// temporary). Items that only it could run park rather than fail.
bool may_come_back(const balancer_state::slot& s) {
  return s.status == device_status::resetting ||
         s.status == device_status::draining ||
         (s.status == device_status::offline && s.operator_offline);
}

void audit(self_ptr self, audit_kind kind, const work_item& item,
           std::string device, std::string detail = {}) {
  auto& st = self->state;
  st.audit.add(self, audit_event{kind, item.tenant, item.id, std::move(device),
                                 std::string{kernels::name(item.kernel)},
                                 std::move(detail), wall_clock_ns()});
}

int64_t steady_ns(clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             t.time_since_epoch())
      .count();
}

// Reads the clock for the message being handled.
void stamp(balancer_state& st) {
  st.now = clock::now();
  st.now_wall_ns = st.wall_offset_ns + steady_ns(st.now);
}

// The wall clock is the steady clock plus an offset, taken again now (it
// moves when the system clock is set or slewed).
void refresh_wall_offset(balancer_state& st) {
  st.wall_offset_ns = wall_clock_ns() - steady_ns(clock::now());
}

// Records a common-path event of `r`'s item in fixed binary: an admission
// (`value`: its device-memory bytes), a first placement or a completion on
// device `device` (-1: none).
void audit_common(self_ptr self, audit_kind kind, const work_item& item,
                  int tenant, int32_t device, uint64_t value = 0) {
  auto& st = self->state;
  st.audit.add(
      self, audit_entry{st.now_wall_ns, item.id, value, uint32_t(tenant),
                        device < 0 ? audit_entry::no_device : uint16_t(device),
                        static_cast<uint8_t>(kind),
                        static_cast<uint8_t>(item.kernel)});
}

// Adds `e` to the trace being recorded (docs/tracing.md), if one is.
void trace_add(balancer_state& st, const trace_event& e) {
  if (st.trace)
    st.trace->add(e);
}

void trace_add(balancer_state& st, const trace_event& e,
               std::string_view text) {
  if (st.trace)
    st.trace->add(e, text);
}

// The trace's count of the items placed on device `index` now.
void trace_placed(balancer_state& st, size_t index) {
  trace_add(st, {.begin_ns = steady_ns(st.now),
                 .count = st.devices[index].placed,
                 .device = int32_t(index),
                 .kind = trace_kind::placed});
}

void device_event(self_ptr self, const std::string& device,
                  std::string detail) {
  auto& st = self->state;
  if (st.trace)
    for (size_t d = 0; d < st.devices.size(); ++d)
      if (st.devices[d].info.name == device)
        st.trace->add({.begin_ns = steady_ns(st.now),
                       .device = int32_t(d),
                       .kind = trace_kind::device},
                      detail);
  self->state.audit.add(self,
                        audit_event{audit_kind::device_event, "", 0, device, "",
                                    std::move(detail), wall_clock_ns()});
}

// Sends the ends waiting for batch sinks, one message per sink.
void deliver_ends(self_ptr self) {
  auto& st = self->state;
  for (auto& p : st.pending)
    if (!p.ends.empty())
      self->send(caf::actor_cast<batch_sink>(p.sink), result_atom::value,
                 std::exchange(p.ends, {}));
  st.pending.clear();
  st.pending_index.clear();
}

// Sends an item's end to its sink: at once to a client_sink; to a
// batch_sink together with the other ends of this round (the first one
// sends the balancer a deliver message, read after what is queued now).
void tell_end(self_ptr self, const end_sink& sink, work_end end) {
  auto& st = self->state;
  if (!sink.batched) {
    auto to = caf::actor_cast<client_sink>(sink.handle);
    if (end.error)
      self->send(to, failed_atom::value, end.key, std::move(end.error));
    else
      self->send(to, result_atom::value, std::move(end.result));
    return;
  }
  if (st.pending.empty())
    self->send(self, deliver_atom::value);
  auto [at, fresh] =
      st.pending_index.try_emplace(sink.address(), st.pending.size());
  if (fresh)
    st.pending.push_back({sink.handle, {}});
  auto& p = st.pending[at->second];
  p.ends.push_back(std::move(end));
  if (p.ends.size() >= max_end_batch)
    self->send(caf::actor_cast<batch_sink>(p.sink), result_atom::value,
               std::exchange(p.ends, {}));
}

// Refuses an item before admission. `held`: it was held back (its end
// is traced as an end, note_ended), else it is traced as refused.
void reject(self_ptr self, const work_item& item, const end_sink& sink,
            caf::error err, bool held = false) {
  auto& st = self->state;
  if (st.trace && !held)
    st.trace->add({.begin_ns = steady_ns(st.now),
                   .tenant = st.acct.book().tenant_index(item.tenant),
                   .kind = trace_kind::ended,
                   .kernel = uint8_t(item.kernel),
                   .flags = trace_refused},
                  describe(err));
  auto& adm = self->state.counters.admission;
  ++adm.rejected;
  ++adm.rejected_by_reason[to_string(code_of(err))];
  audit(self, audit_kind::rejected, item, "", describe(err));
  tell_end(self, sink, {item.key(), std::move(err), {}});
}

balancer_state::client_key key_of(const end_sink& sink, uint64_t id) {
  return {sink.address(), id};
}

// The number of the actor a client's ends go to (item_view::client).
uint64_t client_of(const end_sink& sink) {
  auto a = sink.address();
  return a ? uint64_t(a.id()) : 0;
}

int64_t ns_between(clock::time_point from, clock::time_point to) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(to - from)
      .count();
}

// Keeps the end of a client's item (job != 0) for `cohort jobs describe`:
// the last ended_kept of them.
void note_ended(balancer_state& st, uint64_t job, const work_item& item,
                int tenant, const end_sink& sink, const caf::error& err,
                int32_t device, clock::time_point submitted,
                uint32_t attempts) {
  if (job == 0)
    return;
  if (err && st.trace)
    st.trace->add({.begin_ns = steady_ns(st.now),
                   .job = job,
                   .device = device,
                   .tenant = tenant,
                   .kind = trace_kind::ended,
                   .kernel = uint8_t(item.kernel)},
                  describe(err));
  if (st.ended.size() < balancer_state::ended_kept)
    st.ended.emplace_back();
  auto& e = st.ended[st.ended_next];
  st.ended_next = (st.ended_next + 1) % balancer_state::ended_kept;
  e.job = job;
  e.id = item.id;
  e.client = client_of(sink);
  e.tenant = tenant;
  e.device = device;
  e.kernel = item.kernel;
  e.attempts = attempts;
  e.priority = item.priority;
  e.age_ns = ns_between(submitted, st.now);
  e.err = err;
}

// An ended item as listings show it.
item_view view_of(const balancer_state& st,
                  const balancer_state::ended_item& e) {
  item_view v;
  v.job = e.job;
  v.id = e.id;
  v.client = e.client;
  if (e.tenant >= 0)
    v.tenant = st.acct.book().policy(e.tenant).tenant;
  v.kernel = kernels::name(e.kernel);
  v.state = !e.err                              ? "done"
            : code_of(e.err) == errc::cancelled ? "cancelled"
                                                : "failed";
  if (e.device >= 0)
    v.device = st.devices[size_t(e.device)].info.name;
  v.age_ns = e.age_ns;
  v.attempts = e.attempts;
  v.priority = e.priority;
  if (e.err)
    v.detail = describe(e.err);
  return v;
}

// Refuses an item that was held back: it leaves the index of open items.
void reject_held(self_ptr self, balancer_state::held_item& h, caf::error err) {
  self->state.by_client.erase(key_of(h.sink, h.item.key()));
  auto& st = self->state;
  note_ended(st, h.job, h.item, st.acct.book().tenant_index(h.item.tenant),
             h.sink, err, -1, h.submitted, 0);
  reject(self, h.item, h.sink, std::move(err), true);
}

// Key of a run-time model cell in `probing`.
uint32_t cell_key(size_t device, const balancer_state::record& r) {
  return uint32_t(device) << 16 | uint32_t(r.item.kernel) << 8 | r.cls;
}

// Cost units of `r` on device `s`: its inputs the device already holds are
// not moved again. With `evicting`, inputs it would have to push others out
// for cost those too (a later item moves them back): what placement weighs,
// not what the run measures.
double units_on(const balancer_state& st, size_t index,
                const balancer_state::record& r, bool evicting = false) {
  auto& s = st.devices[index];
  // Objects a device holds are read where they are (docs/objects.md).
  double objects = r.objects.empty()
                       ? 0.0
                       : double(st.objects.resident_bytes(r.objects, index));
  if (s.resident.budget() == 0)
    return std::max(r.cost_units - objects, r.cost_units * 0.01);
  double held = objects;
  uint64_t incoming = 0;
  for (auto& in : r.item.inputs) {
    if (s.resident.holds(in.span().data()))
      held += double(in.bytes());
    else if (in.bytes() <= s.resident.budget())
      incoming += in.bytes();
  }
  double evicted = evicting ? double(s.resident.evicts(incoming)) : 0;
  return std::max(r.cost_units - held, r.cost_units * 0.01) + evicted;
}

// Predicted device time per cost unit of kernel `k` at size class `cls` on
// device `index`: the median of its recent runs of that cell there
// (`measured`). Without one, the same kernel at the nearest size there, else
// the best device that ran it scaled by nominal speeds, else the nominal
// speed.
double rate_of(const balancer_state& st, size_t index, kernels::kernel_id k,
               uint8_t cls, bool* measured = nullptr) {
  double rate = st.model.rate(index, k, cls);
  if (measured != nullptr)
    *measured = rate > 0;
  if (rate > 0)
    return rate;
  rate = st.model.nearest_rate(index, k, cls);
  auto speed = std::max(st.devices[index].info.speed, 1e-3);
  for (size_t j = 0; rate <= 0 && j < st.devices.size(); ++j) {
    double other = st.model.rate(j, k, cls);
    if (other > 0) {
      double scaled = other * std::max(st.devices[j].info.speed, 1e-3) / speed;
      if (rate <= 0 || scaled < rate)
        rate = scaled;
    }
  }
  if (rate <= 0)
    rate = 1.0 / speed;
  return rate;
}

// Predicted device time of `r` on device `index` (rate_of times its units
// there). Without measured runs of its cell there, `explore` says whether
// the device should get a first run of that cell (none in flight yet:
// measure instead of guessing).
double predict_ns(const balancer_state& st, size_t index,
                  const balancer_state::record& r, bool* explore = nullptr) {
  auto units = units_on(st, index, r, true);
  bool measured = false;
  auto rate = rate_of(st, index, r.item.kernel, r.cls, &measured);
  if (!measured && explore != nullptr)
    *explore = st.probing.count(cell_key(index, r)) == 0;
  return rate * units;
}

// Bytes of inputs `r` carries to device `index`: its own and its chained
// stages'. An object counts only where the device holds no copy of it (a
// host copy goes instead).
uint64_t carried_bytes(const balancer_state& st, size_t index,
                       const balancer_state::record& r) {
  uint64_t out = 0;
  auto add = [&](const std::vector<host_buffer>& inputs) {
    for (auto& in : inputs) {
      if (in.object() != 0)
        if (auto* e = st.objects.find(in.object());
            e != nullptr && objects::has_device(e->replicas, index))
          continue;
      out += in.bytes();
    }
  };
  add(r.item.inputs);
  for (auto& stage : r.item.then)
    add(stage.inputs);
  return out;
}

// Whether device `s`'s measured crossing counts: while items are on their
// way to it or back, and for crossing_max_age after the last measurement.
// One that does not counts as none: the device looks as near as the node's
// own, takes an item (whose sending makes it count again), and is measured
// anew; a crossing measured while the machine was busy does not keep a
// device idle for good.
bool crossing_fresh(const balancer_state& st, const balancer_state::slot& s) {
  return s.crossing.measured() &&
         (s.sent > 0 || st.now - s.crossing_at < crossing_max_age);
}

// What reaching device `index` adds to `r`'s completion: its measured
// crossing for a device outside the node's process, nothing in it (or
// before a first measurement, or after the last grew old).
double crossing_ns(const balancer_state& st, size_t index,
                   const balancer_state::record& r) {
  auto& s = st.devices[index];
  return crossing_fresh(st, s) ? s.crossing.predict(carried_bytes(st, index, r))
                               : 0.0;
}

// When `r` would finish on device `index` if placed there now: the
// device's backlog per stream, then its predicted run (predict_ns), times
// a degraded device's penalty when `penalized`, plus the crossing to it and
// back (a slow link is not a slow device).
double finish_ns(const balancer_state& st, size_t index,
                 const balancer_state::record& r, bool* explore = nullptr,
                 bool penalized = false) {
  auto& s = st.devices[index];
  double t = s.backlog_ns / std::max(1u, s.info.streams) +
             predict_ns(st, index, r, explore);
  if (penalized && s.status == device_status::degraded)
    t *= st.cfg.degraded_penalty;
  return t + crossing_ns(st, index, r);
}

// Notes that `r`'s inputs go to device `index` (its cost there first), and
// which inputs that device holds from now on.
void send_inputs(balancer_state& st, size_t index, balancer_state::record& r) {
  auto& s = st.devices[index];
  r.device_units = units_on(st, index, r);
  if (s.resident.budget() == 0)
    return;
  auto bit = uint64_t{1} << index;
  for (auto& in : r.item.inputs) {
    auto* id = in.span().data();
    s.resident.use(id, in.bytes(), [&](const void* gone) {
      if (auto i = st.holders.find(gone); i != st.holders.end())
        if ((i->second &= ~bit) == 0)
          st.holders.erase(i);
    });
    if (s.resident.holds(id))
      st.holders[id] |= bit;
  }
}

// Device `index` holds no inputs any more (it was reset or lost).
void forget_inputs(balancer_state& st, size_t index) {
  st.devices[index].resident.clear();
  auto bit = uint64_t{1} << index;
  for (auto i = st.holders.begin(); i != st.holders.end();)
    if ((i->second &= ~bit) == 0)
      i = st.holders.erase(i);
    else
      ++i;
}

void schedule_retry(self_ptr self) {
  auto& st = self->state;
  if (st.retry_scheduled)
    return;
  st.retry_scheduled = true;
  self->delayed_send(self, retry_interval, retry_atom::value);
}

void wake(self_ptr self);
void pump(self_ptr self);
void retry_parked(self_ptr self);
bool circuit_reopened(balancer_state& st);

// Parked items get a look at most this often outside of device events.
constexpr auto parked_look_interval = std::chrono::milliseconds(1);

// Calls f(charges) with the device-memory charges of `r`: a merged launch
// charges each member's tenant for its own item.
template <class F>
decltype(auto) with_charges(balancer_state& st, const balancer_state::record& r,
                            F f) {
  if (r.members.empty()) {
    balancer::charge one{r.tenant, r.device >= 0 ? r.charged : r.bytes};
    return f(balancer::charges{&one, 1});
  }
  // Inline for launches of up to 64 members (no allocation per call).
  kernels::small_vector<balancer::charge, 64> all;
  for (auto m : r.members)
    if (auto i = st.outstanding.find(m); i != st.outstanding.end())
      all.push_back({i->second.tenant, i->second.bytes});
  return f(balancer::charges{all});
}

// Device memory `r` takes on device `d`: its item's bytes less the copies
// of its objects that `d` holds (read in place, not allocated there).
uint64_t bytes_on(const balancer_state& st, const balancer_state::record& r,
                  size_t d) {
  uint64_t resident = 0;
  for (auto id : r.objects)
    if (auto* e = st.objects.find(id);
        e != nullptr && objects::has_device(e->replicas, d))
      resident += object_block_bytes(e->bytes());
  return r.bytes - std::min(r.bytes, resident);
}

// Why `r` may not take device memory on device `index` now; none if it may.
caf::error memory_check(balancer_state& st, const balancer_state::record& r,
                        size_t index) {
  if (r.members.empty() && !r.objects.empty()) {
    balancer::charge c{r.tenant, bytes_on(st, r, index)};
    return st.acct.check({&c, 1}, index);
  }
  return with_charges(
      st, r, [&](balancer::charges cs) { return st.acct.check(cs, index); });
}

// Takes an item off its device (the quota book's charge and the backlog).
// Moves `r`'s hold on its objects from readers' key `from` to `to` (a
// device, or unplaced_key).
void move_object_holds(balancer_state& st, const balancer_state::record& r,
                       size_t from, size_t to) {
  for (auto id : r.objects) {
    st.objects.unpin(id, from);
    st.objects.pin(id, to);
  }
}

// Records what happened to object `e` (made, stored, evicted, lost, freed).
void audit_object(self_ptr self, const objects::object_entry& e,
                  std::string device, const std::string& what) {
  self->state.audit.add(
      self, audit_event{audit_kind::object, e.tenant, 0, std::move(device), "",
                        "object " + std::to_string(e.id) + " (" +
                            std::to_string(e.bytes()) + " bytes, " +
                            std::string{kernels::name(e.type)} + "): " + what,
                        wall_clock_ns()});
}

// The charge of one copy of object `e` on a device.
balancer::charge object_charge(const balancer_state& st,
                               const objects::object_entry& e) {
  return {st.acct.book().tenant_index(e.tenant), object_block_bytes(e.bytes())};
}

void free_object(self_ptr self, uint64_t id, const std::string& why);
void run_after_rebuild(self_ptr self, uint64_t id);
void drop_lineage(self_ptr self, uint64_t id);

// The objects made from object `id` can no longer be made again from it
// (it was written in place, or is lost): their lineages go.
void drop_lineages_reading(self_ptr self, uint64_t id) {
  auto& st = self->state;
  std::vector<uint64_t> made;
  for (auto& [out, l] : st.lineage)
    if (std::find(l.inputs.begin(), l.inputs.end(), id) != l.inputs.end())
      made.push_back(out);
  for (auto out : made)
    drop_lineage(self, out);
}

// Object `id` no longer needs the item that made it to be made again: it
// has a host copy, was written in place, or went. The objects that item
// read are let go (freed when nothing else holds them).
void drop_lineage(self_ptr self, uint64_t id) {
  auto& st = self->state;
  auto i = st.lineage.find(id);
  if (i == st.lineage.end())
    return;
  auto inputs = std::move(i->second.inputs);
  st.lineage.erase(i);
  if (auto* e = st.objects.find(id))
    e->producer.reset();
  for (auto in : inputs)
    if (st.objects.undepend(in))
      free_object(self, in, "the last object made from it no longer needs it");
}

// Object `id` was kept on a device from `r`'s output, with no host copy:
// `r`'s item is kept, to be re-run should every copy be lost. It holds the
// objects it reads meanwhile.
void keep_lineage(self_ptr self, uint64_t id, const balancer_state::record& r) {
  auto& st = self->state;
  auto* e = st.objects.find(id);
  if (e == nullptr || e->has_host)
    return;
  balancer_state::lineage_entry l;
  l.item = r.item;
  l.tenant = r.tenant;
  l.bytes = r.bytes;
  l.cost_units = r.cost_units;
  l.cls = r.cls;
  l.inputs = objects_read(r.item);
  for (auto in : l.inputs)
    st.objects.depend(in);
  e->producer = r.item.id;
  st.lineage.insert_or_assign(id, std::move(l));
}

// Frees object `id`: its copies are dropped and their charges refunded.
void free_object(self_ptr self, uint64_t id, const std::string& why) {
  auto& st = self->state;
  auto* e = st.objects.find(id);
  if (e == nullptr)
    return;
  auto c = object_charge(st, *e);
  for (size_t d = 0; d < st.devices.size(); ++d) {
    if (!objects::has_device(e->replicas | e->storing, d))
      continue;
    if (auto& h = st.devices[d].handle)
      self->send(h, drop_atom::value, id);
    if (c.tenant >= 0 && st.acct.metered(d))
      st.acct.refund({&c, 1}, d);
  }
  audit_object(self, *e, "", "freed: " + why);
  ++st.counters.objects.freed;
  st.shares.object_gone(id);
  st.spilling.erase(id);
  st.copying.erase(id);
  st.copy_after.erase(id);
  st.objects.erase(id);
  drop_lineage(self, id);
  run_after_rebuild(self, id);
}

// Drops the copy of object `id` on device `d` (another copy, or the host
// copy, remains).
void evict_copy(self_ptr self, uint64_t id, size_t d, const std::string& why) {
  auto& st = self->state;
  auto* e = st.objects.find(id);
  if (e == nullptr || !objects::has_device(e->replicas, d))
    return;
  if (auto& h = st.devices[d].handle)
    self->send(h, drop_atom::value, id);
  st.objects.unstored(id, d);
  auto c = object_charge(st, *e);
  if (c.tenant >= 0 && st.acct.metered(d))
    st.acct.refund({&c, 1}, d);
  audit_object(self, *e, st.devices[d].info.name, "evicted: " + why);
  ++st.counters.objects.evicted;
}

// An answer that came after its device was lost (and what it asked was
// failed): a descriptor in it is closed; other answers are dropped.
void discard_late(share_handle& h) {
  if (h.fd >= 0)
    ::close(h.fd);
}
template <class T> void discard_late(T&) {}

// Asks device `d`'s actor `xs` and runs `ok` with its answer (an `R`) or
// `fail` with its error, exactly one of them once. A device lost meanwhile
// fails what it was asked at once with device_lost (fail_asks): the answer
// of a device in a host process that was killed or hung never comes. The
// two are kept in the device's slot, not in CAF's handler for the answer:
// that handler stays in the balancer as long as no answer comes, and what
// it held (a response promise holds the balancer) would keep the balancer
// alive forever.
template <class R, class Ok, class Fail, class... Ts>
void ask_device(self_ptr self, size_t d, Ok ok, Fail fail, Ts... xs) {
  auto& st = self->state;
  auto key = ++st.next_ask;
  auto& a = st.devices[d].asks[key];
  a.fail = std::move(fail);
  a.ok = std::make_shared<std::function<void(R&)>>(std::move(ok));
  // The ask, once taken from the slot (none: it was failed already).
  auto take = [self, d, key]() -> std::optional<balancer_state::ask> {
    auto& asks = self->state.devices[d].asks;
    auto i = asks.find(key);
    if (i == asks.end())
      return std::nullopt;
    auto out = std::move(i->second);
    asks.erase(i);
    return out;
  };
  self->request(st.devices[d].handle, caf::infinite, std::move(xs)...)
      .then(
          [=](R& x) {
            if (auto a = take())
              (*std::static_pointer_cast<std::function<void(R&)>>(a->ok))(x);
            else
              discard_late(x);
          },
          [=](caf::error& err) {
            // The actor is gone: the supervisor's word on the device
            // follows, and device_left fails the question then as
            // device_lost (a get reads again), after the items moved.
            if (err == caf::sec::request_receiver_down &&
                self->state.devices[d].handle)
              return;
            if (auto a = take())
              a->fail(err);
          });
}

// Device `d` was lost, or the runtime stops: what it was asked fails now,
// with `err`.
void fail_asks(self_ptr self, size_t d, const caf::error& err) {
  auto asks = std::move(self->state.devices[d].asks);
  self->state.devices[d].asks.clear();
  for (auto& [key, a] : asks) {
    auto e = err;
    a.fail(e);
  }
}

// Reads the only copy of object `id` on device `d` back to host memory, then
// evicts it there (unless an item placed there reads it by then). What
// waits for room runs again when the spill ends.
void spill_copy(self_ptr self, uint64_t id, size_t d, const std::string& why) {
  auto& st = self->state;
  auto& h = st.devices[d].handle;
  if (!h || !st.spilling.insert(id).second)
    return;
  auto done = [self] {
    auto& st = self->state;
    auto waiting = std::move(st.after_spill);
    st.after_spill = {};
    for (auto& f : waiting)
      f();
    wake(self);
  };
  ask_device<host_buffer>(
      self, d,
      [=](host_buffer& b) {
        auto& st = self->state;
        stamp(st);
        st.spilling.erase(id);
        if (auto* e = st.objects.find(id)) {
          st.objects.set_host(id, std::move(b));
          drop_lineage(self, id);
          ++st.counters.objects.spilled;
          audit_object(self, *e, st.devices[d].info.name,
                       "spilled to host memory");
          if (e->readers.count(uint32_t(d)) == 0 &&
              e->attached.count(uint32_t(d)) == 0)
            evict_copy(self, id, d, why);
        }
        done();
      },
      [=](caf::error&) {
        // The device left meanwhile: its copies went with it.
        self->state.spilling.erase(id);
        done();
      },
      read_atom::value, id);
}

// What make_room achieved.
enum class room {
  /// `cs` fits now.
  made,
  /// Spills are under way that will make room: try again when they end.
  coming,
  /// Evicting every copy it may would not make room: nothing was evicted.
  none,
};

// Makes room for `cs` on device `d` by evicting copies of objects that no
// item there reads (of the charges' tenant when its quota is the limit, of
// any tenant when the device is), least recently used first. A copy with
// another copy elsewhere (the host's or a device's) is dropped at once; the
// only copy of an object is spilled to host memory first. `why` is the
// first refusal when it returns none.
room make_room(self_ptr self, balancer::charges cs, size_t d,
               const std::string& for_what, caf::error& why) {
  auto& st = self->state;
  why = st.acct.check(cs, d);
  if (!why)
    return room::made;
  if (st.objects.size() == 0 || cs.empty() || cs[0].tenant < 0)
    return room::none;
  std::string tenant;
  if (code_of(why) == errc::over_memory_quota)
    tenant = st.acct.book().policy(cs[0].tenant).tenant;
  auto all = st.objects.evictable(d, UINT64_MAX, tenant, &object_block_bytes);
  std::vector<balancer::charge> gone;
  for (auto& ev : all)
    if (auto* e = st.objects.find(ev.id))
      gone.push_back(object_charge(st, *e));
  if (gone.empty())
    return st.spilling.empty() ? room::none : room::coming;
  // Nothing is evicted unless evicting everything it may would make room.
  st.acct.refund(gone, d);
  bool would_fit = !st.acct.check(cs, d);
  st.acct.charge_to(gone, d);
  if (!would_fit)
    return room::none;
  for (auto& ev : all) {
    if (ev.spill)
      continue;
    evict_copy(self, ev.id, d, "to make room for " + for_what);
    if (!st.acct.check(cs, d))
      return room::made;
  }
  // Dropping was not enough: the only copies go to host memory first. The
  // charges they free are counted as they are started.
  std::vector<balancer::charge> pending;
  for (auto& ev : all) {
    if (!ev.spill)
      continue;
    if (auto* e = st.objects.find(ev.id))
      pending.push_back(object_charge(st, *e));
    spill_copy(self, ev.id, d, "to make room for " + for_what);
    st.acct.refund(pending, d);
    bool enough = !st.acct.check(cs, d);
    st.acct.charge_to(pending, d);
    if (enough)
      break;
  }
  return room::coming;
}

// An item device memory refuses everywhere: copies of objects that nothing
// reads are evicted from the first device of its grant where that makes
// room for it (made), or spilled there first (coming); none when evicting
// would not make room anywhere.
room evict_for(self_ptr self, uint64_t ticket) {
  auto& st = self->state;
  if (st.objects.size() == 0)
    return room::none;
  auto& r = st.outstanding.at(ticket);
  if (!r.members.empty())
    return room::none;
  for (size_t d = 0; d < st.devices.size(); ++d) {
    if (!st.acct.metered(d) || (r.device_mask >> d & 1) == 0 ||
        (r.memory_refused >> d & 1) != 0 || !takes_work(st.devices[d].status))
      continue;
    balancer::charge c{r.tenant, bytes_on(st, r, d)};
    // Only where the books refuse it: elsewhere placement left the device
    // out for another reason (its circuit), which no eviction changes. So
    // `made` below always means copies were evicted, and placing again
    // ends.
    if (!st.acct.check({&c, 1}, d))
      continue;
    caf::error why;
    // Its own objects' copies there stay: it would only move them back.
    for (auto id : r.objects)
      st.objects.pin(id, d);
    auto got =
        make_room(self, {&c, 1}, d, "item " + std::to_string(r.item.id), why);
    for (auto id : r.objects)
      st.objects.unpin(id, d);
    if (got != room::none)
      return got;
  }
  return room::none;
}

// `r` ends: it lets go of its objects (freed when nothing else holds them).
void let_go_objects(self_ptr self, balancer_state::record& r) {
  auto ids = std::move(r.objects);
  r.objects = {};
  for (auto id : ids)
    if (self->state.objects.unpin(id, unplaced_key))
      free_object(self, id, "its last holder, an item, ended");
}

void unplace(self_ptr self, balancer_state::record& r) {
  auto& st = self->state;
  if (r.device < 0)
    return;
  auto index = size_t(r.device);
  move_object_holds(st, r, index, unplaced_key);
  auto& s = st.devices[index];
  touch(st, index);
  s.backlog_ns = std::max(0.0, s.backlog_ns - r.predicted_ns);
  s.placed -= std::min(s.placed, 1u);
  s.placed_units = std::max(0.0, s.placed_units - r.cost_units);
  with_charges(st, r, [&](balancer::charges cs) { st.acct.refund(cs, index); });
  r.sent = false;
  if (r.probe) {
    auto p = st.probing.find(cell_key(index, r));
    if (p != st.probing.end() && --p->second == 0)
      st.probing.erase(p);
    r.probe = false;
  }
  r.device = -1;
}

// Takes an item out of its ready queue's accounting (the ticket itself is
// skipped when the queue gets to it).
void unready(balancer_state& st, balancer_state::record& r) {
  if (!r.ready)
    return;
  r.ready = false;
  st.ready.left(r.cost_units);
}

void end_failed(self_ptr self, uint64_t ticket, caf::error err);
void place_or_queue(self_ptr self, uint64_t ticket, std::string why,
                    bool front);
uint64_t item_mask(balancer_state& st, const balancer_state::record& r,
                   bool with_objects = true);
bool objects_within(balancer_state& st, const balancer_state::record& r);

// -- objects made again -------------------------------------------------------

// What waited for object `id` to be made again (gets) goes on, whether it
// was or not.
void run_after_rebuild(self_ptr self, uint64_t id) {
  auto& st = self->state;
  auto i = st.after_rebuild.find(id);
  if (i == st.after_rebuild.end())
    return;
  auto waiting = std::move(i->second);
  st.after_rebuild.erase(i);
  for (auto& f : waiting)
    f();
}

// Object `id` cannot be made again: it is lost, and the items that waited
// for it end with object_lost.
void rebuild_failed(self_ptr self, uint64_t id, const std::string& why) {
  auto& st = self->state;
  if (auto* e = st.objects.find(id)) {
    e->rebuilding = false;
    if (st.stopping) {
      audit_object(self, *e, "", "not made again: the runtime stopped");
    } else {
      ++st.counters.objects.lost;
      audit_object(self, *e, "", "lost: " + why);
    }
  }
  drop_lineage(self, id);
  // Objects made from it can no longer be made again either.
  drop_lineages_reading(self, id);
  run_after_rebuild(self, id);
  std::vector<uint64_t> waiting;
  if (auto w = st.rebuild_waiting.find(id); w != st.rebuild_waiting.end()) {
    waiting = std::move(w->second);
    st.rebuild_waiting.erase(w);
  }
  // Other items reading it (queued before the loss, not yet looked at
  // again) end too.
  for (auto& [ticket, r] : st.outstanding)
    if (r.waiting_rebuild != id && r.batch == 0 && r.gang_parent == 0 &&
        std::find(r.objects.begin(), r.objects.end(), id) != r.objects.end())
      waiting.push_back(ticket);
  // At stop, the re-run ended because the runtime stopped: so do they.
  for (auto ticket : waiting)
    if (auto i = st.outstanding.find(ticket);
        i != st.outstanding.end() &&
        (i->second.waiting_rebuild == id || i->second.waiting_rebuild == 0))
      end_failed(self, ticket,
                 st.stopping
                     ? make_error(errc::shutting_down,
                                  "the runtime stopped while object " +
                                      std::to_string(id) +
                                      " was being made again")
                     : make_error(errc::object_lost,
                                  "object " + std::to_string(id) +
                                      " was lost with its device, and " + why));
}

// Object `id` was made again: the items that waited for it are placed,
// on the devices that hold it now.
void rebuild_done(self_ptr self, uint64_t id) {
  auto& st = self->state;
  if (auto* e = st.objects.find(id))
    e->rebuilding = false;
  run_after_rebuild(self, id);
  auto w = st.rebuild_waiting.find(id);
  if (w == st.rebuild_waiting.end())
    return;
  auto waiting = std::move(w->second);
  st.rebuild_waiting.erase(w);
  for (auto ticket : waiting) {
    auto i = st.outstanding.find(ticket);
    if (i == st.outstanding.end() || i->second.waiting_rebuild != id)
      continue;
    auto& r = i->second;
    r.waiting_rebuild = 0;
    r.device_mask = item_mask(st, r);
    if (r.device_mask == 0)
      end_failed(self, ticket,
                 make_error(errc::no_device_available,
                            "object " + std::to_string(id) +
                                " was made again on devices outside its "
                                "tenant's grant"));
    else
      place_or_queue(self, ticket,
                     "waited for object " + std::to_string(id) +
                         " to be made again",
                     true);
  }
}

// True (and `ticket` waits) when an object its item reads is being made
// again.
bool wait_for_rebuild(balancer_state& st, uint64_t ticket,
                      balancer_state::record& r) {
  for (auto id : r.objects)
    if (auto* e = st.objects.find(id); e != nullptr && e->rebuilding) {
      r.waiting_rebuild = id;
      r.device = -1;
      // What it waited for before counts no more: its waits start again.
      r.waiting_memory = false;
      r.deadline = {};
      r.park_deadline = {};
      st.rebuild_waiting[id].push_back(ticket);
      return true;
    }
  return false;
}

void spill_copy(self_ptr self, uint64_t id, size_t d, const std::string& why);

// The objects `r` reads have no device in common (made again on different
// devices after a loss, say): those not on the device of its grant that
// holds most of their bytes are read back to host memory (spilled), after
// which it may run there. True while such reads are under way.
bool gather_objects(self_ptr self, const balancer_state::record& r,
                    uint64_t base) {
  auto& st = self->state;
  int best = -1;
  uint64_t most = 0;
  for (size_t d = 0; d < st.devices.size(); ++d) {
    if (!(base & objects::device_bit(d)) || !st.devices[d].handle)
      continue;
    auto held = st.objects.resident_bytes(r.objects, d);
    if (best < 0 || held > most) {
      best = int(d);
      most = held;
    }
  }
  if (best < 0)
    return false;
  bool under_way = false;
  for (auto id : r.objects) {
    auto* e = st.objects.find(id);
    if (e == nullptr || e->has_host ||
        objects::has_device(e->replicas, size_t(best)))
      continue;
    if (st.spilling.count(id) != 0) {
      under_way = true;
      continue;
    }
    for (size_t d = 0; d < st.devices.size(); ++d)
      if (objects::has_device(e->replicas, d) && st.devices[d].handle) {
        spill_copy(self, id, d,
                   "item " + std::to_string(r.item.id) +
                       " reads it with objects on " +
                       st.devices[size_t(best)].info.name);
        under_way = true;
        break;
      }
  }
  return under_way;
}

// A gang's devices are free for other gangs again; slices still out are
// dropped (their late answers count as duplicates).
void release_gang(self_ptr self, uint64_t ticket) {
  auto& st = self->state;
  // Erasing the slices leaves the reference to their gang valid.
  auto& g = st.outstanding.at(ticket);
  for (auto slice : g.slices)
    if (auto i = st.outstanding.find(slice); i != st.outstanding.end()) {
      auto& r = i->second;
      if (r.device >= 0)
        st.devices[size_t(r.device)].breaker.abandoned();
      unplace(self, r);
      st.outstanding.erase(i);
    }
  g.slices.clear();
  g.parts.clear();
  g.parts_done = 0;
  for (auto& s : st.devices)
    if (s.gang == ticket)
      s.gang = 0;
}

// Ends an admitted item with a definitive error. A merged launch ends each
// of its members; a gang slice ends its gang.
void end_failed(self_ptr self, uint64_t ticket, caf::error err) {
  auto& st = self->state;
  auto i = st.outstanding.find(ticket);
  if (i == st.outstanding.end())
    return;
  auto& r = i->second;
  if (r.gang_parent != 0)
    return end_failed(self, r.gang_parent, std::move(err));
  if (!r.members.empty()) {
    auto members = r.members;
    if (r.device >= 0)
      st.devices[size_t(r.device)].breaker.abandoned();
    unplace(self, r);
    unready(st, r);
    st.outstanding.erase(i);
    for (auto m : members)
      if (auto j = st.outstanding.find(m); j != st.outstanding.end()) {
        j->second.batch = 0;
        end_failed(self, m, err);
      }
    return;
  }
  if (!r.slices.empty())
    release_gang(self, ticket);
  auto& rec = i->second;
  // A re-run that failed is no client's item: its object is lost after
  // all (below).
  auto rebuild_of = rec.rebuild_of;
  if (rebuild_of == 0) {
    st.by_client.erase(key_of(rec.sink, rec.item.key()));
    auto device =
        rec.device >= 0 ? st.devices[size_t(rec.device)].info.name : "";
    audit(self, audit_kind::failed, rec.item, device, describe(err));
    note_ended(st, rec.job, rec.item, rec.tenant, rec.sink, err, rec.device,
               rec.submitted, rec.attempts);
  }
  // A half-open circuit's probe that ends here frees its slot.
  if (rec.device >= 0)
    st.devices[size_t(rec.device)].breaker.abandoned();
  // Quota first: a client that resubmits on hearing of the end must find
  // it already released.
  unplace(self, rec);
  unready(st, rec);
  let_go_objects(self, rec);
  st.acct.book().end(rec.tenant);
  if (rebuild_of != 0) {
    st.outstanding.erase(i);
    rebuild_failed(self, rebuild_of,
                   "re-running the item that made it failed: " + describe(err));
    wake(self);
    return;
  }
  tell_end(self, rec.sink, {rec.item.key(), std::move(err), {}});
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

// Late binding: a device takes more items while it holds fewer than its send
// window, or (short items) less than this much predicted work per stream,
// up to `max_placed`: enough that short items still travel many to a
// message, few enough that long ones are bound late.
constexpr double room_horizon_ns = 1e6;
constexpr uint32_t max_placed = 2048;

bool has_room(const balancer_state::slot& s) {
  auto streams = std::max(1u, s.info.streams);
  if (s.placed < send_window(s))
    return true;
  // Only once it has measured runs: cold guesses may be far too short.
  return s.units_done > 0 && s.placed < max_placed &&
         s.backlog_ns < streams * room_horizon_ns;
}

// Sums the drain horizon's terms anew (they drift as they are updated).
void resum_drain(balancer_state& st) {
  st.drain_units = 0;
  st.drain_rate = 0;
  for (auto& s : st.devices) {
    st.drain_units += s.drain_units;
    st.drain_rate += s.drain_rate;
  }
  st.drain_updates = 0;
}

// Brings the fleet index and the masks up to date with the devices touched.
void sync_fleet(balancer_state& st) {
  auto dirty = std::exchange(st.fleet_dirty, 0);
  if (dirty == 0)
    return;
  while (dirty != 0) {
    auto d = size_t(__builtin_ctzll(dirty));
    dirty &= dirty - 1;
    auto& s = st.devices[d];
    auto bit = uint64_t{1} << d;
    bool works = takes_work(s.status);
    balancer::fleet_index::device_view v;
    v.working = works && s.breaker.closed();
    v.room = has_room(s);
    v.wait_ns = s.backlog_ns / std::max(1u, s.info.streams);
    v.penalty =
        s.status == device_status::degraded ? st.cfg.degraded_penalty : 1.0;
    if (crossing_fresh(st, s)) {
      v.crossing_ns = s.crossing.fixed_ns();
      v.crossing_ns_per_byte = s.crossing.ns_per_byte();
    }
    st.crossing_in_index = v.crossing_ns > 0 || v.crossing_ns_per_byte > 0
                               ? st.crossing_in_index | bit
                               : st.crossing_in_index & ~bit;
    st.fleet.update_device(d, v);
    st.takes_room =
        works && v.room ? st.takes_room | bit : st.takes_room & ~bit;
    st.circuit_not_closed = works && !s.breaker.closed()
                                ? st.circuit_not_closed | bit
                                : st.circuit_not_closed & ~bit;
    double ns_per_unit = s.units_done > 0 ? s.ns_done / s.units_done
                                          : 1.0 / std::max(s.info.speed, 1e-3);
    st.drain_units -= s.drain_units;
    st.drain_rate -= s.drain_rate;
    s.drain_units = works ? s.placed_units : 0;
    s.drain_rate = works ? std::max(1u, s.info.streams) / ns_per_unit : 0;
    st.drain_units += s.drain_units;
    st.drain_rate += s.drain_rate;
    ++st.drain_updates;
  }
  if (st.drain_updates >= 65536)
    resum_drain(st);
}

// Time until everything placed and waiting would be done if the whole fleet
// worked on it: while it is longer than an item's run on a device with room,
// that device takes the item even if another would finish it sooner.
double drain_ns(balancer_state& st) {
  sync_fleet(st);
  auto units = std::max(0.0, st.ready.units() + st.drain_units);
  return st.drain_rate > 0 ? units / st.drain_rate : 0;
}

// The fleet index's cell of `k` at `cls`; made with every device's rate
// the first time.
size_t fleet_cell(balancer_state& st, kernels::kernel_id k, uint8_t cls) {
  if (st.fleet.has_cell(k, cls))
    return st.fleet.cell(k, cls);
  auto c = st.fleet.cell(k, cls);
  for (size_t d = 0; d < st.devices.size(); ++d) {
    bool measured = false;
    auto rate = rate_of(st, d, k, cls, &measured);
    st.fleet.set_rate(c, d, rate, measured);
  }
  return c;
}

// A run of `k` at `cls` was measured on device `index`: its rate in the
// fleet index follows, and so do the estimates of devices that have not run
// that cell yet (they are scaled from the best measured one).
void note_rate(balancer_state& st, size_t index, kernels::kernel_id k,
               uint8_t cls) {
  if (!st.fleet.has_cell(k, cls))
    return;
  auto c = st.fleet.cell(k, cls);
  bool first = (st.fleet.unexplored(c) >> index) & 1;
  st.fleet.set_rate(c, index, st.model.rate(index, k, cls), true);
  // A first measurement there also moves the others' estimates (later ones
  // only nudge them: left until those devices run the cell themselves).
  if (!first)
    return;
  for (auto u = st.fleet.unexplored(c); u != 0; u &= u - 1) {
    auto d = size_t(__builtin_ctzll(u));
    st.fleet.set_rate(c, d, rate_of(st, d, k, cls), false);
  }
}

// The job a trace names for `r`: its own; a merged launch's first member's;
// a gang slice's gang's (0 for a rebuild).
uint64_t trace_job(const balancer_state& st, const balancer_state::record& r) {
  if (!r.members.empty())
    if (auto m = st.outstanding.find(r.members.front());
        m != st.outstanding.end())
      return m->second.job;
  if (r.gang_parent != 0)
    if (auto g = st.outstanding.find(r.gang_parent); g != st.outstanding.end())
      return g->second.job;
  return r.job;
}

// Traces the wait of the item of `r` (of each member of a merged launch;
// a gang's for its slice, on each of its devices), which goes to device
// `index` at `sent_ns`.
void trace_sent(balancer_state& st, const balancer_state::record& r,
                size_t index, int64_t sent_ns) {
  auto wait = [&](const balancer_state::record& x) {
    st.trace->add({.begin_ns = steady_ns(x.submitted),
                   .end_ns = sent_ns,
                   .job = x.job,
                   .count = r.attempts,
                   .device = int32_t(index),
                   .tenant = x.tenant,
                   .kind = trace_kind::wait,
                   .kernel = uint8_t(x.item.kernel)});
  };
  if (r.members.empty() && r.gang_parent == 0)
    return wait(r);
  if (r.gang_parent != 0) {
    if (auto g = st.outstanding.find(r.gang_parent); g != st.outstanding.end())
      wait(g->second);
    return;
  }
  for (auto m : r.members)
    if (auto i = st.outstanding.find(m); i != st.outstanding.end())
      wait(i->second);
}

// Sends device `index` the queued tickets still placed on it, as one message.
void send_queued(self_ptr self, size_t index) {
  auto& st = self->state;
  auto& s = st.devices[index];
  if (s.queued.empty() || s.sent >= send_window(s))
    return;
  auto n = std::min(s.queued.size(), max_run_batch);
  std::vector<run_request> batch;
  std::vector<std::pair<uint64_t, caf::error>> lost;
  // Bytes of kernel code sent ahead of the batch: they cross first.
  uint64_t code_bytes = 0;
  batch.reserve(n);
  auto sent_ns = steady_ns(st.now);
  for (size_t i = 0; i < n; ++i) {
    auto ticket = s.queued[i].ticket;
    auto r = st.outstanding.find(ticket);
    // Skip tickets that ended or moved on since they were queued.
    if (r == st.outstanding.end() || r->second.device != int32_t(index))
      continue;
    if (r->second.objects.empty() && r->second.keep_as == 0) {
      batch.push_back({ticket, r->second.item, 0});
    } else {
      // Objects this device holds stay names; the others go as host copies.
      auto item = item_for(st.objects, r->second.item, index);
      if (!item) {
        lost.emplace_back(ticket, item.error());
        continue;
      }
      batch.push_back({ticket, std::move(*item), r->second.keep_as});
    }
    batch.back().time_copies = st.trace != nullptr;
    // A kernel of this process in a host process: its code goes first (a
    // message to the same actor arrives before the batch), its sizes with
    // the item. A rule that throws ends the item.
    if (s.info.host_process && balancer::has_node_only(batch.back().item)) {
      auto sizes = balancer::launch_sizes(s.info, batch.back().item);
      if (!sizes) {
        lost.emplace_back(ticket, std::move(sizes.error()));
        batch.pop_back();
        continue;
      }
      batch.back().sizes = std::move(*sizes);
      auto code =
          balancer::code_to_send(s.info, batch.back().item, s.code_sent);
      for (auto& c : code)
        code_bytes += c.image.size();
      if (!code.empty())
        self->send(s.handle, code_atom::value, std::move(code));
    }
    r->second.sent = true;
    if (st.trace)
      trace_sent(st, r->second, index, sent_ns);
  }
  s.queued.erase(s.queued.begin(), s.queued.begin() + std::ptrdiff_t(n));
  if (!batch.empty() && s.info.elsewhere()) {
    // Its crossing is measured from now. The batch crosses as one message,
    // so each of its items waits for all of its bytes (carried_bytes: an
    // object the device holds crosses as its name, another as its host
    // copy). A first message makes its measured crossing count again.
    if (s.sent == 0)
      touch(st, index);
    auto now = clock::now();
    uint64_t bytes = code_bytes;
    for (auto& req : batch)
      bytes += carried_bytes(st, index, st.outstanding.at(req.ticket));
    for (auto& req : batch) {
      auto& r = st.outstanding.at(req.ticket);
      r.sent_at = now;
      r.sent_bytes = bytes;
    }
  }
  if (!batch.empty()) {
    s.sent += uint32_t(batch.size());
    self->send(s.handle, run_atom::value, std::move(batch));
    trace_placed(st, index);
  }
  for (auto& [ticket, err] : lost)
    end_failed(self, ticket, std::move(err));
}

// Stores `data` on device `d` as a copy of object `id`, charged there to
// its tenant (the caller checked that it fits) and marked as being stored
// until the device answers. `stored(e)` runs once the copy is there;
// `not_stored(err)` when it is not: the device refused it or left, or the
// object went meanwhile. The charge and the mark are undone then, and a
// copy stored after all is dropped. An answer from an earlier actor of the
// device (it left and came back meanwhile) is about memory that went with
// it.
template <class Stored, class NotStored>
void store_copy(self_ptr self, uint64_t id, size_t d, host_buffer data,
                Stored stored, NotStored not_stored) {
  auto& st = self->state;
  auto* e = st.objects.find(id);
  auto c = object_charge(st, *e);
  st.acct.charge_to({&c, 1}, d);
  st.objects.storing(id, d);
  auto generation = st.devices[d].generation;
  auto tenant = e->tenant;
  ask_device<uint64_t>(
      self, d,
      [=](uint64_t) mutable {
        auto& st = self->state;
        stamp(st);
        auto& s = st.devices[d];
        auto* e = st.objects.find(id);
        if (s.generation != generation || e == nullptr ||
            !objects::has_device(e->storing, d)) {
          // Freed, or its device left, meanwhile (the charge went
          // with it).
          if (s.generation == generation && s.handle)
            self->send(s.handle, drop_atom::value, id);
          not_stored(
              make_error(errc::device_lost,
                         s.info.name + " left while the object was stored"));
          return;
        }
        st.objects.stored(id, d);
        ++st.counters.objects.copies_stored;
        stored(*e);
      },
      [=](caf::error& err) mutable {
        auto& st = self->state;
        stamp(st);
        auto* e = st.objects.find(id);
        if (st.devices[d].generation == generation && e != nullptr &&
            objects::has_device(e->storing, d)) {
          st.objects.unstored(id, d);
          st.acct.refund({&c, 1}, d);
        }
        not_stored(std::move(err));
      },
      store_atom::value, id, std::move(data), tenant);
}

// How long after a failed copy of an object the next is tried.
constexpr auto copy_backoff = std::chrono::milliseconds(100);

// True when a copy of object `e` fits device `d` for its tenant without
// evicting anything, and may be stored there now (the callers check that
// no other copy of it is under way).
bool copy_fits(balancer_state& st, const objects::object_entry& e, size_t d) {
  if (!st.devices[d].handle || !st.acct.metered(d) || e.rebuilding ||
      st.spilling.count(e.id) != 0 ||
      objects::has_device(e.replicas | e.storing, d))
    return false;
  // Another process writing it in place keeps it to one copy.
  for (auto* a : st.shares.attachments_of(e.id))
    if (a->write)
      return false;
  auto c = object_charge(st, e);
  return c.tenant >= 0 && !st.acct.check({&c, 1}, d);
}

// Stores a copy of object `id` on device `d` from its host copy (a
// replica, or a re-load after an eviction), when it fits there for its
// tenant without evicting anything. Items placed there after the store read
// it in place. Other copies remain, so it is dropped first for room.
void replicate(self_ptr self, uint64_t id, size_t d) {
  auto& st = self->state;
  auto* e = st.objects.find(id);
  if (e == nullptr || !e->has_host || st.copying.count(id) != 0 ||
      !copy_fits(st, *e, d))
    return;
  bool reload = e->replicas == 0;
  auto where = st.devices[d].info.name;
  store_copy(
      self, id, d, e->host,
      [=](const objects::object_entry& e) {
        audit_object(self, e, where,
                     reload ? "loaded again from its host copy: items read "
                              "it there"
                            : "replicated from its host copy: items read it "
                              "there while the other copies' devices are "
                              "busy");
      },
      [](const caf::error&) {});
}

// Copies object `id`, which has no host copy, from device `from` to device
// `to`: read back to host memory there, then stored (a replica where items
// wait less). The copy is given up when the object goes, is written in
// place or starts to be made again meanwhile, or either device leaves
// (device_left forgets copies from a device that left).
void copy_object(self_ptr self, uint64_t id, size_t from, size_t to) {
  auto& st = self->state;
  auto* e = st.objects.find(id);
  if (e == nullptr || e->has_host || !objects::has_device(e->replicas, from) ||
      !st.devices[from].handle || st.copying.count(id) != 0 ||
      !copy_fits(st, *e, to))
    return;
  auto seq = ++st.next_copy;
  st.copying.insert_or_assign(id, balancer_state::device_copy{from, to, seq});
  // Whether this copy is still under way (device_left and a read-write
  // attach end it), and its end: `failed` holds the object's next copy back
  // for a while, so that a refusal is not retried at every placement.
  auto ours = [self, id, seq] {
    auto& copying = self->state.copying;
    auto i = copying.find(id);
    return i != copying.end() && i->second.seq == seq;
  };
  auto forget = [self, id, ours](bool failed) {
    auto& st = self->state;
    if (!ours())
      return;
    st.copying.erase(id);
    if (failed)
      st.copy_after.insert_or_assign(id, clock::now() + copy_backoff);
  };
  auto generation = st.devices[from].generation;
  ask_device<host_buffer>(
      self, from,
      [=](host_buffer& data) {
        auto& st = self->state;
        stamp(st);
        auto* e = st.objects.find(id);
        // Charged there only now: what changed meanwhile is weighed
        // again.
        if (!ours() || e == nullptr ||
            st.devices[from].generation != generation || e->has_host ||
            !objects::has_device(e->replicas, from) || !copy_fits(st, *e, to)) {
          forget(false);
          return;
        }
        auto source = st.devices[from].info.name;
        auto where = st.devices[to].info.name;
        store_copy(
            self, id, to, std::move(data),
            [=](const objects::object_entry& e) {
              forget(false);
              self->state.copy_after.erase(id);
              audit_object(self, e, where,
                           "copied from " + source +
                               ", which held its only copy: items "
                               "waited longer there than the copy "
                               "takes");
              wake(self);
            },
            [=](const caf::error&) { forget(true); });
      },
      [=](caf::error&) {
        stamp(self->state);
        forget(true);
      },
      read_atom::value, id);
}

// `r`, just placed on device `d`, reads there from their host copies the
// objects `d` holds no copy of: the second such item stores a copy there.
void note_misses(self_ptr self, const balancer_state::record& r, size_t d) {
  auto& st = self->state;
  if (r.objects.empty() || !st.acct.metered(d))
    return;
  for (auto id : r.objects) {
    auto* e = st.objects.find(id);
    if (e == nullptr || !e->has_host ||
        objects::has_device(e->replicas | e->storing, d))
      continue;
    if (objects::has_device(e->missed, d)) {
      e->missed &= ~objects::device_bit(d);
      replicate(self, id, d);
    } else {
      e->missed |= objects::device_bit(d);
    }
  }
}

// How a waiting ticket ranks among its tenant's (order_within_tenants): the
// balancer's own records and tickets that left keep their place.
balancer::waiting_rank rank_of(const balancer_state& st, uint64_t ticket) {
  auto i = st.outstanding.find(ticket);
  if (i == st.outstanding.end() || i->second.job == 0)
    return {};
  return {i->second.tenant, i->second.item.priority};
}

// Puts a placed item in its device's queue here, ahead of its tenant's
// items of lower priority there (insert_within_tenant): the tenant's places
// in the queue stay its own, so other tenants wait no longer.
void queue_on(balancer_state& st, balancer_state::slot& s, uint64_t ticket) {
  balancer::ranked_ticket t{ticket, rank_of(st, ticket)};
  // Nothing here can be of lower priority (the common case: all alike).
  if (s.queued.empty() || t.rank.tenant < 0 ||
      t.rank.priority <= s.queued_low) {
    s.queued_low = s.queued.empty() ? t.rank.priority
                                    : std::min(s.queued_low, t.rank.priority);
    s.queued.push_back(t);
    return;
  }
  // Tickets that moved on since keep their ranks: they are skipped when
  // the queue is sent.
  balancer::insert_within_tenant(s.queued, t);
}

// Hands a placed ticket to its device: at once while the device has room in
// its window, otherwise with the next batch.
void dispatch(self_ptr self, size_t index, uint64_t ticket) {
  auto& st = self->state;
  queue_on(st, st.devices[index], ticket);
  send_queued(self, index);
}

// Holds an admitted item until device memory frees up (or its time is up).
void wait_for_memory(self_ptr self, uint64_t ticket, const caf::error& why) {
  auto& st = self->state;
  auto& r = st.outstanding.at(ticket);
  if (!r.waiting_memory) {
    r.waiting_memory = true;
    r.deadline =
        clock::now() + std::chrono::milliseconds(
                           st.acct.book().policy(r.tenant).queue_timeout_ms);
    ++st.counters.admission.memory_waits;
    audit(self, audit_kind::placed, r.item, "",
          "waiting for device memory: " + describe(why));
  }
  st.memory_waiting.push_back(ticket);
  schedule_retry(self);
}

void place_or_queue(self_ptr self, uint64_t ticket, std::string why,
                    bool front);
void place_again(self_ptr self, std::vector<uint64_t> tickets,
                 const std::string& why);

// Undoes a merged launch that is not placed: its members go on their own.
void dissolve(self_ptr self, uint64_t ticket) {
  auto& st = self->state;
  auto i = st.outstanding.find(ticket);
  auto members = std::move(i->second.members);
  auto why = i->second.why;
  unready(st, i->second);
  st.outstanding.erase(i);
  for (auto m : members)
    if (auto j = st.outstanding.find(m); j != st.outstanding.end())
      j->second.batch = 0;
  place_again(self, std::move(members), why);
}

// What became of an item `place` looked at.
enum class placement {
  /// Bound to a device and on its way there.
  placed,
  /// Every device that could take it is busy (or a busier one would finish
  /// it sooner): it stays in its ready queue.
  later,
  /// Parked, waiting for memory, or ended: out of the ready queue.
  elsewhere,
};

// Binds `r` to device `index`: its prediction, backlog, memory charge and
// inputs there (what `unplace` undoes).
void bind(balancer_state& st, balancer_state::record& r, size_t index) {
  auto& s = st.devices[index];
  touch(st, index);
  r.device = int32_t(index);
  r.waiting_memory = false;
  r.park_deadline = {};
  r.predicted_ns = predict_ns(st, index, r);
  send_inputs(st, index, r);
  move_object_holds(st, r, unplaced_key, index);
  if (st.fleet.has_cell(r.item.kernel, r.cls))
    st.fleet.note_units(st.fleet.cell(r.item.kernel, r.cls), index,
                        r.device_units, double(carried_bytes(st, index, r)));
  s.backlog_ns += r.predicted_ns;
  ++s.placed;
  s.stats.max_queued = std::max<uint64_t>(s.stats.max_queued, s.placed);
  s.placed_units += r.cost_units;
  if (!s.breaker.closed())
    s.breaker.placed(clock::now());
  r.charged = bytes_on(st, r, index);
  with_charges(st, r,
               [&](balancer::charges cs) { st.acct.charge_to(cs, index); });
  ++r.attempts;
}

// Binds `r` to device `index` and sends it on; audits the placement.
void commit(self_ptr self, uint64_t ticket, size_t index, bool explore,
            bool memory_fallback, const caf::error& memory_why) {
  auto& st = self->state;
  auto& r = st.outstanding.at(ticket);
  auto& s = st.devices[index];
  bind(st, r, index);
  if (explore) {
    r.probe = true;
    ++st.probing[cell_key(index, r)];
    ++st.counters.explored;
  }
  // Each member of a merged launch is audited as placed on its own.
  auto note = [&](audit_kind kind, const std::string& detail) {
    if (r.members.empty())
      return audit(self, kind, r.item, s.info.name, detail);
    auto with = "in a merged launch of " + std::to_string(r.members.size()) +
                " items" + (detail.empty() ? "" : "; " + detail);
    for (auto m : r.members)
      if (auto i = st.outstanding.find(m); i != st.outstanding.end())
        audit(self, kind, i->second.item, s.info.name, with);
  };
  if (memory_fallback) {
    r.memory_fallback = true;
    ++st.counters.fallbacks;
    ++st.counters.fallbacks_by_reason["device_memory"];
    ++st.counters.admission.memory_fallbacks;
    note(audit_kind::fallback, "device memory: " + describe(memory_why));
  } else if (r.attempts == 1 && !explore && r.members.empty()) {
    audit_common(self, audit_kind::placed, r.item, r.tenant, int32_t(index));
  } else if (r.attempts == 1) {
    note(audit_kind::placed, explore ? "first run of its kernel and size "
                                       "here (exploring)"
                                     : "");
  } else {
    ++st.counters.retries;
    if (!is_gpu(s.info) && r.on_gpu_before) {
      ++st.counters.fallbacks;
      ++st.counters.fallbacks_by_reason[to_string(r.last_failure)];
      note(audit_kind::fallback, r.why);
    } else {
      note(audit_kind::placed, "retry: " + r.why);
    }
  }
  note_misses(self, r, index);
  dispatch(self, index, ticket);
}

// Devices holding an item's inputs that placement weighs one by one: more
// than this and holding does not single any out.
constexpr int max_weighed_holders = 8;

// Devices that hold any of `r`'s inputs.
uint64_t holders_of(const balancer_state& st, const balancer_state::record& r) {
  uint64_t out = 0;
  for (auto id : r.objects)
    if (auto* e = st.objects.find(id))
      out |= e->replicas;
  if (st.holders.empty())
    return out;
  for (auto& in : r.item.inputs)
    if (auto i = st.holders.find(in.span().data()); i != st.holders.end())
      out |= i->second;
  return out;
}

// The tenant's fallback budget kept item `ticket` off the CPU workers: the
// soonest of them, `on`, would have ended it `end_ns` after its admission.
// Counted and audited once per item. Under FALLBACK_FAIL it ends here
// (true); under FALLBACK_WAIT the caller keeps it waiting (false).
bool hold_for_budget(self_ptr self, uint64_t ticket, size_t on, double end_ns) {
  auto& st = self->state;
  auto& r = st.outstanding.at(ticket);
  auto& terms = st.acct.book().policy(r.tenant);
  bool fail = terms.on_over_budget == fallback_policy::fail;
  auto what = "predicted to end on " + st.devices[on].info.name + " " +
              std::to_string(int64_t(end_ns / 1e6)) +
              " ms after its admission, past tenant '" + r.item.tenant +
              "''s fallback budget of " +
              std::to_string(terms.fallback_budget_ms) + " ms";
  if (!std::exchange(r.budget_held, true)) {
    ++st.counters.fallback_by_tenant[r.item.tenant].held_back;
    audit(self, audit_kind::fallback, r.item, "",
          "held back: " + what +
              (fail ? "; it fails (FALLBACK_FAIL)"
                    : "; it waits for a GPU (FALLBACK_WAIT)"));
  }
  if (!fail)
    return false;
  end_failed(self, ticket,
             make_error(errc::over_fallback_budget,
                        what + " (on_over_budget: FALLBACK_FAIL)" +
                            (r.why.empty() ? "" : "; last failure: " + r.why)));
  return true;
}

// Earliest-completion placement without a scan of the fleet, for the
// common case: the fleet index names the device where a typical item of
// `r`'s cell would finish first, overall and among devices with room; the
// item's own completion is worked out on those two only. Returns nothing
// when the case is not common (another policy, an item that failed or was
// refused somewhere, a grant that leaves out working devices, a circuit
// that is not closed, device memory that does not fit on the devices it
// looked at): the full scan in `place` decides then.
std::optional<placement> place_quickly(self_ptr self, uint64_t ticket,
                                       balancer_state::record& r, bool strict) {
  auto& st = self->state;
  if (st.cfg.policy != placement_policy::earliest_completion ||
      r.failed_on != 0 || r.memory_refused != 0)
    return std::nullopt;
  // A crossing that grew old leaves the index's keys.
  for (auto e = st.crossing_in_index; e != 0; e &= e - 1)
    if (auto d = size_t(__builtin_ctzll(e)); !crossing_fresh(st, st.devices[d]))
      touch(st, d);
  sync_fleet(st);
  auto mask = r.device_mask;
  auto working = st.fleet.working();
  if ((working & mask) == 0 || (working & ~mask) != 0 ||
      (st.circuit_not_closed & mask) != 0)
    return std::nullopt;
  auto fits = [&](size_t d) {
    return !st.acct.metered(d) || !memory_check(st, r, d);
  };
  auto cell = fleet_cell(st, r.item.kernel, r.cls);
  // A device that never ran this cell gets one run to measure it.
  for (auto e = st.fleet.unexplored(cell) & st.fleet.room() & mask; e != 0;
       e &= e - 1) {
    auto d = size_t(__builtin_ctzll(e));
    if (st.probing.count(cell_key(d, r)) > 0)
      continue;
    if (!fits(d))
      return std::nullopt;
    commit(self, ticket, d, true, false, {});
    return placement::placed;
  }
  auto best = st.fleet.best(cell);
  if (best.any < 0)
    return std::nullopt;
  // Where device memory is in play, some device with memory must take the
  // item (the best one, or else the first): when none would, the tenant's
  // memory policy decides, in the full scan.
  if (auto with_memory = working & mask & st.acct.metered_mask();
      with_memory != 0) {
    auto first = size_t(__builtin_ctzll(with_memory));
    auto any = size_t(best.any);
    if (!(st.acct.metered(any) && fits(any)) && !fits(first))
      return std::nullopt;
  }
  // The index weighs each device by a typical item of the cell; the few
  // devices that hold this item's inputs may beat that, so they are weighed
  // too. When many hold them, holding does not tell devices apart.
  auto held_by = holders_of(st, r) & working & mask;
  // The item's completion on device d, at the rate the index holds for the
  // cell there (measured, or the estimate worked out when it was last
  // measured anywhere).
  auto completion = [&](size_t d) {
    auto& s = st.devices[d];
    double t = s.backlog_ns / std::max(1u, s.info.streams) +
               st.fleet.rate(cell, d) * units_on(st, d, r, true);
    if (s.status == device_status::degraded)
      t *= st.cfg.degraded_penalty;
    return t + crossing_ns(st, d, r);
  };
  if (__builtin_popcountll(held_by) > max_weighed_holders)
    held_by = 0;
  auto room = st.fleet.room();
  int32_t pick = -1;
  double mine = 0;
  double soonest = completion(size_t(best.any));
  auto weigh = [&](size_t d) {
    double t = d == size_t(best.any) ? soonest : completion(d);
    soonest = std::min(soonest, t);
    if (((room >> d) & 1) && (pick < 0 || t < mine)) {
      pick = int32_t(d);
      mine = t;
    }
  };
  weigh(size_t(best.any));
  if (best.with_room >= 0 && best.with_room != best.any)
    weigh(size_t(best.with_room));
  for (auto h = held_by; h != 0; h &= h - 1) {
    auto d = size_t(__builtin_ctzll(h));
    if (int32_t(d) != best.any && int32_t(d) != best.with_room)
      weigh(d);
  }
  if (pick < 0)
    return placement::later;
  if (mine > soonest && (strict || mine > drain_ns(st)))
    return placement::later;
  if (!fits(size_t(pick)))
    return std::nullopt;
  commit(self, ticket, size_t(pick), false, false, {});
  return placement::placed;
}

// `r` reads objects that have no host copy and that only some devices of
// its grant (`base`) hold: it may run only there, `r.device_mask`. When a
// device of its grant without them would finish it in less than half the
// time the soonest holder would, counting the copy (read out of a holder,
// stored there), they are copied there, device to device through host
// memory (copy_object). Items placed meanwhile go to the holders; once the
// copies are stored, placement weighs both. Nothing starts while one of
// them is being copied, shortly after a copy of one failed, or unless all
// of them fit the device together.
void copy_ahead(self_ptr self, const balancer_state::record& r, uint64_t base) {
  auto& st = self->state;
  uint64_t missing = 0;
  clock::time_point now{};
  for (auto id : r.objects) {
    auto* e = st.objects.find(id);
    if (e == nullptr || e->has_host)
      continue;
    if (st.copying.count(id) != 0)
      return;
    if (auto a = st.copy_after.find(id); a != st.copy_after.end()) {
      if (now == clock::time_point{})
        now = clock::now();
      if (now < a->second)
        return;
      st.copy_after.erase(a);
    }
    missing += e->bytes();
  }
  if (missing == 0)
    return;
  // The soonest holder (none that takes work: items wait for one).
  double wait = std::numeric_limits<double>::infinity();
  for (size_t d = 0; d < st.devices.size(); ++d)
    if ((r.device_mask & objects::device_bit(d)) && st.devices[d].handle &&
        takes_work(st.devices[d].status))
      wait = std::min(wait, finish_ns(st, d, r));
  // Whether every object `r` reads only where it is may be copied to `d`,
  // all of them together within its tenant's grant there.
  auto all_fit = [&](size_t d) {
    balancer::charge total{-1, 0};
    for (auto id : r.objects) {
      auto* e = st.objects.find(id);
      if (e == nullptr || e->has_host || objects::has_device(e->replicas, d))
        continue;
      if (!copy_fits(st, *e, d))
        return false;
      auto c = object_charge(st, *e);
      if (total.tenant >= 0 && c.tenant != total.tenant)
        return false;
      total.tenant = c.tenant;
      total.bytes += c.bytes;
    }
    return total.tenant >= 0 && !st.acct.check({&total, 1}, d);
  };
  double soonest = std::numeric_limits<double>::infinity();
  int target = -1;
  for (size_t d = 0; d < st.devices.size(); ++d) {
    auto& s = st.devices[d];
    if (!(base & objects::device_bit(d)) ||
        (r.device_mask & objects::device_bit(d)) || !s.handle ||
        !takes_work(s.status) || !st.acct.metered(d) || !has_room(s) ||
        !s.breaker.closed())
      continue;
    // Its run reads them in (predict_ns counts them as inputs) after the
    // copy read them out.
    double t = finish_ns(st, d, r) +
               rate_of(st, d, r.item.kernel, r.cls) * double(missing);
    if (t < soonest && 2 * t < wait && all_fit(d)) {
      soonest = t;
      target = int(d);
    }
  }
  if (target < 0)
    return;
  for (auto id : r.objects) {
    auto* e = st.objects.find(id);
    if (e == nullptr || e->has_host ||
        objects::has_device(e->replicas, size_t(target)))
      continue;
    for (size_t from = 0; from < st.devices.size(); ++from)
      if (objects::has_device(e->replicas, from) && st.devices[from].handle) {
        copy_object(self, id, from, size_t(target));
        break;
      }
  }
}

// Places (or re-places) one item on a device with room, by the balancer's
// policy; `r.why` says why it moves (empty the first time). `strict`: only
// on a device where it would finish soonest.
placement place(self_ptr self, uint64_t ticket, bool strict = false) {
  auto& st = self->state;
  auto& r = st.outstanding.at(ticket);
  if (r.cancelled) {
    // Cancelled while it ran, then its launch failed: it goes no further.
    end_failed(self, ticket,
               make_error(errc::cancelled, "cancelled by " + r.cancelled_by));
    return placement::elsewhere;
  }
  if (r.attempts >= st.cfg.max_attempts) {
    end_failed(self, ticket,
               make_error(errc::retries_exhausted,
                          "placed " + std::to_string(r.attempts) +
                              " times; last failure: " + r.why));
    return placement::elsewhere;
  }
  if (!r.objects.empty()) {
    // Where its objects are now (they move: copies lost, made again,
    // replicated, evicted).
    if (wait_for_rebuild(st, ticket, r))
      return placement::elsewhere;
    if (auto err = check_objects(st.objects, r.item)) {
      end_failed(self, ticket, std::move(err));
      return placement::elsewhere;
    }
    r.device_mask = item_mask(st, r);
    if (r.device_mask == 0) {
      if (objects_within(st, r) &&
          gather_objects(self, r, item_mask(st, r, false)))
        return placement::later;
      end_failed(self, ticket,
                 make_error(errc::no_device_available,
                            "the devices holding the objects it reads are "
                            "not granted to tenant '" +
                                r.item.tenant + "' or lack its kernel's code"));
      return placement::elsewhere;
    }
    if (auto base = item_mask(st, r, false); (base & ~r.device_mask) != 0)
      copy_ahead(self, r, base);
  }
  if (auto quick = place_quickly(self, ticket, r, strict))
    return *quick;
  // At most 64 devices: on the stack, no allocation per placement.
  struct {
    std::array<placement_candidate, 64> at;
    size_t n = 0;
    bool empty() const { return n == 0; }
    void push_back(const placement_candidate& c) { at[n++] = c; }
    std::span<const placement_candidate> all() const { return {at.data(), n}; }
  } fit;
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
  // The balancer's own books refused it somewhere (not only a device).
  bool books_refused = false;
  caf::error memory_why;
  if (r.memory_refused != 0) {
    now = clock::now();
    if (now >= r.retry_at)
      r.memory_refused = 0;
  }
  // The tenant's fallback budget (FALLBACK_WAIT, FALLBACK_FAIL): a CPU
  // worker where the item, falling back, would end past it counted from
  // its admission is no candidate. The soonest such end is kept for the
  // item's audit and error.
  auto& terms = st.acct.book().policy(r.tenant);
  bool budget_binds = terms.on_over_budget != fallback_policy::allow &&
                      terms.fallback_budget_ms > 0;
  double held_end_ns = std::numeric_limits<double>::infinity();
  size_t held_on = 0;
  auto past_budget = [&](size_t i, double finish) {
    if (!budget_binds)
      return false;
    if (now == clock::time_point{})
      now = clock::now();
    double end =
        std::chrono::duration<double, std::nano>(now - r.admitted_at).count() +
        finish;
    if (end <= double(terms.fallback_budget_ms) * 1e6)
      return false;
    if (end < held_end_ns) {
      held_end_ns = end;
      held_on = i;
    }
    return true;
  };
  // Devices that already failed this item are a last resort.
  for (int pass = 0; pass < 2 && fit.empty(); ++pass) {
    for (size_t i = 0; i < st.devices.size(); ++i) {
      auto& s = st.devices[i];
      uint64_t bit = uint64_t{1} << i;
      if (!(r.device_mask & bit))
        continue;
      if (may_come_back(s))
        may_return = true;
      if (!takes_work(s.status) || (pass == 0 && (r.failed_on & bit)))
        continue;
      if (!circuit_allows(s.breaker)) {
        may_return = true;
        continue;
      }
      bool explore = false;
      double t = finish_ns(st, i, r, &explore, true);
      // A fallback the tenant's budget keeps off this CPU worker.
      if (r.on_gpu_before && !is_gpu(s.info) && past_budget(i, t))
        continue;
      bool metered = st.acct.metered(i);
      if (metered) {
        memory_online = true;
        if (r.memory_refused & bit) {
          if (!memory_why)
            memory_why = r.memory_why;
          continue;
        }
        if (auto err = memory_check(st, r, i)) {
          memory_why = std::move(err);
          books_refused = true;
          continue;
        }
        memory_fits = true;
      }
      fit.push_back({i, t, has_room(s), explore, !metered,
                     double(s.placed) / std::max(1u, s.info.streams)});
    }
  }
  if (!r.members.empty() && ((memory_online && !memory_fits) || fit.empty())) {
    // A merged launch that cannot go anywhere as one: each member goes on
    // its own, under its own tenant's grant and policy.
    dissolve(self, ticket);
    return placement::elsewhere;
  }
  bool memory_fallback = false;
  if (memory_online && !memory_fits && r.members.empty()) {
    switch (evict_for(self, ticket)) {
    case room::made:
      return place(self, ticket, strict);
    case room::coming:
      // Spills will make room: it waits for them, whatever its policy.
      r.device = -1;
      wait_for_memory(self, ticket, memory_why);
      return placement::elsewhere;
    case room::none:
      break;
    }
  }
  if (memory_online && !memory_fits) {
    // Every device with memory it may use is full for it (soft OOM): its
    // tenant's policy decides.
    switch (st.acct.book().policy(r.tenant).on_limit) {
    case limit_policy::reject:
      // Only the balancer's books refuse at once: a device that refused
      // what they let through is waited for, as under QUEUE.
      if (books_refused) {
        end_failed(self, ticket, memory_why);
        return placement::elsewhere;
      }
      [[fallthrough]];
    case limit_policy::queue:
      r.device = -1;
      wait_for_memory(self, ticket, memory_why);
      return placement::elsewhere;
    case limit_policy::cpu_fallback: {
      // The CPU workers within the tenant's fallback budget.
      size_t kept = 0;
      for (size_t k = 0; k < fit.n; ++k)
        if (!past_budget(fit.at[k].index, fit.at[k].completion))
          fit.at[kept++] = fit.at[k];
      fit.n = kept;
      if (!fit.empty()) {
        memory_fallback = true;
        break;
      }
      if (held_end_ns < std::numeric_limits<double>::infinity() &&
          hold_for_budget(self, ticket, held_on, held_end_ns))
        return placement::elsewhere;
      r.device = -1;
      wait_for_memory(self, ticket, memory_why);
      return placement::elsewhere;
    }
    }
  }
  if (fit.empty() && held_end_ns < std::numeric_limits<double>::infinity()) {
    // Only CPU workers past the budget were left: under FALLBACK_FAIL it
    // ends here; under FALLBACK_WAIT it waits for a GPU as a parked item.
    if (hold_for_budget(self, ticket, held_on, held_end_ns))
      return placement::elsewhere;
    may_return = true;
  }
  if (fit.empty()) {
    if (may_return) {
      // Parked until a device of its grant takes work again, for at most
      // its tenant's queue timeout.
      r.device = -1;
      if (now == clock::time_point{})
        now = clock::now();
      auto timeout = st.acct.book().policy(r.tenant).queue_timeout_ms;
      if (r.park_deadline == clock::time_point{}) {
        r.park_deadline = now + std::chrono::milliseconds(timeout);
      } else if (now >= r.park_deadline) {
        end_failed(
            self, ticket,
            make_error(errc::no_device_available,
                       "no device granted to tenant '" + r.item.tenant +
                           "' took work for " + std::to_string(timeout) +
                           " ms (its queue timeout): offline by an "
                           "operator, draining, being reset or behind "
                           "an open circuit" +
                           (r.budget_held
                                ? std::string{"; its fallback budget kept it "
                                              "off the CPU workers"}
                                : std::string{}) +
                           (r.why.empty() ? "" : "; last failure: " + r.why)));
        return placement::elsewhere;
      }
      st.parked.push_back(ticket);
      schedule_retry(self);
      return placement::elsewhere;
    }
    end_failed(
        self, ticket,
        make_error(errc::no_device_available,
                   "no online device is granted to tenant '" + r.item.tenant +
                       "'" +
                       (r.why.empty() ? "" : "; last failure: " + r.why)));
    return placement::elsewhere;
  }
  placement_rules rules{st.cfg.policy, strict, memory_fallback,
                        st.devices.size()};
  auto at = pick_device(fit.all(), rules, st.round_robin,
                        [&] { return drain_ns(st); });
  if (at == no_pick)
    return placement::later;
  auto& pick = fit.at[at];
  commit(self, ticket, pick.index, pick.explore && !memory_fallback,
         memory_fallback, memory_why);
  return placement::placed;
}

// A launch failed on device `index` because of the device: its circuit
// counts it.
void note_failure(self_ptr self, size_t index, const caf::error& err) {
  auto& s = self->state.devices[index];
  touch(self->state, index);
  if (!s.breaker.failed(clock::now()))
    return;
  ++s.stats.circuit_opens;
  device_event(self, s.info.name,
               "circuit open for " +
                   std::to_string(s.breaker.config().open_for.count()) +
                   " ms after: " + describe(err));
}

// Puts an admitted item in its ready queue (at the front when it had been
// placed before: it keeps its turn).
void enqueue(self_ptr self, uint64_t ticket, bool front = false) {
  auto& st = self->state;
  auto& r = st.outstanding.at(ticket);
  if (r.ready)
    return;
  // Merged launches (several tenants' items in one) go in the order they
  // came; a tenant's own items by their priority, ahead of which go the
  // balancer's own records (an object's item made again: items wait for
  // it).
  bool merged = !r.members.empty();
  auto q = merged ? st.ready.merged_queue() : size_t(r.tenant);
  r.ready = true;
  r.waiting_memory = false;
  st.ready.push(q, ticket, r.cost_units, front,
                merged       ? 0
                : r.job == 0 ? std::numeric_limits<int32_t>::max()
                             : r.item.priority);
  st.counters.max_waiting = st.ready.max_count();
}

// Places an item now or queues it; `why` says why it moves.
void place_or_queue(self_ptr self, uint64_t ticket, std::string why,
                    bool front) {
  auto& st = self->state;
  auto i = st.outstanding.find(ticket);
  if (i == st.outstanding.end())
    return;
  i->second.why = std::move(why);
  if (place(self, ticket) == placement::later)
    enqueue(self, ticket, front);
}

// Places items that were placed before (they keep their turn), each
// tenant's by priority, in order; those that find no room now go back to
// the front of their queues in the same order.
void place_again(self_ptr self, std::vector<uint64_t> tickets,
                 const std::string& why) {
  auto& st = self->state;
  balancer::order_within_tenants(tickets,
                                 [&](uint64_t t) { return rank_of(st, t); });
  std::vector<uint64_t> later;
  for (auto ticket : tickets) {
    auto i = st.outstanding.find(ticket);
    if (i == st.outstanding.end())
      continue;
    i->second.why = why;
    if (place(self, ticket) == placement::later)
      later.push_back(ticket);
  }
  // Each goes to the front of its priority: the last first.
  for (auto i = later.rbegin(); i != later.rend(); ++i)
    enqueue(self, *i, true);
}

// Device `i` as a gang candidate: its NUMA node and the devices it is
// linked to (by index), finishing at `finish`.
gang_candidate gang_candidate_of(const balancer_state& st, size_t i,
                                 double finish) {
  auto& info = st.devices[i].info;
  gang_candidate out{i, info.numa_node, finish};
  for (auto& l : info.links)
    for (size_t j = 0; j < st.devices.size() && j < 64; ++j)
      if (st.devices[j].info.name == l.peer) {
        out.direct |= uint64_t{1} << j;
        if (l.kind == link_kind::fabric)
          out.fabric |= uint64_t{1} << j;
      }
  return out;
}

// Device sets for a gang of `k` on `r` (pick_gang over the devices free
// for a slice now). Empty when no set is free now.
std::vector<size_t> gang_devices(balancer_state& st,
                                 const balancer_state::record& r, uint32_t k) {
  balancer_state::record slice;
  slice.item.kernel = r.item.kernel;
  slice.cost_units = r.cost_units / k;
  slice.cls = size_class(slice.cost_units);
  slice.bytes = gang_slice_bytes(r.item, k);
  slice.tenant = r.tenant;
  auto now = clock::now();
  std::vector<gang_candidate> free;
  for (size_t i = 0; i < st.devices.size(); ++i) {
    auto& s = st.devices[i];
    if (!(r.device_mask & (uint64_t{1} << i)) || !is_gpu(s.info) ||
        s.gang != 0 || !takes_work(s.status) || !s.breaker.allows(now))
      continue;
    if (st.acct.metered(i) &&
        st.acct.book().check_place(r.tenant, i, slice.bytes))
      continue;
    free.push_back(gang_candidate_of(st, i, finish_ns(st, i, slice)));
  }
  return pick_gang(free, k, st.cfg.gang_cross_numa);
}

// Why a gang of `r` can never be placed (gang_impossible over the granted
// GPUs not out of service for good); empty when it can.
std::string gang_impossible(const balancer_state& st,
                            const balancer_state::record& r) {
  std::vector<gang_candidate> gpus;
  for (size_t i = 0; i < st.devices.size(); ++i) {
    auto& s = st.devices[i];
    if ((r.device_mask & (uint64_t{1} << i)) && is_gpu(s.info) &&
        s.status != device_status::offline)
      gpus.push_back(gang_candidate_of(st, i, 0));
  }
  // Links to GPUs outside the set do not count.
  uint64_t in_set = 0;
  for (auto& g : gpus)
    in_set |= uint64_t{1} << g.device;
  for (auto& g : gpus) {
    g.direct &= in_set;
    g.fabric &= in_set;
  }
  return gang_impossible(capacity_of(gpus), r.item.gang, r.item.tenant,
                         st.cfg.gang_cross_numa);
}

// Places the oldest waiting gangs whose devices are free, in order: a gang
// never takes devices ahead of an older one (no starvation), and takes all
// of its devices in one step or none (no partial allocation, no deadlock).
void place_gangs(self_ptr self) {
  auto& st = self->state;
  while (!st.gangs_waiting.empty()) {
    auto ticket = st.gangs_waiting.front();
    auto i = st.outstanding.find(ticket);
    if (i == st.outstanding.end()) {
      st.gangs_waiting.pop_front();
      continue;
    }
    auto& g = i->second;
    auto k = g.item.gang;
    if (g.retry_at != clock::time_point{}) {
      // Backing off after a device refused a slice's memory.
      if (clock::now() < g.retry_at) {
        schedule_retry(self);
        return;
      }
      g.retry_at = {};
    }
    if (auto why = gang_impossible(st, g); !why.empty()) {
      st.gangs_waiting.pop_front();
      end_failed(self, ticket, make_error(errc::no_device_available, why));
      continue;
    }
    if (g.attempts >= st.cfg.max_attempts) {
      st.gangs_waiting.pop_front();
      end_failed(self, ticket,
                 make_error(errc::retries_exhausted,
                            "placed " + std::to_string(g.attempts) +
                                " times; last failure: " + g.why));
      continue;
    }
    auto set = gang_devices(st, g, k);
    if (set.empty()) {
      auto now = clock::now();
      if (!g.waiting_memory) {
        // Counted once per wait; it waits at most its tenant's queue
        // timeout at the front of the line.
        g.waiting_memory = true;
        g.deadline =
            now + std::chrono::milliseconds(
                      st.acct.book().policy(g.tenant).queue_timeout_ms);
        ++st.counters.gang_waits;
      } else if (g.deadline <= now) {
        st.gangs_waiting.pop_front();
        end_failed(
            self, ticket,
            make_error(
                errc::no_device_available,
                "waited " +
                    std::to_string(
                        st.acct.book().policy(g.tenant).queue_timeout_ms) +
                    " ms (its queue timeout) for " + std::to_string(k) +
                    " GPUs free of other gangs at once"));
        continue;
      }
      schedule_retry(self);
      return;
    }
    st.gangs_waiting.pop_front();
    g.waiting_memory = false;
    ++g.attempts;
    ++st.counters.gangs;
    g.parts.assign(k, {});
    g.parts_done = 0;
    // Slice j: rows [m j / k, m (j + 1) / k) of A, all of B.
    auto& a = g.item.inputs[0];
    auto m = g.item.args.m;
    auto kk = g.item.args.k;
    std::string names;
    std::vector<std::pair<uint64_t, size_t>> slices;
    for (uint32_t j = 0; j < k; ++j) {
      auto lo = m * j / k;
      auto hi = m * (j + 1) / k;
      balancer_state::record s;
      s.item.id = g.item.id;
      s.item.tenant = g.item.tenant;
      s.item.kernel = g.item.kernel;
      s.item.args = g.item.args;
      s.item.args.m = hi - lo;
      auto rows = a.span().subspan(lo * kk, (hi - lo) * kk);
      s.item.inputs = {
          host_buffer{std::vector<float>(rows.begin(), rows.end())},
          g.item.inputs[1]};
      auto c = item_cost(s.item);
      s.cost_units = c.flops + c.bytes;
      s.cls = size_class(s.cost_units);
      s.bytes = item_bytes(s.item);
      s.tenant = g.tenant;
      s.device_mask = uint64_t{1} << set[j];
      s.gang_parent = ticket;
      s.slice = j;
      s.admitted_at = g.admitted_at;
      s.sink = g.sink;
      auto slice_ticket = ++st.next_ticket;
      g.slices.push_back(slice_ticket);
      st.devices[set[j]].gang = ticket;
      names += (names.empty() ? "" : "+") + st.devices[set[j]].info.name;
      slices.push_back({slice_ticket, set[j]});
      st.outstanding.emplace(slice_ticket, std::move(s));
    }
    auto& gang = st.outstanding.at(ticket);
    audit(self, audit_kind::placed, gang.item, names,
          "gang of " + std::to_string(k) + " devices, all at once" +
              (gang.attempts > 1 ? "; retry: " + gang.why : ""));
    // Slices skip the ready queues: each waits behind at most what its
    // device already holds.
    for (auto [slice_ticket, index] : slices) {
      bind(st, st.outstanding.at(slice_ticket), index);
      dispatch(self, index, slice_ticket);
    }
  }
}

// A slice of gang `parent` failed with `err`: the whole gang gives its
// devices back and waits for a new set (first in line), or ends when the
// error is definitive or its placements are used up.
void gang_failed(self_ptr self, uint64_t parent, const caf::error& err,
                 bool retryable) {
  auto& st = self->state;
  auto i = st.outstanding.find(parent);
  if (i == st.outstanding.end())
    return;
  if (!retryable)
    return end_failed(self, parent, err);
  auto& g = i->second;
  // Cancelled while its slices ran: it is not placed again.
  if (g.cancelled)
    return end_failed(
        self, parent,
        make_error(errc::cancelled,
                   "cancelled by " + g.cancelled_by +
                       " while it ran; a slice failed: " + describe(err)));
  g.why = describe(err);
  g.last_failure = code_of(err);
  if (is_memory_refusal(code_of(err))) {
    // Not a placement that failed: the gang waits a little (backoff) and
    // tries again, within its tenant's queue timeout.
    auto now = clock::now();
    if (g.memory_refusals++ == 0)
      g.first_refusal = now;
    auto timeout = std::chrono::milliseconds(
        st.acct.book().policy(g.tenant).queue_timeout_ms);
    if (now - g.first_refusal >= timeout)
      return end_failed(
          self, parent,
          make_error(code_of(err), describe(err) + " (refused for memory for " +
                                       std::to_string(timeout.count()) +
                                       " ms, its queue timeout)"));
    g.attempts -= std::min(g.attempts, 1u);
    g.retry_at = now + refusal_backoff(g.memory_refusals);
  } else {
    ++st.counters.retries;
  }
  release_gang(self, parent);
  st.gangs_waiting.push_front(parent);
}

// Launches an open batch: its members become one merged item in the queue
// of merged launches. A lone member goes on its own (its result is the
// same either way).
void flush_batch(self_ptr self, const batching::batch_key& key) {
  auto& st = self->state;
  auto node = st.batches.extract(key);
  if (node.empty())
    return;
  std::vector<uint64_t> members;
  uint64_t mask = ~uint64_t{0};
  for (auto m : node.mapped().members)
    if (auto i = st.outstanding.find(m);
        i != st.outstanding.end() && i->second.batching) {
      i->second.batching = false;
      members.push_back(m);
      mask &= i->second.device_mask;
    }
  if (members.empty())
    return;
  if (members.size() == 1 || mask == 0) {
    // Alone, or members of tenants without a device in common: each on its
    // own.
    for (auto m : members)
      place_or_queue(self, m, {}, false);
    return;
  }
  std::vector<const work_item*> items;
  for (auto m : members)
    items.push_back(&st.outstanding.at(m).item);
  auto ticket = ++st.next_ticket;
  auto& first = st.outstanding.at(members.front());
  balancer_state::record b;
  b.item = batching::merge(items, first.item.id, first.item.tenant);
  auto c = item_cost(b.item);
  b.cost_units = c.flops + c.bytes;
  b.cls = size_class(b.cost_units);
  b.tenant = first.tenant;
  b.device_mask = mask;
  b.admitted_at = first.admitted_at;
  b.sink = first.sink;
  b.members = members;
  for (auto m : members)
    st.outstanding.at(m).batch = ticket;
  ++st.counters.batches;
  st.counters.batched_items += members.size();
  st.outstanding.emplace(ticket, std::move(b));
  place_or_queue(self, ticket, {}, false);
}

// Binds waiting items to devices with room, tenant by tenant in order of
// virtual time (weighted fair queuing: a tenant's turn costs its items'
// work divided by its weight), looking a few items past one that waits for
// a busier, faster device.
void pump(self_ptr self) {
  auto& st = self->state;
  if (st.stopping)
    return;
  if (st.pumping) {
    st.pump_again = true;
    return;
  }
  st.pumping = true;
  constexpr size_t lookahead = 32;
  auto& order = st.pump_order;
  // Items like one that just stayed in its queue (same cell, tenant, grant,
  // inputs held by the same devices, nothing placed since) get the same
  // answer:
  // they stay too, without being weighed again.
  struct later_key {
    kernel_id kernel;
    uint8_t cls;
    bool strict;
    int tenant;
    uint64_t mask;
    uint64_t held;
    bool operator==(const later_key&) const = default;
  };
  std::array<later_key, 8> stayed;
  size_t n_stayed = 0;
  constexpr size_t max_alike = 4;
  auto key_of = [&](const balancer_state::record& r,
                    bool strict) -> std::optional<later_key> {
    if (r.failed_on != 0 || r.memory_refused != 0 || !r.members.empty() ||
        r.cancelled)
      return std::nullopt;
    return later_key{r.item.kernel, r.cls,         strict,
                     r.tenant,      r.device_mask, holders_of(st, r)};
  };
  // Place may have queued other items meanwhile: find the ticket again.
  auto erase = [](std::deque<balancer::ready_queues::entry>& queue, size_t n,
                  uint64_t ticket) {
    if (n >= queue.size() || queue[n].ticket != ticket)
      n = size_t(std::find_if(queue.begin(), queue.end(),
                              [&](auto& e) { return e.ticket == ticket; }) -
                 queue.begin());
    if (n < queue.size())
      queue.erase(queue.begin() + std::ptrdiff_t(n));
  };
  do {
    st.pump_again = false;
    if (!st.parked.empty() &&
        (std::exchange(st.parked_due, false) || circuit_reopened(st)))
      retry_parked(self);
    place_gangs(self);
    auto any_room = [&] {
      sync_fleet(st);
      return st.takes_room != 0;
    };
    for (bool progress = true; progress;) {
      progress = false;
      if (!any_room())
        break;
      st.ready.order(order);
      // First what can go where it finishes soonest, then what a device
      // with room takes because the fleet has more than enough work.
      // One tenant waiting (the common case): no turns to take, it goes on
      // placing while devices have room.
      bool alone = order.size() == 1;
      for (int pass = 0; pass < 2 && !progress; ++pass)
        for (auto q : order) {
          auto& queue = st.ready.queue(q);
          size_t alike = 0;
          for (size_t n = 0;
               n < queue.size() && n < lookahead && (!progress || alone);) {
            auto ticket = queue[n].ticket;
            auto i = st.outstanding.find(ticket);
            if (i == st.outstanding.end() || !i->second.ready) {
              queue.erase(queue.begin() + std::ptrdiff_t(n));
              continue;
            }
            auto key = key_of(i->second, pass == 0);
            if (key && std::find(stayed.begin(), stayed.begin() + n_stayed,
                                 *key) != stayed.begin() + n_stayed) {
              // A run of look-alikes: the rest of the queue is likely more
              // of the same.
              if (++alike >= max_alike)
                break;
              ++n;
              continue;
            }
            alike = 0;
            auto units = i->second.cost_units;
            unready(st, i->second);
            auto what = place(self, ticket, pass == 0);
            if (what == placement::later) {
              i = st.outstanding.find(ticket);
              i->second.ready = true;
              st.ready.waiting_again(units);
              ++n;
              if (key && n_stayed < stayed.size())
                stayed[n_stayed++] = *key;
              continue;
            }
            erase(queue, n, ticket);
            // Something moved: answers may differ now.
            n_stayed = 0;
            if (what == placement::placed) {
              double weight = q < st.acct.book().tenants()
                                  ? st.acct.book().policy(int(q)).weight
                                  : 1.0;
              st.ready.served(q, units, weight);
              progress = true;
              if (alone && !any_room())
                break;
            }
          }
          if (progress)
            break;
        }
    }
  } while (st.pump_again);
  st.pumping = false;
}

// Records that the item's current placement failed and moves it on. A loss
// of the whole device counts once against its circuit, not once per item:
// `counted` says it was.
void replace_after_failure(self_ptr self, uint64_t ticket,
                           const caf::error& err, bool counted = false) {
  auto& st = self->state;
  auto i = st.outstanding.find(ticket);
  if (i == st.outstanding.end())
    return;
  auto& r = i->second;
  auto index = r.device;
  auto& s = st.devices[size_t(index)];
  ++s.stats.failed_placements;
  if (st.trace)
    trace_add(st,
              {.begin_ns = steady_ns(st.now),
               .job = trace_job(st, r),
               .device = index,
               .tenant = r.tenant,
               .kind = trace_kind::failover,
               .kernel = uint8_t(r.item.kernel)},
              describe(err));
  if (!counted && is_device_fault(code_of(err)))
    note_failure(self, size_t(index), err);
  else
    s.breaker.abandoned();
  if (r.gang_parent != 0)
    return gang_failed(self, r.gang_parent, err, true);
  r.failed_on |= uint64_t{1} << index;
  r.on_gpu_before = r.on_gpu_before || is_gpu(s.info);
  r.last_failure = code_of(err);
  unplace(self, r);
  place_or_queue(self, ticket, describe(err), true);
}

// Device `index`, in a host process, could not run an item's kernels of
// this process: its process could not register them (a host program of
// another build). The item goes elsewhere, without counting against the
// device (its circuit stays closed for other work); later items of those
// kernels are not placed there until it has a new process.
void kernel_refused(self_ptr self, uint32_t index, uint64_t ticket,
                    const caf::error& err) {
  auto& st = self->state;
  auto& s = st.devices[index];
  auto& r = st.outstanding.at(ticket);
  auto before = s.code_refused;
  balancer::mark_refused(s.code_refused, r.item);
  if (s.code_refused != before)
    device_event(self, s.info.name,
                 "its host process does not run kernel " +
                     std::string{kernels::name(r.item.kernel)} +
                     (r.item.then.empty() ? "" : " or its chain") +
                     " of the node's process; its items run elsewhere: " +
                     describe(err));
  replace_after_failure(self, ticket, err, true);
}

// Device `index` refused the item's memory although the books let it
// through: the item waits (with backoff) for memory there, may go to
// another device at once, and the refusal is not a placement. Refusals
// that go on past the tenant's queue timeout from the first end it.
void memory_refused(self_ptr self, uint64_t ticket, const caf::error& err) {
  auto& st = self->state;
  auto& r = st.outstanding.at(ticket);
  auto index = size_t(r.device);
  auto& s = st.devices[index];
  ++s.stats.memory_refusals;
  if (st.trace)
    trace_add(st,
              {.begin_ns = steady_ns(st.now),
               .job = trace_job(st, r),
               .device = int32_t(index),
               .tenant = r.tenant,
               .kind = trace_kind::failover,
               .kernel = uint8_t(r.item.kernel)},
              "its memory was refused: " + describe(err));
  s.breaker.abandoned();
  if (r.gang_parent != 0)
    return gang_failed(self, r.gang_parent, err, true);
  auto now = clock::now();
  if (r.memory_refusals++ == 0)
    r.first_refusal = now;
  auto timeout = std::chrono::milliseconds(
      st.acct.book().policy(r.tenant).queue_timeout_ms);
  unplace(self, r);
  --r.attempts;
  if (now - r.first_refusal >= timeout) {
    end_failed(self, ticket,
               make_error(code_of(err), describe(err) +
                                            " (refused for memory for " +
                                            std::to_string(timeout.count()) +
                                            " ms, its queue timeout)"));
    return;
  }
  r.memory_refused |= uint64_t{1} << index;
  r.retry_at = now + refusal_backoff(r.memory_refusals);
  r.memory_why = err;
  place_or_queue(self, ticket, describe(err), true);
}

// Ends one item with its output, produced on device `index`.
void end_ok(self_ptr self, uint64_t ticket, size_t index,
            kernels::kernel_output output, const std::string& device,
            uint32_t attempts, bool fallback, const std::string& detail,
            object_info object = {}) {
  auto& st = self->state;
  auto i = st.outstanding.find(ticket);
  auto& r = i->second;
  if (r.cancelled)
    return end_failed(
        self, ticket,
        make_error(errc::cancelled, "cancelled by " + r.cancelled_by +
                                        " while it ran on " + device +
                                        "; its result was dropped"));
  auto now = st.now;
  st.latency.record(index, r.item.kernel,
                    std::chrono::duration<double>(now - r.admitted_at).count());
  if (fallback) {
    // The price of falling back, against the tenant's budget.
    auto& fb = st.counters.fallback_by_tenant[r.item.tenant];
    auto took = std::chrono::duration_cast<std::chrono::nanoseconds>(
                    now - r.admitted_at)
                    .count();
    if (note_fallback(
            fb, took,
            int64_t(st.acct.book().policy(r.tenant).fallback_budget_ms) *
                1000000)) {
      audit(self, audit_kind::fallback, r.item, device,
            "over the fallback latency budget: " +
                std::to_string(took / 1000000) + " ms against " +
                std::to_string(fb.budget_ns / 1000000) + " ms");
    }
  }
  if (attempts <= 1 && detail.empty())
    audit_common(self, audit_kind::completed, r.item, r.tenant, int32_t(index));
  else
    audit(self, audit_kind::completed, r.item, device,
          attempts > 1 ? "after " + std::to_string(attempts) + " placements" +
                             (detail.empty() ? "" : "; " + detail)
                       : detail);
  unplace(self, r);
  let_go_objects(self, r);
  st.acct.book().end(r.tenant);
  st.by_client.erase(key_of(r.sink, r.item.key()));
  note_ended(st, r.job, r.item, r.tenant, r.sink, {}, int32_t(index),
             r.submitted, attempts);
  ++st.counters.completed;
  ++st.devices[index].stats.completed;
  tell_end(self, r.sink,
           {r.item.key(),
            {},
            work_result{r.item.id, std::move(output), device, attempts,
                        fallback, r.item.tag, std::move(object)}});
  st.outstanding.erase(i);
}

// Ends the re-run of the item that made an object whose every copy was
// lost: its output is the object again, on the device when the device kept
// it there, else in host memory. Items that waited for it go on.
void end_rebuild(self_ptr self, size_t index, work_done& done) {
  auto& st = self->state;
  auto ticket = done.id;
  auto& r = st.outstanding.at(ticket);
  auto& s = st.devices[index];
  auto id = r.rebuild_of;
  auto* e = st.objects.find(id);
  std::string why;
  if (e == nullptr) {
    // Freed meanwhile (nothing waited for it): what was made goes too.
    if (done.kept_as != 0 && s.handle)
      self->send(s.handle, drop_atom::value, done.kept_as);
  } else if (done.output.type != e->type ||
             (done.kept_as == id ? done.kept_elements
                                 : done.output.elements()) != e->elements) {
    if (done.kept_as != 0 && s.handle)
      self->send(s.handle, drop_atom::value, done.kept_as);
    why = "re-running the item that made it gave an output of another size "
          "or type (its kernel is not deterministic)";
  } else if (done.kept_as == id) {
    st.objects.stored(id, index);
    ++st.counters.objects.copies_stored;
    auto c = object_charge(st, *e);
    if (c.tenant >= 0 && st.acct.metered(index))
      st.acct.charge_to({&c, 1}, index);
    audit_object(self, *e, s.info.name,
                 "made again on " + s.info.name + " by re-running item " +
                     std::to_string(r.item.id));
  } else {
    st.objects.set_host(id, to_host_buffer(std::move(done.output)));
    audit_object(self, *e, s.info.name,
                 "made again in host memory by re-running item " +
                     std::to_string(r.item.id) + " (" + s.info.name +
                     " had no room for it)");
    drop_lineage(self, id);
  }
  ++st.devices[index].stats.completed;
  unplace(self, r);
  let_go_objects(self, r);
  st.acct.book().end(r.tenant);
  st.outstanding.erase(ticket);
  if (why.empty())
    rebuild_done(self, id);
  else
    rebuild_failed(self, id, why);
  wake(self);
}

// Ends an item kept on a device (keep_on_device): its output becomes an
// object, on the device when the device kept it there, else in host memory
// (a CPU worker, or a device whose memory refused it).
void end_kept(self_ptr self, size_t index, work_done& done, bool fallback) {
  auto& st = self->state;
  auto& r = st.outstanding.at(done.id);
  auto& s = st.devices[index];
  auto id = r.keep_as;
  if (r.rebuild_of != 0)
    return end_rebuild(self, index, done);
  if (r.cancelled) {
    if (done.kept_as != 0 && s.handle)
      self->send(s.handle, drop_atom::value, done.kept_as);
    return end_ok(self, done.id, index, {}, s.info.name, r.attempts, fallback,
                  {});
  }
  auto now = steady_ns(st.now);
  std::string where;
  if (done.kept_as == id) {
    st.objects.create_as(id, r.item.tenant, done.output.type,
                         done.kept_elements, std::nullopt, now);
    st.objects.stored(id, index);
    ++st.counters.objects.copies_stored;
    auto c = object_charge(st, *st.objects.find(id));
    if (c.tenant >= 0 && st.acct.metered(index))
      st.acct.charge_to({&c, 1}, index);
    where = "kept on " + s.info.name;
  } else {
    auto type = done.output.type;
    auto n = done.output.elements();
    st.objects.create_as(id, r.item.tenant, type, n,
                         to_host_buffer(std::move(done.output)), now);
    where = "kept in host memory (" + s.info.name +
            (s.info.kind == device_kind::cpu ? " is a CPU worker)"
                                             : " had no room for it)");
  }
  auto& e = *st.objects.find(id);
  keep_lineage(self, id, r);
  ++st.counters.objects.made;
  audit_object(self, e, s.info.name,
               "made from item " + std::to_string(r.item.id) + "'s output, " +
                   where);
  std::vector<std::string> names;
  for (auto& d : st.devices)
    names.push_back(d.info.name);
  auto info = describe_object(e, names, now);
  kernels::kernel_output none;
  none.type = e.type;
  end_ok(self, done.id, index, std::move(none), s.info.name, r.attempts,
         fallback, {}, std::move(info));
}

// Records the crossing that one report of device `index` (outside the
// node's process) measured: for each item it ends, the round trip less the
// time the device held it, for the bytes of the batch it went in. The
// report's items crossed together: one sample, the least of theirs.
void note_crossing(balancer_state& st, size_t index,
                   const std::vector<work_done>& batch) {
  auto& s = st.devices[index];
  if (!s.info.elsewhere())
    return;
  double best = -1;
  uint64_t bytes = 0;
  for (auto& done : batch) {
    auto i = st.outstanding.find(done.id);
    if (i == st.outstanding.end() || i->second.device != int32_t(index) ||
        i->second.sent_at == clock::time_point{} || done.held_ns <= 0)
      continue;
    // Until it reached the node: from there to here, it waited in this
    // actor's mailbox, as the node's own devices' reports do.
    auto arrived =
        done.relayed_at_ns > 0 ? done.relayed_at_ns : steady_ns(st.now);
    auto ns = double(arrived - steady_ns(i->second.sent_at) - done.held_ns);
    if (best < 0 || ns < best) {
      best = ns;
      bytes = i->second.sent_bytes;
    }
  }
  if (best < 0)
    return;
  s.crossing.record(best, bytes);
  s.crossing_at = st.now;
  s.stats.crossing_ns = s.crossing.fixed_ns();
  s.stats.crossing_ns_per_byte = s.crossing.ns_per_byte();
  touch(st, index);
}

// `ns` in a trace event's 32 bits (about 4.3 s at most).
uint32_t saturated_ns(int64_t ns) {
  return uint32_t(std::clamp<int64_t>(ns, 0, UINT32_MAX));
}

// Traces the launch of `r` on device `index` that `done` reports. It ended
// when the device says it finished, for a device on the node's machine (the
// same steady clock), else when its report reached the node (a relay's
// stamp for a device outside the node's process); it took the device time
// the device measured.
void trace_launch(balancer_state& st, const balancer_state::record& r,
                  size_t index, const work_done& done, bool fallback) {
  auto end_ns = done.finished_ns > 0 && st.devices[index].info.remote.empty()
                    ? done.finished_ns
                : done.relayed_at_ns > 0 ? done.relayed_at_ns
                                         : steady_ns(st.now);
  auto job = trace_job(st, r);
  uint8_t flags = fallback ? trace_fallback : 0;
  if (r.gang_parent != 0)
    flags |= trace_gang;
  if (r.rebuild_of != 0)
    flags |= trace_rebuild;
  st.trace->add({.begin_ns = end_ns - std::max<int64_t>(0, done.device_ns),
                 .end_ns = end_ns,
                 .job = job,
                 .count = uint32_t(std::max<size_t>(1, r.members.size())),
                 .device = int32_t(index),
                 .stream = done.stream,
                 .tenant = r.tenant,
                 .kind = trace_kind::run,
                 .kernel = uint8_t(r.item.kernel),
                 .flags = flags,
                 .copy_in_ns = saturated_ns(done.copy_in_ns),
                 .copy_out_ns = saturated_ns(done.copy_out_ns)});
}

// Ends an item with the result its device reported, unless it already
// ended or moved on (then the late completion is dropped and counted). A
// merged launch ends each member with its part; a gang slice waits for its
// siblings.
void complete(self_ptr self, uint32_t index, work_done& done) {
  auto& st = self->state;
  auto i = st.outstanding.find(done.id);
  if (i == st.outstanding.end() || i->second.device != int32_t(index)) {
    ++st.counters.duplicates_dropped;
    return;
  }
  auto& r = i->second;
  auto& s = st.devices[index];
  if (r.device_units > 0 && done.device_ns > 0) {
    st.model.record(index, r.item.kernel, r.cls, r.device_units,
                    double(done.device_ns));
    note_rate(st, index, r.item.kernel, r.cls);
    s.units_done += r.device_units;
    s.ns_done += double(done.device_ns);
    touch(st, index);
  }
  ++s.stats.launches;
  s.stats.busy_ns += done.device_ns;
  if (!s.breaker.closed() && s.breaker.succeeded(clock::now())) {
    touch(st, index);
    device_event(self, s.info.name, "circuit closed: its probes passed");
    // Items parked behind it go first, with the next pump.
    st.parked_due = true;
  }
  bool fallback = !is_gpu(s.info) && (r.on_gpu_before || r.memory_fallback);
  if (st.trace)
    trace_launch(st, r, index, done, fallback);
  if (!r.members.empty()) {
    auto members = r.members;
    auto attempts = r.attempts;
    std::vector<const work_item*> items;
    for (auto m : members)
      items.push_back(&st.outstanding.at(m).item);
    auto parts = batching::split(done.output, items);
    unplace(self, r);
    st.outstanding.erase(i);
    auto detail =
        "in a merged launch of " + std::to_string(members.size()) + " items";
    for (size_t j = 0; j < members.size(); ++j) {
      st.outstanding.at(members[j]).batch = 0;
      if (!parts) {
        end_failed(self, members[j],
                   make_error(errc::invalid_arguments,
                              "a merged launch could not be split: " +
                                  describe(parts.error())));
        continue;
      }
      end_ok(self, members[j], index, std::move((*parts)[j]), s.info.name,
             attempts, fallback, detail);
    }
    return;
  }
  if (r.gang_parent != 0) {
    auto parent = r.gang_parent;
    auto slice = r.slice;
    unplace(self, r);
    st.outstanding.erase(i);
    auto& g = st.outstanding.at(parent);
    g.parts[slice] = std::move(done.output);
    if (++g.parts_done < g.parts.size())
      return;
    // Every slice is in: rows in order make the whole product.
    kernels::kernel_output whole;
    std::string names;
    for (auto& p : g.parts)
      whole.values.insert(whole.values.end(), p.values.begin(), p.values.end());
    for (auto& d : st.devices)
      if (d.gang == parent) {
        names += (names.empty() ? "" : "+") + d.info.name;
        d.gang = 0;
      }
    g.slices.clear();
    g.parts.clear();
    end_ok(self, parent, index, std::move(whole), names, g.attempts, false,
           "gang of " + std::to_string(g.item.gang) + " devices");
    return;
  }
  if (r.keep_as != 0)
    return end_kept(self, index, done, fallback);
  end_ok(self, done.id, index, std::move(done.output), s.info.name, r.attempts,
         fallback, {});
}

void retry_parked(self_ptr self) {
  auto& st = self->state;
  auto parked = std::move(st.parked);
  st.parked = {};
  st.next_parked_look = clock::now() + parked_look_interval;
  place_again(self, std::move(parked), "waited for a device to come back");
}

// Whether a device whose circuit is not closed lets items through now (its
// open period ended): items parked behind it go before the ready queues.
bool circuit_reopened(balancer_state& st) {
  clock::time_point now{};
  for (auto& s : st.devices) {
    if (s.breaker.closed() || !takes_work(s.status))
      continue;
    if (now == clock::time_point{})
      now = clock::now();
    if (now < st.next_parked_look)
      return false;
    if (s.breaker.allows(now))
      return true;
  }
  return false;
}

// The devices with code for every kernel of `item`: CPU workers and
// simulated GPUs run any kernel's CPU implementation; a real GPU needs the
// kernel's code for its backend (every built-in kernel has it). A kernel
// registered in this process (by the application or a bundle) is known
// here only: a real GPU in a host process of this machine gets its GPU code
// before its first item there (balancer::host_runs); a remote host and a
// simulated GPU in a host process run the kernels every Cohort process
// registers alike (the catalog's and the geo kernels).
uint64_t code_mask(const balancer_state& st, const work_item& item) {
  auto all_builtin = kernels::is_builtin(item.kernel);
  for (auto& stage : item.then)
    all_builtin = all_builtin && kernels::is_builtin(stage.kernel);
  if (all_builtin)
    return ~uint64_t{0};
  auto node_only = balancer::has_node_only(item);
  uint64_t mask = 0;
  for (size_t i = 0; i < st.devices.size(); ++i) {
    auto& info = st.devices[i].info;
    if (node_only && info.elsewhere()) {
      if (balancer::host_runs(info, item) &&
          !balancer::refused(st.devices[i].code_refused, item))
        mask |= uint64_t{1} << i;
      continue;
    }
    auto kind = info.kind;
    bool ok = true;
    if (kind == device_kind::cuda_gpu || kind == device_kind::hip_gpu) {
      bool cuda = kind == device_kind::cuda_gpu;
      ok = kernels::has_gpu_code(item.kernel, cuda);
      for (auto& stage : item.then)
        ok = ok && kernels::has_gpu_code(stage.kernel, cuda);
    }
    if (ok)
      mask |= uint64_t{1} << i;
  }
  return mask;
}

// The devices `r` may run on: its tenant's grant, with its kernels' code,
// holding the objects it reads (unless `with_objects` is false); for an
// output kept on a device, devices with memory where its grant has one (a
// CPU worker would keep it in host memory).
uint64_t item_mask(balancer_state& st, const balancer_state::record& r,
                   bool with_objects) {
  auto mask =
      st.acct.book().policy(r.tenant).device_mask & code_mask(st, r.item);
  if (with_objects && !r.objects.empty())
    mask &= object_mask(st.objects, r.objects);
  if (r.keep_as != 0)
    if (auto with_memory = mask & st.acct.metered_mask(); with_memory != 0)
      mask = with_memory;
  return mask;
}

// True when each object `r` reads has a host copy, is being made again, or
// has a copy on a device `r` may run on.
bool objects_within(balancer_state& st, const balancer_state::record& r) {
  auto base = item_mask(st, r, false);
  for (auto id : r.objects) {
    auto* e = st.objects.find(id);
    if (e != nullptr && !e->has_host && !e->rebuilding &&
        (e->replicas & base) == 0)
      return false;
  }
  return base != 0;
}

// Re-runs the item that made object `id`, whose every copy was lost with
// `device`. False when it cannot run: an object it reads is lost too.
bool start_rebuild(self_ptr self, uint64_t id, const std::string& device) {
  auto& st = self->state;
  auto l = st.lineage.find(id);
  auto* e = st.objects.find(id);
  if (l == st.lineage.end() || e == nullptr ||
      check_objects(st.objects, l->second.item))
    return false;
  auto now = clock::now();
  balancer_state::record r;
  r.item = l->second.item;
  r.tenant = l->second.tenant;
  r.bytes = l->second.bytes;
  r.cost_units = l->second.cost_units;
  r.cls = l->second.cls;
  r.admitted_at = now;
  r.rebuild_of = id;
  r.keep_as = id;
  r.objects = objects_read(r.item);
  for (auto in : r.objects)
    st.objects.pin(in, unplaced_key);
  r.device_mask = item_mask(st, r);
  auto ticket = ++st.next_ticket;
  st.acct.book().admit(r.tenant, now);
  auto item_id = r.item.id;
  st.outstanding.emplace(ticket, std::move(r));
  e->rebuilding = true;
  audit_object(self, *e, device,
               "lost with the device, which held its only copy: item " +
                   std::to_string(item_id) + ", which made it, runs again");
  if (st.outstanding.at(ticket).device_mask == 0) {
    end_failed(self, ticket,
               make_error(errc::no_device_available,
                          "no device of its tenant's grant can run it"));
    return true;
  }
  st.outstanding.at(ticket).why =
      "re-run: object " + std::to_string(id) + " lost its every copy";
  enqueue(self, ticket, true);
  return true;
}

// Admits an item whose checks passed.
void admit(self_ptr self, int t, work_item item, end_sink sink,
           const item_shape& shape, clock::time_point now,
           const std::string& note, uint64_t job = 0,
           clock::time_point submitted = {}) {
  auto bytes = shape.bytes;
  auto& st = self->state;
  st.acct.book().admit(t, now);
  ++st.counters.admission.admitted;
  auto ticket = ++st.next_ticket;
  if (note.empty())
    audit_common(self, audit_kind::admitted, item, t, -1, bytes);
  else
    audit(self, audit_kind::admitted, item, "",
          std::to_string(bytes) + " bytes" + note);
  balancer_state::record r;
  r.cost_units = shape.cost.flops + shape.cost.bytes;
  r.tenant = t;
  r.bytes = bytes;
  r.cls = size_class(r.cost_units);
  r.admitted_at = now;
  r.job = job != 0 ? job : ++st.next_job;
  r.submitted = job != 0 ? submitted : now;
  r.objects = objects_read(item);
  for (auto id : r.objects)
    st.objects.pin(id, unplaced_key);
  if (item.keep_on_device)
    r.keep_as = st.objects.reserve_id();
  st.by_client.insert_or_assign(key_of(sink, item.key()), ticket);
  r.item = std::move(item);
  r.device_mask = item_mask(st, r);
  if (r.device_mask == 0 && objects_within(st, r))
    // Its objects are on devices of its grant, but on no one device: one
    // gathers them when it is placed (gather_objects).
    r.device_mask = item_mask(st, r, false);
  r.sink = std::move(sink);
  auto& rec = st.outstanding.emplace(ticket, std::move(r)).first->second;
  if (rec.device_mask == 0) {
    // Only devices outside its grant hold an object it reads.
    end_failed(self, ticket,
               make_error(errc::no_device_available,
                          "the devices holding the objects it reads are not "
                          "granted to tenant '" +
                              rec.item.tenant + "' or lack its kernel's code"));
    pump(self);
    return;
  }
  if (rec.item.gang > 1) {
    st.gangs_waiting.push_back(ticket);
    pump(self);
    return;
  }
  auto& rule = st.cfg.batch[static_cast<size_t>(rec.item.kernel)];
  if (rule.enabled && !st.closed && rec.objects.empty() && rec.keep_as == 0 &&
      shape.output_elements <= rule.max_item_elements) {
    if (auto key = batching::key_of(rec.item)) {
      // Waits for company: up to the preferred batch or the longest delay.
      rec.batching = true;
      auto& open = st.batches[*key];
      open.members.push_back(ticket);
      if (open.members.size() == 1) {
        open.due = now + rule.max_delay;
        self->delayed_send(self, rule.max_delay, batch_atom::value);
      }
      if (open.members.size() >= rule.preferred)
        flush_batch(self, *key);
      pump(self);
      return;
    }
  }
  if (place(self, ticket) == placement::later)
    enqueue(self, ticket);
  pump(self);
}

// Admits held-back items that fit now, in order, tenant by tenant.
void drain_held(self_ptr self, clock::time_point now) {
  auto& st = self->state;
  // Held items wait while the audit log cannot be written.
  if (st.audit_down && st.cfg.audit_fail_closed)
    return;
  for (size_t t = 0; t < st.held.size(); ++t) {
    auto& q = st.held[t];
    while (!q.empty() && !st.closed) {
      if (st.acct.book().check_admit(int(t), now))
        break;
      auto h = std::move(q.front());
      q.pop_front();
      admit(self, int(t), std::move(h.item), std::move(h.sink), h.shape, now,
            " (was held back)", h.job, h.submitted);
    }
  }
}

// Places items that wait for device memory and fit now, in order.
void drain_memory_waiting(self_ptr self) {
  auto& st = self->state;
  std::vector<uint64_t> waiting;
  waiting.reserve(st.memory_waiting.size());
  for (auto ticket : st.memory_waiting)
    if (auto i = st.outstanding.find(ticket);
        i != st.outstanding.end() && i->second.waiting_memory)
      waiting.push_back(ticket);
  st.memory_waiting.clear();
  // place() puts one that still does not fit back in memory_waiting.
  place_again(self, std::move(waiting), "waited for device memory");
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
  pump(self);
}

// Ends held and waiting items whose time is up.
void expire(self_ptr self, clock::time_point now) {
  auto& st = self->state;
  for (size_t t = 0; t < st.held.size(); ++t) {
    auto& q = st.held[t];
    // Deadlines come in order unless priorities reordered the queue (the
    // front has the highest, the back the lowest).
    bool in_order =
        q.empty() || q.front().item.priority == q.back().item.priority;
    for (size_t n = 0; n < q.size();) {
      if (q[n].deadline > now) {
        if (in_order)
          break;
        ++n;
        continue;
      }
      auto h = std::move(q[n]);
      q.erase(q.begin() + std::ptrdiff_t(n));
      auto why = st.acct.book().check_admit(int(t), now);
      ++st.counters.admission.timeouts;
      reject_held(
          self, h,
          make_error(why ? code_of(why) : errc::over_inflight_quota,
                     (why ? describe(why) : std::string{"held back"}) +
                         " (held back for " +
                         std::to_string(
                             st.acct.book().policy(int(t)).queue_timeout_ms) +
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
    // An earlier end may have placed or ended it meanwhile.
    auto i = st.outstanding.find(ticket);
    if (i == st.outstanding.end() || !i->second.waiting_memory)
      continue;
    auto& r = i->second;
    r.waiting_memory = false;
    ++st.counters.admission.timeouts;
    caf::error why;
    for (size_t d = 0; d < st.devices.size() && !why; ++d)
      if ((r.device_mask & (uint64_t{1} << d)) && st.acct.metered(d))
        why = st.acct.book().check_place(r.tenant, d, bytes_on(st, r, d));
    if (!why)
      why = r.memory_why;
    end_failed(
        self, ticket,
        make_error(why ? code_of(why) : errc::memory_limit,
                   (why ? describe(why) : std::string{"no memory"}) +
                       " (waited " +
                       std::to_string(
                           st.acct.book().policy(r.tenant).queue_timeout_ms) +
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

void on_submit(self_ptr self, work_item& item, const end_sink& sink) {
  auto& st = self->state;
  if (!sink) {
    // Its end could not be delivered: refused, and there is no one to tell
    // but the audit log and the counters.
    auto& adm = st.counters.admission;
    ++adm.rejected;
    ++adm.rejected_by_reason[to_string(errc::invalid_arguments)];
    audit(self, audit_kind::rejected, item, "",
          describe(make_error(errc::invalid_arguments,
                              "submitted without a client_sink: its end "
                              "could not be delivered")));
    return;
  }
  if (st.closed)
    return reject(self, item, sink,
                  make_error(errc::shutting_down, "the runtime is stopping"));
  if (st.audit_down && st.cfg.audit_fail_closed)
    return reject(self, item, sink,
                  make_error(errc::audit_unavailable,
                             "the audit log cannot be written (" +
                                 st.audit_why +
                                 "); admission resumes when it can"));
  auto t = st.acct.book().tenant_index(item.tenant);
  if (t < 0)
    return reject(self, item, sink, no_grant(item.tenant));
  auto& pol = st.acct.book().policy(t);
  item_shape shape;
  if (auto err = check_item(pol, item, shape))
    return reject(self, item, sink, std::move(err));
  bool objects = item.reads_objects();
  if (item.gang > 1 && (objects || item.keep_on_device))
    return reject(self, item, sink,
                  make_error(errc::invalid_arguments,
                             "a gang item neither reads objects nor is kept "
                             "on a device"));
  if (objects)
    if (auto err = check_objects(st.objects, item))
      return reject(self, item, sink, std::move(err));
  if ((pol.device_mask & code_mask(st, item)) == 0)
    return reject(self, item, sink,
                  make_error(errc::no_device_available,
                             "no device granted to tenant '" + item.tenant +
                                 "' has code for kernel " +
                                 std::string{kernels::name(item.kernel)} +
                                 (item.then.empty() ? "" : " or its chain") +
                                 (balancer::has_node_only(item)
                                      ? " (a kernel registered in this "
                                        "process runs on its devices and on "
                                        "real GPUs in host processes with "
                                        "code for their backend, not on "
                                        "remote hosts or simulated GPUs in "
                                        "host processes)"
                                      : "")));
  if (item.gang > 1) {
    balancer_state::record probe;
    probe.item.gang = item.gang;
    probe.item.tenant = item.tenant;
    probe.device_mask = pol.device_mask;
    if (auto why = gang_impossible(st, probe); !why.empty())
      return reject(self, item, sink,
                    make_error(errc::no_device_available, std::move(why)));
  }
  // An item reading objects takes less where their copies are: at best,
  // none of their bytes.
  auto ever = shape.bytes;
  if (objects)
    for (auto id : objects_read(item))
      if (auto* e = st.objects.find(id))
        ever -= std::min(ever, object_block_bytes(e->bytes()));
  if (auto err = st.acct.book().check_ever(t, ever, pol.device_mask))
    return reject(self, item, sink, std::move(err));
  auto key = key_of(sink, item.key());
  if (st.by_client.count(key) > 0)
    return reject(self, item, sink,
                  make_error(errc::duplicate_id,
                             "this client already has item " +
                                 std::to_string(item.id) +
                                 " in flight: the ends of the two could not "
                                 "be told apart"));
  auto now = st.now;
  auto& q = st.held[size_t(t)];
  auto limit = st.acct.book().check_admit(t, now);
  auto root = limit || q.empty() ? limit : q.front().limit;
  auto verdict = decide_admission(pol, std::move(limit), q.size(),
                                  q.empty() ? nullptr : &q.front().limit);
  using action = admission_verdict::action;
  if (verdict.what == action::admit)
    return admit(self, t, std::move(item), sink, shape, now, "");
  if (verdict.what == action::reject)
    return reject(self, item, sink, std::move(verdict.why));
  ++st.counters.admission.held;
  st.by_client.emplace(std::move(key), 0);
  // Admitted by priority, then in the order they came.
  auto p = item.priority;
  auto at = q.end();
  if (!q.empty() && q.back().item.priority < p)
    at = std::find_if(q.begin(), q.end(),
                      [&](auto& h) { return h.item.priority < p; });
  q.insert(at, {std::move(item), sink, ++st.next_job, now, shape,
                now + std::chrono::milliseconds(pol.queue_timeout_ms),
                std::move(verdict.why), std::move(root)});
  schedule_retry(self);
}

// Submits a batch of items in order, as if one by one.
void on_submit_many(self_ptr self, std::vector<work_item>& items,
                    const end_sink& sink) {
  if (items.size() <= max_submit_batch) {
    for (auto& item : items)
      on_submit(self, item, sink);
    return;
  }
  auto err = make_error(errc::invalid_arguments,
                        "a batch of " + std::to_string(items.size()) +
                            " items: one submit takes at most " +
                            std::to_string(max_submit_batch));
  if (!sink) {
    for (auto& item : items)
      on_submit(self, item, sink); // counted and audited as undeliverable
    return;
  }
  for (auto& item : items)
    reject(self, item, sink, err);
}

// The state of admitted item `r` (item_view::state), the device it is on
// and, while it waits, why.
void describe_record(const balancer_state& st, const balancer_state::record& r,
                     item_view& v) {
  auto device_name = [&](int32_t d) {
    return d >= 0 ? st.devices[size_t(d)].info.name : std::string{};
  };
  // A member of a merged launch is where its launch is.
  const balancer_state::record* where = &r;
  if (r.batch != 0)
    if (auto p = st.outstanding.find(r.batch); p != st.outstanding.end())
      where = &p->second;
  if (!where->slices.empty()) {
    // A gang: running once a slice runs, placed once one is placed.
    bool placed = false, running = false;
    for (auto t : where->slices)
      if (auto q = st.outstanding.find(t); q != st.outstanding.end()) {
        auto& slice = q->second;
        if (slice.device < 0)
          continue;
        placed = true;
        running = running || slice.sent;
        v.device += (v.device.empty() ? "" : ",") + device_name(slice.device);
      }
    v.state = running ? "running" : placed ? "placed" : "queued";
    if (!placed)
      v.detail =
          "a gang of " + std::to_string(r.item.gang) + " waits for its devices";
  } else if (where->device >= 0) {
    v.state = where->sent ? "running" : "placed";
    v.device = device_name(where->device);
  } else {
    v.state = "queued";
    if (r.batching)
      v.detail = "waits to be merged with items like it";
    else if (r.waiting_memory)
      v.detail = "waits for device memory";
    else if (r.waiting_rebuild != 0)
      v.detail = "waits for object " + std::to_string(r.waiting_rebuild) +
                 " to be made again";
    else if (r.park_deadline != clock::time_point{})
      v.detail = "no device of its grant takes work now";
    else if (r.attempts > 0 && !r.why.empty())
      v.detail = "to be placed again: " + r.why;
    else
      v.detail = "waits for a device";
  }
  v.attempts = r.attempts;
  v.cancelling = r.cancelled;
}

item_view view_of(const balancer_state& st, const balancer_state::record& r) {
  item_view v;
  v.job = r.job;
  v.id = r.item.id;
  v.client = client_of(r.sink);
  v.tenant = r.item.tenant;
  v.kernel = kernels::name(r.item.kernel);
  v.priority = r.item.priority;
  v.age_ns = ns_between(r.submitted, st.now);
  describe_record(st, r, v);
  return v;
}

item_view view_of(const balancer_state& st,
                  const balancer_state::held_item& h) {
  item_view v;
  v.job = h.job;
  v.id = h.item.id;
  v.client = client_of(h.sink);
  v.tenant = h.item.tenant;
  v.kernel = kernels::name(h.item.kernel);
  v.priority = h.item.priority;
  v.state = "held";
  v.age_ns = ns_between(h.submitted, st.now);
  v.detail = describe(h.why);
  return v;
}

bool matches(const item_filter& f, uint64_t job, const std::string& tenant,
             const end_sink& sink) {
  return (f.job == 0 || f.job == job) &&
         (f.tenant.empty() || f.tenant == tenant) &&
         (f.client == 0 || f.client == client_of(sink));
}

// Every live item `f` takes (a client's: not the balancer's own records):
// held ones first, tenant by tenant in the order they are to be admitted
// (by priority, then as they came), then the admitted ones by job number.
std::vector<item_view> live_items(const balancer_state& st,
                                  const item_filter& f) {
  std::vector<item_view> out;
  for (auto& q : st.held)
    for (auto& h : q)
      if (matches(f, h.job, h.item.tenant, h.sink))
        out.push_back(view_of(st, h));
  size_t held = out.size();
  for (auto& [ticket, r] : st.outstanding)
    if (r.job != 0 && matches(f, r.job, r.item.tenant, r.sink))
      out.push_back(view_of(st, r));
  std::sort(
      out.begin() + std::ptrdiff_t(held), out.end(),
      [](const item_view& a, const item_view& b) { return a.job < b.job; });
  return out;
}

// Cancels admitted item `ticket` (a client's) for `who`: one that waits
// (ready queue, open batch, parked, waiting for memory or for its gang's
// devices) or is placed and not yet sent ends now; one that runs, or is
// part of a launch, ends with cancelled when its launch ends. Audited once
// per item; false when it was cancelled already.
bool cancel_admitted(self_ptr self, uint64_t ticket, const std::string& who) {
  auto& st = self->state;
  auto& r = st.outstanding.at(ticket);
  bool waits = r.device < 0 || !r.sent;
  if (r.cancelled) {
    // Cancelled while it ran, then back to waiting: it ends now.
    if (r.device < 0 && r.batch == 0 && r.slices.empty())
      end_failed(self, ticket,
                 make_error(errc::cancelled, "cancelled by " + r.cancelled_by));
    return false;
  }
  auto v = view_of(st, r);
  audit(self, audit_kind::cancel, r.item, v.device,
        "cancelled by " + who + " while " + v.state +
            (v.device.empty() ? "" : " on " + v.device) + " (job " +
            std::to_string(r.job) + ")");
  ++st.counters.cancelled;
  // A member of a merged launch not sent yet: the launch comes apart (its
  // other members are placed again) and the member ends now.
  if (r.batch != 0)
    if (auto b = st.outstanding.find(r.batch);
        b != st.outstanding.end() && !b->second.sent) {
      auto& members = b->second.members;
      members.erase(std::remove(members.begin(), members.end(), ticket),
                    members.end());
      r.batch = 0;
      if (b->second.device >= 0) {
        // A half-open circuit's probe slot it held goes back.
        st.devices[size_t(b->second.device)].breaker.abandoned();
        unplace(self, b->second);
      }
      dissolve(self, b->first);
    }
  // A gang none of whose slices was sent ends now (its slices let go).
  bool slice_sent = std::any_of(r.slices.begin(), r.slices.end(), [&](auto t) {
    auto q = st.outstanding.find(t);
    return q != st.outstanding.end() && q->second.sent;
  });
  if (waits && r.batch == 0 && !slice_sent) {
    end_failed(self, ticket,
               make_error(errc::cancelled, "cancelled by " + who));
  } else {
    r.cancelled = true;
    r.cancelled_by = who;
  }
  return true;
}

// Cancels held-back item `held` (it never ran; out of its queue) for
// `who`.
void cancel_held(self_ptr self, balancer_state::held_item held,
                 const std::string& who) {
  auto& st = self->state;
  audit(self, audit_kind::cancel, held.item, "",
        "cancelled by " + who + " while held (job " + std::to_string(held.job) +
            ")");
  ++st.counters.cancelled;
  reject_held(self, held, make_error(errc::cancelled, "cancelled by " + who));
}

// Cancels every live item `f` takes, for `who`; returns how many (an item
// cancelled already is not counted again).
uint64_t cancel_items(self_ptr self, const item_filter& f,
                      const std::string& who) {
  auto& st = self->state;
  uint64_t n = 0;
  for (auto& q : st.held) {
    std::vector<balancer_state::held_item> taken;
    for (auto h = q.begin(); h != q.end();)
      if (matches(f, h->job, h->item.tenant, h->sink)) {
        taken.push_back(std::move(*h));
        h = q.erase(h);
      } else {
        ++h;
      }
    for (auto& h : taken)
      cancel_held(self, std::move(h), who);
    n += taken.size();
  }
  std::vector<uint64_t> tickets;
  for (auto& [ticket, r] : st.outstanding)
    if (r.job != 0 && matches(f, r.job, r.item.tenant, r.sink))
      tickets.push_back(ticket);
  std::sort(tickets.begin(), tickets.end());
  // What the ends free is looked at once all are cancelled: held items
  // admitted meanwhile could merge with items still to be cancelled.
  bool waking = std::exchange(st.waking, true);
  for (auto t : tickets)
    if (st.outstanding.count(t) > 0 && cancel_admitted(self, t, who))
      ++n;
  st.waking = waking;
  if (!waking)
    wake(self);
  return n;
}

void cancel(self_ptr self, uint64_t id, const end_sink& sink) {
  auto& st = self->state;
  auto k = st.by_client.find(key_of(sink, id));
  if (k == st.by_client.end())
    return;
  auto ticket = k->second;
  if (ticket == 0) {
    // Held back before admission: it never ran.
    for (auto& q : st.held)
      for (auto h = q.begin(); h != q.end(); ++h)
        if (h->item.key() == id && h->sink == sink) {
          auto held = std::move(*h);
          q.erase(h);
          cancel_held(self, std::move(held), "its client");
          return;
        }
    return;
  }
  cancel_admitted(self, ticket, "its client");
}

// Every item of `sink` with work_item::id `id`, by the key the balancer
// knows it by, then cancelled one by one. A scan: cancelling is rare, and
// keeping an index by id would cost every submission.
void cancel_by_item_id(self_ptr self, uint64_t id, const end_sink& sink) {
  auto& st = self->state;
  auto address = sink.address();
  std::vector<uint64_t> keys;
  // Admitted items by their record, held-back ones (ticket 0) by the queues
  // that hold them.
  for (auto& [key, ticket] : st.by_client)
    if (ticket != 0 && key.sink == address &&
        st.outstanding.at(ticket).item.id == id)
      keys.push_back(key.id);
  for (auto& q : st.held)
    for (auto& h : q)
      if (h.sink == sink && h.item.id == id)
        keys.push_back(h.item.key());
  for (auto key : keys)
    cancel(self, key, sink);
}

// Device `index` (re)joined with a new actor.
void device_started(self_ptr self, uint32_t index, device_change& c) {
  auto& st = self->state;
  touch(st, index);
  auto& s = st.devices.at(index);
  // An operator's offline then online starts a new actor too; it is not a
  // restart (cohort_device_restarts_total counts comebacks after a loss or
  // a sibling's restart).
  if (s.started && !s.operator_offline) {
    ++s.stats.restarts;
    device_event(self, s.info.name, "device restarted and back online");
  } else if (s.started) {
    device_event(self, s.info.name, "device back online (operator)");
  }
  s.started = true;
  s.operator_offline = false;
  s.handle = std::move(c.handle);
  // A new process: it has none of this process's kernels yet.
  s.code_sent.reset();
  s.code_refused.reset();
  // A new process or connection: its crossing is measured again.
  s.crossing = {};
  s.stats.crossing_ns = 0;
  s.stats.crossing_ns_per_byte = 0;
  s.status = c.status;
  s.stats.status = s.status;
  s.backlog_ns = 0;
  forget_inputs(st, index);
  s.placed = 0;
  s.placed_units = 0;
  s.sent = 0;
  s.queued.clear();
  // The supervisor reset it before it came back.
  st.acct.release(index);
  retry_parked(self);
  wake(self);
}

// Device `index` left: lost, restarting, offline or given up; what it held
// moves on with `c.reason`.
void device_left(self_ptr self, uint32_t index, device_change& c) {
  auto& st = self->state;
  touch(st, index);
  auto& s = st.devices.at(index);
  auto& reason = c.reason;
  bool permanent = c.status == device_status::offline;
  // Taken down on purpose (an operator, a sibling's restart): not a loss
  // of this device.
  bool loss =
      c.cause == device_cause::fault || c.cause == device_cause::crashed ||
      c.cause == device_cause::gave_up || c.cause == device_cause::removed;
  if ((takes_work(s.status) || s.status == device_status::draining) && loss) {
    ++s.stats.losses;
    if (c.cause != device_cause::crashed)
      note_failure(self, index, reason);
  }
  s.status = permanent ? device_status::offline : device_status::resetting;
  s.operator_offline = c.cause == device_cause::offline;
  s.stats.status = s.status;
  s.handle = device_actor{};
  s.backlog_ns = 0;
  forget_inputs(st, index);
  // Copies from it to other devices end here: what they stored is
  // dropped, so that an object whose only copy was here is made again.
  // Copies to it end too.
  for (auto i = st.copying.begin(); i != st.copying.end();) {
    if (i->second.to == index) {
      // device_lost below refunds and forgets what was stored there.
      i = st.copying.erase(i);
      continue;
    }
    if (i->second.from != index) {
      ++i;
      continue;
    }
    auto to = i->second.to;
    if (auto* e = st.objects.find(i->first);
        e != nullptr && objects::has_device(e->storing, to)) {
      st.objects.unstored(e->id, to);
      auto c = object_charge(st, *e);
      if (c.tenant >= 0 && st.acct.metered(to))
        st.acct.refund({&c, 1}, to);
    }
    i = st.copying.erase(i);
  }
  // Its objects' copies are gone with its actor (a new one starts without
  // any); objects without another copy are lost.
  auto copies = st.objects.device_lost(index);
  for (auto* ids : {&copies.kept, &copies.rerun, &copies.lost})
    for (auto id : *ids) {
      auto& e = *st.objects.find(id);
      auto c = object_charge(st, e);
      if (c.tenant >= 0 && st.acct.metered(index)) {
        st.acct.refund({&c, 1}, index);
        if (!permanent)
          st.acct.strand({&c, 1}, index);
      }
      // Those made again are audited when their producing item is queued
      // again.
      if (ids != &copies.rerun)
        audit_object(self, e, s.info.name,
                     ids == &copies.kept
                         ? "its copy here went with the device; other copies "
                           "remain"
                         : "lost with the device: no other copy");
      ++st.counters.objects.copies_lost;
      if (ids == &copies.lost)
        ++st.counters.objects.lost;
    }
  // Queued tickets are re-placed below with the ones the actor held.
  s.sent = 0;
  s.queued.clear();
  device_event(self, s.info.name,
               std::string{permanent ? "device offline: "
                           : loss    ? "device lost, restarting: "
                                     : "device restarting: "} +
                   c.why);
  std::vector<uint64_t> moving;
  for (auto& [ticket, r] : st.outstanding)
    if (r.device == int32_t(index))
      moving.push_back(ticket);
  // In the order they were admitted, as they will wait.
  std::sort(moving.begin(), moving.end());
  if (permanent) {
    // The supervisor released its memory before it gave up on it.
    st.acct.release(index);
  } else {
    // The device's ledger holds the moving items' blocks until its reset:
    // the book keeps them charged there too, so that the two agree on what
    // each tenant may still take elsewhere.
    for (auto ticket : moving)
      with_charges(st, st.outstanding.at(ticket),
                   [&](balancer::charges cs) { st.acct.strand(cs, index); });
  }
  // Objects kept from an item's output are made again by re-running that
  // item (in id order: an item's inputs are older than its output); items
  // reading them wait. Marked first, so that one made from another waits
  // for it rather than fail.
  for (auto id : copies.rerun)
    st.objects.find(id)->rebuilding = true;
  for (auto id : copies.rerun)
    if (!start_rebuild(self, id, s.info.name))
      rebuild_failed(self, id,
                     "an object that the item which made it reads is lost "
                     "too");
  // Items reading a lost object end with object_lost, placed or not.
  if (!copies.lost.empty() || !copies.rerun.empty()) {
    std::vector<uint64_t> failing;
    for (auto& [ticket, r] : st.outstanding)
      for (auto id : r.objects)
        if (auto* e = st.objects.find(id); e != nullptr && !e->has_host &&
                                           e->replicas == 0 &&
                                           e->storing == 0 && !e->rebuilding) {
          failing.push_back(ticket);
          break;
        }
    for (auto ticket : failing)
      end_failed(self, ticket,
                 make_error(errc::object_lost,
                            "an object it reads was lost with " + s.info.name +
                                ", which held its only copy"));
  }
  for (auto ticket : moving)
    if (st.outstanding.count(ticket) > 0)
      replace_after_failure(self, ticket, reason, true);
  // Parked items whose devices are all gone for good cannot wait longer.
  if (permanent)
    retry_parked(self);
  // What it was asked and has not answered fails now, as its items moved
  // (the answer of a device in a host process that was lost never comes).
  fail_asks(self, index,
            make_error(errc::device_lost, s.info.name + " left: " + c.why));
  wake(self);
}

// Device `index` is now available, degraded or draining while its actor
// keeps running.
void device_health(self_ptr self, uint32_t index, const device_change& c) {
  auto& st = self->state;
  touch(st, index);
  auto& s = st.devices.at(index);
  if (!s.handle)
    return;
  s.status = c.status;
  s.stats.status = s.status;
  if (s.status == device_status::draining) {
    // What runs there finishes; what waits for it moves on now.
    auto queued = std::move(s.queued);
    s.queued = {};
    std::vector<uint64_t> moved;
    for (auto& q : queued) {
      auto i = st.outstanding.find(q.ticket);
      if (i == st.outstanding.end() || i->second.device != int32_t(index))
        continue;
      // A gang's slice stays: its gang holds the device.
      if (i->second.gang_parent != 0) {
        s.queued.push_back(q);
        continue;
      }
      s.breaker.abandoned();
      unplace(self, i->second);
      --i->second.attempts;
      moved.push_back(q.ticket);
    }
    place_again(self, std::move(moved), "device draining: " + c.why);
    send_queued(self, index);
  } else {
    retry_parked(self);
  }
  wake(self);
}

// The supervisor's word on a device (see device_change).
void on_device_change(self_ptr self, device_change& c) {
  auto& st = self->state;
  if (c.index >= st.devices.size())
    return;
  auto& s = st.devices[c.index];
  if (c.generation < s.generation) {
    // About an actor that has been replaced since: stale.
    return;
  }
  s.generation = c.generation;
  if (st.trace)
    st.trace->add({.begin_ns = steady_ns(st.now),
                   .device = int32_t(c.index),
                   .kind = trace_kind::device},
                  std::string{to_string(c.status)} + " (" + to_string(c.cause) +
                      ")" + (c.why.empty() ? "" : ": " + c.why));
  switch (c.cause) {
  case device_cause::started:
    return device_started(self, c.index, c);
  case device_cause::health:
    return device_health(self, c.index, c);
  case device_cause::fault:
  case device_cause::crashed:
  case device_cause::restarting:
  case device_cause::offline:
  case device_cause::gave_up:
  case device_cause::removed:
    return device_left(self, c.index, c);
  }
}

caf::result<bool> start_trace(self_ptr self, uint64_t max_events) {
  auto& st = self->state;
  if (max_events == 0 || max_events > max_trace_events)
    return make_error(errc::invalid_arguments,
                      "a trace keeps 1 to " + std::to_string(max_trace_events) +
                          " events, not " + std::to_string(max_events));
  if (st.trace)
    return make_error(errc::invalid_transition,
                      "a trace is being recorded already (" +
                          std::to_string(st.trace->size()) +
                          " events so far): stop it first");
  st.trace = std::make_unique<balancer::trace_recorder>(
      max_events, steady_ns(st.now), st.now_wall_ns);
  return true;
}

// The trace so far, with the names its indexes refer to; `stop` ends it.
caf::result<trace_snapshot> take_trace(self_ptr self, bool stop) {
  auto& st = self->state;
  if (!st.trace)
    return make_error(errc::invalid_transition,
                      "no trace is being recorded: start one first");
  std::vector<trace_device> devices;
  for (auto& s : st.devices) {
    auto& x = s.info;
    devices.push_back({x.name, to_string(x.kind), x.simulated,
                       std::max(1u, x.streams),
                       !x.remote.empty() ? "remote host " + x.remote
                       : x.host_process  ? std::string{"host process"}
                                         : std::string{}});
  }
  std::vector<std::string> tenants;
  for (size_t t = 0; t < st.acct.book().tenants(); ++t)
    tenants.push_back(st.acct.book().policy(int(t)).tenant);
  auto out = st.trace->snapshot(std::move(devices), std::move(tenants),
                                steady_ns(st.now), stop);
  if (stop)
    st.trace.reset();
  return out;
}

// What every tenant uses of its lease now, with its items waiting (held
// back or waiting for device memory).
quota_usage live_usage(const balancer_state& st) {
  auto u = st.acct.book().usage();
  for (size_t t = 0; t < u.tenants.size() && t < st.held.size(); ++t)
    u.tenants[t].waiting = st.held[t].size();
  for (auto ticket : st.memory_waiting)
    if (auto i = st.outstanding.find(ticket);
        i != st.outstanding.end() && i->second.waiting_memory)
      ++u.tenants[size_t(i->second.tenant)].waiting;
  return u;
}

// The devices' names, by index.
std::vector<std::string> device_names(const balancer_state& st) {
  std::vector<std::string> out;
  out.reserve(st.devices.size());
  for (auto& d : st.devices)
    out.push_back(d.info.name);
  return out;
}

// Where a new object of tenant `t` goes: device `hint` (by name) or the
// granted device with memory that takes work and has the least backlog.
// -1: host memory only (a CPU worker named, or no device with memory).
caf::expected<int32_t> object_device(const balancer_state& st, int t,
                                     const std::string& hint) {
  auto mask = st.acct.book().policy(t).device_mask;
  if (!hint.empty()) {
    for (size_t d = 0; d < st.devices.size(); ++d) {
      auto& s = st.devices[d];
      if (s.info.name != hint)
        continue;
      if (!st.acct.metered(d))
        return -1;
      if ((mask >> d & 1) == 0)
        return make_error(errc::not_granted,
                          "device " + hint + " is not granted to tenant '" +
                              st.acct.book().policy(t).tenant + "'");
      if (!takes_work(s.status))
        return make_error(errc::no_device_available,
                          "device " + hint + " does not take work now (" +
                              std::string{to_string(s.status)} + ")");
      return int32_t(d);
    }
    return make_error(errc::unknown_device,
                      "no device is named '" + hint + "'");
  }
  int32_t pick = -1;
  bool any_memory = false;
  for (size_t d = 0; d < st.devices.size(); ++d) {
    auto& s = st.devices[d];
    if (!st.acct.metered(d) || (mask >> d & 1) == 0)
      continue;
    any_memory = true;
    if (!takes_work(s.status))
      continue;
    if (pick < 0 || s.backlog_ns < st.devices[size_t(pick)].backlog_ns)
      pick = int32_t(d);
  }
  if (any_memory && pick < 0)
    return make_error(errc::no_device_available,
                      "no device with memory granted to tenant '" +
                          st.acct.book().policy(t).tenant + "' takes work now");
  return pick;
}

// Stores the new object `id` (its host copy) on device `d` and answers
// `rp` once it is there; makes room first, waiting for spills if need be.
void store_object(self_ptr self, uint64_t id, size_t d,
                  caf::typed_response_promise<object_info> rp) {
  auto& st = self->state;
  auto* e = st.objects.find(id);
  if (e == nullptr)
    return;
  if (st.closed) {
    st.objects.erase(id);
    rp.deliver(make_error(errc::shutting_down, "the runtime is stopping"));
    return;
  }
  auto c = object_charge(st, *e);
  caf::error why;
  switch (make_room(self, {&c, 1}, d, "object " + std::to_string(id), why)) {
  case room::made:
    break;
  case room::coming:
    st.after_spill.push_back([=]() mutable { store_object(self, id, d, rp); });
    return;
  case room::none:
    st.objects.erase(id);
    rp.deliver(std::move(why));
    return;
  }
  if (!st.devices[d].handle) {
    st.objects.erase(id);
    rp.deliver(make_error(errc::no_device_available,
                          st.devices[d].info.name + " left"));
    return;
  }
  store_copy(
      self, id, d, e->host,
      [=](const objects::object_entry& e) mutable {
        auto& st = self->state;
        ++st.counters.objects.made;
        audit_object(self, e, st.devices[d].info.name, "stored");
        rp.deliver(describe_object(e, device_names(st), steady_ns(st.now)));
      },
      [=](caf::error err) mutable {
        auto& st = self->state;
        if (st.objects.find(id) != nullptr)
          st.objects.erase(id);
        rp.deliver(std::move(err));
      });
}

caf::result<object_info> put_object(self_ptr self, const std::string& tenant,
                                    host_buffer data, const std::string& hint) {
  auto& st = self->state;
  if (st.closed)
    return make_error(errc::shutting_down, "the runtime is stopping");
  auto t = st.acct.book().tenant_index(tenant);
  if (t < 0)
    return no_grant(tenant);
  if (data.object() != 0)
    return make_error(errc::invalid_arguments,
                      "an object is made from host data, not from another "
                      "object's name");
  if (data.size() == 0)
    return make_error(errc::invalid_arguments,
                      "an object holds at least one element");
  auto where = object_device(st, t, hint);
  if (!where)
    return where.error();
  auto now = steady_ns(st.now);
  auto type = data.type();
  auto n = data.size();
  auto id = st.objects.create(tenant, type, n, std::move(data), now);
  if (*where < 0) {
    auto& e = *st.objects.find(id);
    ++st.counters.objects.made;
    audit_object(self, e, "", "made in host memory (no device with memory)");
    return describe_object(e, device_names(st), now);
  }
  auto rp = self->make_response_promise<object_info>();
  store_object(self, id, size_t(*where), rp);
  return rp;
}

// Object `id` of `tenant` (of any tenant when it is empty: an operator,
// or the embedding application's own export), for a request while the
// runtime runs. Errors: shutting_down, invalid_arguments, not_granted.
caf::expected<objects::object_entry*>
tenant_object(balancer_state& st, const std::string& tenant, uint64_t id) {
  if (st.closed)
    return make_error(errc::shutting_down, "the runtime is stopping");
  auto* e = st.objects.find(id);
  if (e == nullptr)
    return make_error(errc::invalid_arguments,
                      "object " + std::to_string(id) + " does not exist");
  if (!tenant.empty() && e->tenant != tenant)
    return make_error(errc::not_granted,
                      "object " + std::to_string(id) +
                          " belongs to another tenant than '" + tenant + "'");
  return e;
}

// Delivers a copy of object `id` to `rp`: its host copy, else one read back
// from a device that holds it; when it is being made again, once it is.
// object_lost when none is left. A device lost while it is read leaves it
// to another copy, or to its item run again: the object is looked at anew.
void deliver_object(self_ptr self, uint64_t id,
                    caf::typed_response_promise<host_buffer> rp) {
  auto& st = self->state;
  auto* e = st.objects.find(id);
  if (st.stopping) {
    rp.deliver(make_error(errc::shutting_down, "the runtime stopped"));
    return;
  }
  if (e == nullptr) {
    rp.deliver(make_error(errc::invalid_arguments,
                          "object " + std::to_string(id) +
                              " was freed while it was read"));
    return;
  }
  if (e->rebuilding) {
    // Being made again: the copy comes when its item has run again.
    st.after_rebuild[id].push_back(
        [=]() mutable { deliver_object(self, id, rp); });
    return;
  }
  if (e->has_host) {
    rp.deliver(e->host);
    return;
  }
  for (size_t d = 0; d < st.devices.size(); ++d) {
    if (!objects::has_device(e->replicas, d) || !st.devices[d].handle)
      continue;
    ask_device<host_buffer>(
        self, d, [=](host_buffer& b) mutable { rp.deliver(std::move(b)); },
        [=](caf::error& err) mutable {
          auto* e = self->state.objects.find(id);
          if (e == nullptr || !objects::has_device(e->replicas, d)) {
            // Freed, or its copy went with its device meanwhile.
            deliver_object(self, id, rp);
            return;
          }
          rp.deliver(std::move(err));
        },
        read_atom::value, id);
    return;
  }
  rp.deliver(make_error(errc::object_lost,
                        "object " + std::to_string(id) +
                            ": every copy was lost with its device"));
}

caf::result<host_buffer> get_object(self_ptr self, const std::string& tenant,
                                    uint64_t id) {
  auto& st = self->state;
  auto found = tenant_object(st, tenant, id);
  if (!found)
    return found.error();
  auto* e = *found;
  st.objects.touch(id);
  if (e->has_host && !e->rebuilding)
    return e->host;
  auto rp = self->make_response_promise<host_buffer>();
  deliver_object(self, id, rp);
  return rp;
}

// Sharing objects with other processes (docs/objects.md, "Sharing across
// processes"). The share socket's server asks; the balancer decides.

caf::result<std::string> export_object(self_ptr self, const std::string& tenant,
                                       uint64_t id, const share_grant& grant) {
  auto& st = self->state;
  auto found = tenant_object(st, tenant, id);
  if (!found)
    return found.error();
  auto* e = *found;
  if (grant.uid < -1 || grant.uid > int64_t{UINT32_MAX - 1})
    return make_error(errc::invalid_arguments,
                      "an export's user id is -1 (the runtime's user) or a "
                      "user id, not " +
                          std::to_string(grant.uid));
  if (!e->has_host && e->replicas == 0 && e->storing == 0 && !e->rebuilding)
    return make_error(errc::object_lost,
                      "object " + std::to_string(id) +
                          " was lost with its device and cannot be exported");
  auto token = st.shares.add_export(id, e->tenant, grant);
  ++st.counters.objects.exported;
  auto uid = grant.uid < 0 ? st.own_uid : uint32_t(grant.uid);
  audit_object(
      self, *e, "",
      "exported as " + token.substr(0, 8) + "… (" +
          (grant.write ? "read-write" : "read-only") + ", user " +
          std::to_string(uid) +
          (grant.max_attached != 0
               ? ", at most " + std::to_string(grant.max_attached) + " attached"
               : "") +
          ")");
  return token;
}

caf::result<bool> unexport_object(self_ptr self, const std::string& tenant,
                                  const std::string& token) {
  auto& st = self->state;
  auto* x = st.shares.find_export(token);
  if (x == nullptr || (!tenant.empty() && x->tenant != tenant))
    return false;
  auto object = x->object;
  st.shares.revoke(token, tenant);
  ++st.counters.objects.unexported;
  if (auto* e = st.objects.find(object))
    audit_object(self, *e, "", "export " + token.substr(0, 8) + "… revoked");
  return true;
}

// A refused attach: counted and audited (with the peer, never the token).
caf::error refuse_attach(self_ptr self, const share_peer& peer,
                         caf::error why) {
  auto& st = self->state;
  ++st.counters.objects.attach_refused;
  st.audit.add(self,
               audit_event{audit_kind::object, "", 0, "", "",
                           "attach refused for process " +
                               std::to_string(peer.pid) + " (user " +
                               std::to_string(peer.uid) + "): " + describe(why),
                           wall_clock_ns()});
  return why;
}

// A new attachment of object `id` through copy `key` (a device, or
// unplaced_key for a snapshot of the host copy), mapped as `h`.
attachment_info attached(self_ptr self, const std::string& token, uint64_t id,
                         uint32_t key, const share_peer& peer, bool write,
                         share_handle h) {
  auto& st = self->state;
  auto& e = *st.objects.find(id);
  auto aid = st.shares.attach(token, id, peer, write,
                              key == unplaced_key ? -1 : int32_t(key));
  ++st.counters.objects.attaches;
  st.counters.objects.attached_now = st.shares.attachments();
  audit_object(self, e, h.device,
               "attached by process " + std::to_string(peer.pid) + " (user " +
                   std::to_string(peer.uid) + "), " +
                   (write ? "read-write" : "read-only") + ", attachment " +
                   std::to_string(aid));
  attachment_info out;
  out.id = aid;
  out.object = describe_object(e, device_names(st), steady_ns(st.now));
  out.object.attached = st.shares.attached_to(id);
  out.object.exports = st.shares.exports_of(id);
  out.handle = std::move(h);
  out.writable = write;
  return out;
}

// Why a read-write attach of object `e` through its copy on device `d`
// must wait, if it must: writes would make every other copy stale, so it
// needs them idle (no item reading them, nothing attached to them, no copy
// being stored or spilled).
caf::error write_blocked(const balancer_state& st,
                         const objects::object_entry& e, size_t d) {
  auto busy = [&](const std::string& what) {
    return make_error(errc::invalid_arguments,
                      "object " + std::to_string(e.id) + " is " + what +
                          "; a read-write attach needs its other copies "
                          "idle (try again)");
  };
  for (auto& [key, n] : e.readers)
    if (key != uint32_t(d))
      return busy(key < st.devices.size()
                      ? "being read on " + st.devices[key].info.name
                      : std::string{"being read from its host copy"});
  for (auto& [key, n] : e.attached)
    if (key != uint32_t(d))
      return busy("attached through another copy");
  if ((e.storing & ~objects::device_bit(d)) != 0)
    return busy("being stored on another device");
  if (st.spilling.count(e.id) != 0)
    return busy("being spilled to host memory");
  if (st.copying.count(e.id) != 0)
    return busy("being copied to another device");
  return caf::none;
}

// A read-write attach keeps one copy, the one on `d`: the others and the
// host copy are dropped, since writes would make them stale.
void keep_only_copy(self_ptr self, uint64_t id, size_t d) {
  auto& st = self->state;
  auto* e = st.objects.find(id);
  // Written in place, it is no longer what its producing item makes, nor
  // what the objects made from it were made from.
  drop_lineage(self, id);
  drop_lineages_reading(self, id);
  st.copying.erase(id);
  for (size_t i = 0; i < st.devices.size(); ++i)
    if (i != d && objects::has_device(e->replicas, i))
      evict_copy(self, id, i, "a read-write attach keeps one copy");
  if (e->has_host) {
    st.objects.drop_host(id);
    audit_object(self, *e, "",
                 "host copy dropped: a read-write attach keeps one copy");
  }
}

caf::result<attachment_info> attach_object(self_ptr self,
                                           const std::string& token,
                                           const share_peer& peer, bool write) {
  auto& st = self->state;
  if (st.closed)
    return make_error(errc::shutting_down, "the runtime is stopping");
  auto ok = st.shares.check(token, peer, write, st.own_uid);
  if (!ok)
    return refuse_attach(self, peer, ok.error());
  auto id = (*ok)->object;
  auto* e = st.objects.find(id);
  if (e == nullptr) {
    st.shares.object_gone(id);
    return refuse_attach(self, peer,
                         make_error(errc::not_granted,
                                    "no export has this token (unknown, "
                                    "revoked, or its object was freed)"));
  }
  // The copy to map: one on a device (the first that holds it). Not one
  // in a host process or on a remote host: a descriptor for its memory
  // would name a file of that process, not of this one.
  int32_t d = -1;
  bool hosted_copy = false;
  for (size_t i = 0; i < st.devices.size() && d < 0; ++i) {
    if (!objects::has_device(e->replicas, i) || !st.devices[i].handle ||
        !st.acct.metered(i))
      continue;
    if (st.devices[i].info.elsewhere())
      hosted_copy = true;
    else
      d = int32_t(i);
  }
  if (d < 0 && hosted_copy && (write || !e->has_host))
    return refuse_attach(
        self, peer,
        make_error(errc::invalid_arguments,
                   "object " + std::to_string(id) +
                       " is held by a device in a host process or on a "
                       "remote host, whose memory another process cannot "
                       "map; read it with get"));
  if (write) {
    if (d < 0)
      return refuse_attach(
          self, peer,
          make_error(errc::invalid_arguments,
                     "object " + std::to_string(id) +
                         " has no copy on a device; only device copies are "
                         "attached read-write"));
    if (auto err = write_blocked(st, *e, size_t(d)))
      return refuse_attach(self, peer, std::move(err));
  }
  if (d < 0) {
    if (e->rebuilding)
      return refuse_attach(
          self, peer,
          make_error(errc::no_device_available,
                     "object " + std::to_string(id) +
                         " is being made again after its device was lost; "
                         "attach again when it is"));
    // Only the host copy (a CPU-only fleet, or every device copy evicted):
    // a sealed memfd with a snapshot of it, read-only by construction.
    if (!e->has_host)
      return refuse_attach(
          self, peer,
          make_error(errc::object_lost, "object " + std::to_string(id) +
                                            " has no copy left to attach to"));
    auto fd = objects::sealed_snapshot(e->host.view().data,
                                       e->host.view().bytes(), "cohort-object");
    if (!fd)
      return refuse_attach(self, peer, fd.error());
    share_handle h;
    h.kind = "memfd";
    h.fd = *fd;
    h.offset = 0;
    h.region_bytes = e->bytes();
    h.device = "host";
    st.objects.attach(id, uint32_t(unplaced_key));
    return attached(self, token, id, uint32_t(unplaced_key), peer, false,
                    std::move(h));
  }
  // Held (and its copy kept where it is) while the device is asked.
  st.objects.attach(id, uint32_t(d));
  auto rp = self->make_response_promise<attachment_info>();
  // The share socket's thread waits for this answer (docs/objects.md: a
  // hung device holds the socket until the watchdog takes it down).
  ask_device<share_handle>(
      self, size_t(d),
      [=](share_handle& h) mutable {
        auto& st = self->state;
        stamp(st);
        if (st.objects.find(id) == nullptr) {
          if (h.fd >= 0)
            ::close(h.fd);
          rp.deliver(
              make_error(errc::object_lost, "object " + std::to_string(id) +
                                                " went while it was attached"));
          return;
        }
        if (write) {
          // Checked again: items may have started reading another copy
          // meanwhile. Only then are the other copies dropped.
          if (auto err = write_blocked(st, *st.objects.find(id), size_t(d))) {
            if (h.fd >= 0)
              ::close(h.fd);
            if (st.objects.detach(id, uint32_t(d)))
              free_object(self, id, "its last holder let go");
            rp.deliver(refuse_attach(self, peer, std::move(err)));
            return;
          }
          keep_only_copy(self, id, size_t(d));
        }
        rp.deliver(
            attached(self, token, id, uint32_t(d), peer, write, std::move(h)));
      },
      [=](caf::error& err) mutable {
        if (self->state.objects.detach(id, uint32_t(d)))
          free_object(self, id, "its last holder let go");
        rp.deliver(refuse_attach(self, peer, std::move(err)));
      },
      share_atom::value, id);
  return rp;
}

void detach_object(self_ptr self, uint64_t attachment, bool died) {
  auto& st = self->state;
  auto a = st.shares.detach(attachment);
  if (!a)
    return;
  if (died)
    ++st.counters.objects.reclaimed;
  else
    ++st.counters.objects.detaches;
  st.counters.objects.attached_now = st.shares.attachments();
  auto key = a->device < 0 ? uint32_t(unplaced_key) : uint32_t(a->device);
  auto* e = st.objects.find(a->object);
  if (e == nullptr)
    return;
  audit_object(self, *e,
               a->device < 0 ? "host" : st.devices[a->device].info.name,
               (died ? "reclaimed from process " : "detached by process ") +
                   std::to_string(a->peer.pid) + ", attachment " +
                   std::to_string(attachment) +
                   (died ? " (it exited, or closed its connection, without "
                           "detaching)"
                         : ""));
  if (st.objects.detach(a->object, key))
    free_object(self, a->object,
                died ? "its last holder, an attached process, let go "
                       "without detaching (it exited)"
                     : "its last holder detached");
}

// Ends every item still open with shutting_down: the devices are gone.
void end_everything(self_ptr self) {
  auto& st = self->state;
  st.stopping = true;
  st.closed = true;
  for (auto& q : st.held)
    while (!q.empty()) {
      auto h = std::move(q.front());
      q.pop_front();
      reject_held(self, h,
                  make_error(errc::shutting_down, "the runtime stopped"));
    }
  // Members of merged launches and gang slices end with their launch or
  // gang.
  std::vector<uint64_t> left;
  for (auto& [ticket, r] : st.outstanding)
    if (r.batch == 0 && r.gang_parent == 0)
      left.push_back(ticket);
  for (auto ticket : left)
    if (st.outstanding.count(ticket) > 0)
      end_failed(self, ticket,
                 make_error(errc::shutting_down,
                            "the runtime stopped before the item finished"));
  // What the devices were asked and did not answer ends too: a host
  // process ended with its supervisor never answers.
  for (size_t d = 0; d < st.devices.size(); ++d)
    fail_asks(self, d,
              make_error(errc::shutting_down, "the runtime stopped before " +
                                                  st.devices[d].info.name +
                                                  " answered"));
  // Puts waiting for spills end now (closed: with shutting_down).
  auto waiting = std::move(st.after_spill);
  st.after_spill = {};
  for (auto& f : waiting)
    f();
  st.audit.flush(self);
  deliver_ends(self);
}

// The balancer's view of a device that joins: not started yet.
balancer_state::slot make_slot(const device_info& info,
                               const balancer_config& cfg) {
  balancer_state::slot s;
  s.info = info;
  s.resident = devices::input_cache{info.input_cache_bytes};
  s.stats.name = info.name;
  s.stats.kind = to_string(info.kind);
  s.stats.simulated = info.simulated;
  s.stats.status = device_status::resetting;
  s.breaker = circuit_breaker{cfg.circuit};
  return s;
}

// Appends device `info` (a GPU a rescan found) under `lease`, the terms
// for the fleet with it; its index, or why it cannot join.
caf::expected<uint32_t> add_device(balancer_state& st, const device_info& info,
                                   quota_lease lease,
                                   const devices::memory::pool_options& pool) {
  auto n = st.devices.size();
  if (st.stopping || st.closed)
    return make_error(errc::shutting_down, "the balancer is stopping");
  if (n >= 64 || n >= balancer::device_min_tree::capacity)
    return make_error(errc::invalid_arguments,
                      "the fleet has " + std::to_string(n) +
                          " devices, the most it can hold");
  if (auto err = st.acct.add_device(std::move(lease)))
    return err;
  st.fleet.add_device();
  st.devices.push_back(make_slot(info, st.cfg));
  // Its rate in each cell made so far, as a new cell gives every device
  // (fleet_cell): scaled from the devices that ran it, until it runs it.
  for (size_t c = 0; c < st.fleet.cells(); ++c) {
    auto [k, cls] = st.fleet.cell_key(c);
    bool measured = false;
    auto rate = rate_of(st, n, k, cls, &measured);
    st.fleet.set_rate(c, n, rate, measured);
  }
  st.latency.add_device();
  st.cfg.pools.resize(n);
  st.cfg.pools.push_back(pool);
  touch(st, n);
  return uint32_t(n);
}

} // namespace

balancer_actor::behavior_type
balancer_impl(balancer_actor::stateful_pointer<balancer_state> self,
              std::vector<device_info> devices, quota_lease lease,
              audit_actor audit_dest, balancer_config cfg) {
  auto& st = self->state;
  for (auto& info : devices)
    st.devices.push_back(make_slot(info, cfg));
  st.acct = balancer::accounting{std::move(lease)};
  st.held.resize(st.acct.book().tenants());
  // One ready queue per tenant and one for merged launches.
  st.ready = balancer::ready_queues{st.acct.book().tenants()};
  st.model = run_time_model{cfg.model_window};
  st.started_at = clock::now();
  st.own_uid = ::getuid();
  refresh_wall_offset(st);
  stamp(st);
  st.audit = audit_buffer{std::move(audit_dest)};
  st.cfg = cfg;
  st.latency = balancer::latency_table{st.devices.size()};
  st.fleet = balancer::fleet_index{st.devices.size()};
  touch_all(st);
  // Stopped with items still in flight (the runtime drained what it could
  // first): each ends now, once, with shutting_down.
  self->set_exit_handler([=](caf::exit_msg& msg) {
    stamp(self->state);
    end_everything(self);
    self->quit(msg.reason);
  });
  return {
      [=](submit_atom, work_item& item, client_sink& sink) {
        stamp(self->state);
        on_submit(self, item, sink);
      },
      [=](submit_atom, std::vector<work_item>& items, client_sink& sink) {
        stamp(self->state);
        on_submit_many(self, items, sink);
      },
      [=](submit_atom, work_item& item, batch_sink& sink) {
        stamp(self->state);
        on_submit(self, item, sink);
      },
      [=](submit_atom, std::vector<work_item>& items, batch_sink& sink) {
        stamp(self->state);
        on_submit_many(self, items, sink);
      },
      [=](cancel_atom, uint64_t id, client_sink& sink) {
        stamp(self->state);
        cancel(self, id, sink);
      },
      [=](cancel_atom, uint64_t id, batch_sink& sink) {
        stamp(self->state);
        cancel(self, id, sink);
      },
      [=](cancel_id_atom, uint64_t id, client_sink& sink) {
        stamp(self->state);
        cancel_by_item_id(self, id, sink);
      },
      [=](deliver_atom) { deliver_ends(self); },
      [=](audit_atom, bool ok, std::string& why) {
        stamp(self->state);
        auto& st = self->state;
        st.audit_down = !ok;
        st.audit_why = why;
        // Recorded in the log itself once it can be written again.
        device_event(self, "",
                     ok ? std::string{"audit log writable again: admission "
                                      "resumes"}
                        : "audit log cannot be written: " + why +
                              (st.cfg.audit_fail_closed
                                   ? "; admission stops until it can"
                                   : "; admission goes on (on_write_failure: "
                                     "AUDIT_KEEP_RUNNING)"));
        if (ok)
          wake(self);
      },
      [=](halt_atom) {
        stamp(self->state);
        end_everything(self);
        // The audit log closes next: later refusals are counted, not logged.
        self->state.audit = audit_buffer{};
        return true;
      },
      [=](lease_atom, quota_lease& lease) {
        stamp(self->state);
        // New limits for the same tenants: use so far carries over. Items in
        // flight and held back refer to tenants by position.
        auto& st = self->state;
        if (!st.acct.renew(lease)) {
          device_event(self, "",
                       "balancer: refused a lease that changes the tenants or "
                       "devices (restart the runtime for that)");
          return;
        }
        wake(self);
      },
      [=](add_atom, device_info& info, quota_lease& lease,
          devices::memory::pool_options& pool) -> caf::result<uint32_t> {
        stamp(self->state);
        auto index = add_device(self->state, info, std::move(lease), pool);
        if (!index)
          return index.error();
        device_event(self, info.name,
                     "balancer: joined the fleet as device " +
                         std::to_string(*index) +
                         "; it takes work once it has started");
        return *index;
      },
      [=](done_atom, uint32_t index, std::vector<work_done>& batch) {
        stamp(self->state);
        note_crossing(self->state, index, batch);
        for (auto& done : batch)
          complete(self, index, done);
        trace_placed(self->state, index);
        auto& s = self->state.devices[index];
        s.sent -= std::min(s.sent, uint32_t(batch.size()));
        send_queued(self, index);
        wake(self);
      },
      [=](failed_atom, uint32_t index, uint64_t ticket, caf::error& err) {
        stamp(self->state);
        auto& st = self->state;
        auto& slot = st.devices[index];
        slot.sent -= std::min(slot.sent, 1u);
        auto i = st.outstanding.find(ticket);
        if (i == st.outstanding.end() || i->second.device != int32_t(index)) {
          ++st.counters.duplicates_dropped;
        } else if (is_memory_refusal(code_of(err))) {
          memory_refused(self, ticket, err);
        } else if (code_of(err) == errc::unknown_kernel &&
                   slot.info.host_process) {
          kernel_refused(self, index, ticket, err);
        } else if (is_retryable(code_of(err))) {
          replace_after_failure(self, ticket, err);
        } else {
          end_failed(self, ticket, std::move(err));
        }
        send_queued(self, index);
        wake(self);
      },
      [=](device_atom, device_change& change) {
        stamp(self->state);
        on_device_change(self, change);
      },
      [=](down_atom) {
        stamp(self->state);
        auto& st = self->state;
        st.closed = true;
        // Open batches launch now: their members are admitted and run.
        while (!st.batches.empty())
          flush_batch(self, st.batches.begin()->first);
        auto stopping = [] {
          return make_error(errc::shutting_down, "the runtime is stopping");
        };
        for (auto& q : st.held) {
          while (!q.empty()) {
            auto h = std::move(q.front());
            q.pop_front();
            reject_held(self, h, stopping());
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
      [=](jobs_atom, list_atom, item_filter& f) {
        stamp(self->state);
        return live_items(self->state, f);
      },
      [=](jobs_atom, get_atom, uint64_t job) -> caf::result<item_view> {
        stamp(self->state);
        auto& st = self->state;
        item_filter f;
        f.job = job;
        if (job != 0) {
          if (auto live = live_items(st, f); !live.empty())
            return std::move(live.front());
          for (auto& e : st.ended)
            if (e.job == job)
              return view_of(st, e);
        }
        return make_error(errc::unknown_item,
                          "no live item has job number " + std::to_string(job) +
                              ", nor one of the last " +
                              std::to_string(balancer_state::ended_kept) +
                              " that ended");
      },
      [=](jobs_atom, cancel_atom, item_filter& f,
          std::string& who) -> caf::result<uint64_t> {
        stamp(self->state);
        if (!f.any())
          return make_error(errc::invalid_arguments,
                            "a cancel names a job, a tenant or a client");
        return cancel_items(self, f, who);
      },
      [=](stats_atom) {
        stamp(self->state);
        auto& st = self->state;
        auto out = st.counters;
        auto now = clock::now();
        for (auto& s : st.devices) {
          out.devices.push_back(s.stats);
          out.devices.back().circuit = s.breaker.state(now);
        }
        double wall_ns =
            double(std::chrono::duration_cast<std::chrono::nanoseconds>(
                       now - st.started_at)
                       .count());
        for (size_t d = 0; d < st.devices.size(); ++d) {
          auto& s = st.devices[d];
          out.devices[d].queued = s.placed;
          // Reported run times may carry noise: capped at full.
          if (wall_ns > 0)
            out.devices[d].utilization =
                std::min(1.0, double(s.stats.busy_ns) /
                                  (wall_ns * std::max(1u, s.info.streams)));
        }
        for (auto& [ticket, r] : st.outstanding)
          if (r.ready || r.batching)
            ++out.waiting;
        out.waiting += st.gangs_waiting.size();
        {
          std::vector<std::string> names;
          for (auto& s : st.devices)
            names.push_back(s.info.name);
          out.latency = st.latency.histograms(names);
        }
        for (auto& [ticket, r] : st.outstanding)
          if (r.members.empty() && r.gang_parent == 0)
            ++out.outstanding;
        auto u = st.acct.book().usage();
        for (auto& tu : u.tenants)
          out.admission.inflight[tu.tenant] = tu.inflight;
        return out;
      },
      [=](usage_atom) {
        stamp(self->state);
        return live_usage(self->state);
      },
      [=](trace_atom, start_atom, uint64_t max_events) -> caf::result<bool> {
        stamp(self->state);
        return start_trace(self, max_events);
      },
      [=](trace_atom, get_atom, bool stop) -> caf::result<trace_snapshot> {
        stamp(self->state);
        return take_trace(self, stop);
      },
      [=](headroom_atom,
          const std::string& tenant) -> caf::result<headroom_report> {
        stamp(self->state);
        auto& st = self->state;
        if (!tenant.empty() && st.acct.book().tenant_index(tenant) < 0)
          return no_grant(tenant);
        auto u = live_usage(st);
        headroom_report out;
        for (size_t t = 0; t < st.acct.book().tenants(); ++t) {
          if (!tenant.empty() && st.acct.book().policy(int(t)).tenant != tenant)
            continue;
          auto h = st.acct.book().headroom(int(t));
          if (t < u.tenants.size())
            h.waiting = u.tenants[t].waiting;
          out.tenants.push_back(std::move(h));
        }
        return out;
      },
      [=](simulate_atom, const allocation_plan& plan) {
        stamp(self->state);
        auto& st = self->state;
        // From now: a copy of the live book; otherwise the lease's terms
        // with nothing in use.
        return quota::simulate(
            plan.from_now ? st.acct.book() : quota::quota_book{st.acct.lease()},
            plan, st.cfg.pools);
      },
      [=](object_atom, put_atom, std::string& tenant, host_buffer& data,
          std::string& device) -> caf::result<object_info> {
        stamp(self->state);
        return put_object(self, tenant, std::move(data), device);
      },
      [=](object_atom, get_atom, std::string& tenant,
          uint64_t id) -> caf::result<host_buffer> {
        stamp(self->state);
        return get_object(self, tenant, id);
      },
      [=](object_atom, release_atom, uint64_t id) {
        stamp(self->state);
        if (self->state.objects.release(id))
          free_object(self, id, "its last handle was released");
      },
      [=](object_atom, list_atom, std::string& tenant) {
        stamp(self->state);
        auto& st = self->state;
        auto names = device_names(st);
        std::vector<object_info> out;
        for (auto* e : st.objects.list())
          if (tenant.empty() || e->tenant == tenant) {
            out.push_back(describe_object(*e, names, steady_ns(st.now)));
            out.back().attached = st.shares.attached_to(e->id);
            out.back().exports = st.shares.exports_of(e->id);
          }
        return out;
      },
      [=](object_atom, export_atom, std::string& tenant, uint64_t id,
          share_grant& grant) -> caf::result<std::string> {
        stamp(self->state);
        return export_object(self, tenant, id, grant);
      },
      [=](object_atom, unexport_atom, std::string& tenant,
          std::string& token) -> caf::result<bool> {
        stamp(self->state);
        return unexport_object(self, tenant, token);
      },
      [=](object_atom, attach_atom, std::string& token, share_peer& peer,
          bool write) -> caf::result<attachment_info> {
        stamp(self->state);
        return attach_object(self, token, peer, write);
      },
      [=](object_atom, detach_atom, uint64_t attachment, bool died) {
        stamp(self->state);
        detach_object(self, attachment, died);
      },
      [=](exec_atom, charge_atom, std::string& tenant,
          uint64_t bytes) -> caf::result<bool> {
        auto& book = self->state.acct.book();
        auto t = book.tenant_index(tenant);
        if (t < 0)
          return make_error(errc::unknown_tenant,
                            "tenant '" + tenant + "' has no grant");
        if (auto err = book.charge_outside(t, bytes))
          return err;
        return true;
      },
      [=](exec_atom, refund_atom, std::string& tenant, uint64_t bytes) {
        stamp(self->state);
        auto& book = self->state.acct.book();
        if (auto t = book.tenant_index(tenant); t >= 0) {
          book.refund_outside(t, bytes);
          // Items waiting for the tenant's memory may fit now.
          pump(self);
        }
      },
      [=](flush_atom) {
        stamp(self->state);
        self->state.audit.flush(self);
        return true;
      },
      [=](tick_atom) {
        refresh_wall_offset(self->state);
        self->state.audit.on_tick(self);
      },
      [=](retry_atom) {
        stamp(self->state);
        auto& st = self->state;
        st.retry_scheduled = false;
        expire(self, clock::now());
        // Items parked behind an open circuit or a reset get another look.
        if (!st.parked.empty())
          retry_parked(self);
        wake(self);
        if (anything_held(st) || !st.parked.empty() ||
            !st.gangs_waiting.empty())
          schedule_retry(self);
      },
      [=](batch_atom) {
        stamp(self->state);
        auto& st = self->state;
        auto now = clock::now();
        std::vector<batching::batch_key> due;
        for (auto& [key, open] : st.batches)
          if (open.due <= now)
            due.push_back(key);
        for (auto& key : due)
          flush_batch(self, key);
        pump(self);
      },
  };
}

} // namespace cohort::actors
