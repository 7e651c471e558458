#include "tools/metrics.hpp"

#include <cmath>
#include <limits>
#include <map>
#include <sstream>

#include <prometheus/metric_family.h>
#include <prometheus/text_serializer.h>

#include "kernels/bundle/bundle.hpp"

namespace cohort::tools {

namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;
using labels = std::vector<ClientMetric::Label>;

constexpr double mib = 1024.0 * 1024.0;

// One family at a time, metrics appended in order.
class family {
public:
  family(std::vector<MetricFamily>& out, std::string name, std::string help,
         MetricType type)
      : out_(out) {
    f_.name = std::move(name);
    f_.help = std::move(help);
    f_.type = type;
  }

  // A family without series still says what it is (HELP and TYPE), so
  // that dashboards and rules find every name from the first scrape.
  ~family() { out_.push_back(std::move(f_)); }

  family& add(labels ls, double v) {
    ClientMetric m;
    m.label = std::move(ls);
    switch (f_.type) {
    case MetricType::Counter:
      m.counter.value = v;
      break;
    case MetricType::Gauge:
      m.gauge.value = v;
      break;
    default:
      m.untyped.value = v;
    }
    f_.metric.push_back(std::move(m));
    return *this;
  }

  family& add_histogram(labels ls, const latency_histogram& h) {
    ClientMetric m;
    m.label = std::move(ls);
    m.histogram.sample_count = h.count;
    m.histogram.sample_sum = h.sum_s;
    uint64_t cumulative = 0;
    for (size_t i = 0; i < h.buckets.size(); ++i) {
      cumulative += h.buckets[i];
      m.histogram.bucket.push_back(
          {cumulative, i < latency_bounds_s.size()
                           ? latency_bounds_s[i]
                           : std::numeric_limits<double>::infinity()});
    }
    f_.metric.push_back(std::move(m));
    return *this;
  }

private:
  std::vector<MetricFamily>& out_;
  MetricFamily f_;
};

bool is_gpu(const device_info& d) {
  return d.kind != device_kind::cpu;
}

const memory_snapshot* memory_of(const metrics_input& in, size_t i) {
  if (i < in.memory.size() && in.memory[i].capacity > 0)
    return &in.memory[i];
  return nullptr;
}

} // namespace

caf::expected<metrics_input> read_metrics(actors::runtime& rt) {
  metrics_input in;
  in.devices = rt.devices();
  auto stats = rt.placement_stats();
  if (!stats)
    return stats.error();
  in.stats = std::move(*stats);
  auto mem = rt.memory_stats();
  if (!mem)
    return mem.error();
  in.memory = std::move(*mem);
  auto head = rt.headroom();
  if (!head)
    return head.error();
  in.headroom = std::move(*head);
  if (auto alerts = rt.alerts())
    in.alerts = std::move(*alerts);
  if (auto audit = rt.audit_stats())
    in.audit = std::move(*audit);
  in.xids = rt.xid_errors();
  in.bundles = rt.kernel_bundles();
  if (auto objects = rt.objects())
    in.objects = std::move(*objects);
  in.exec = rt.exec_sessions();
  in.rescans = rt.rescans();
  return in;
}

caf::expected<std::string> metrics_exporter::scrape() {
  auto in = read_metrics(rt_);
  if (!in)
    return in.error();
  return render(*in, std::chrono::steady_clock::now());
}

void metrics_exporter::count_request(const std::string& route, int status) {
  std::lock_guard<std::mutex> guard{mtx_};
  ++requests_[{route, status}];
}

void metrics_exporter::count_timed_out_connection() {
  std::lock_guard<std::mutex> guard{mtx_};
  ++timed_out_connections_;
}

std::string
metrics_exporter::render(const metrics_input& in,
                         std::chrono::steady_clock::time_point now) {
  std::lock_guard<std::mutex> guard{mtx_};
  std::vector<MetricFamily> out;
  // A counter without labels.
  auto counter = [&](const char* name, const char* help, double v) {
    family{out, name, help, MetricType::Counter}.add({}, v);
  };
  auto& st = in.stats;
  auto dev_stats = [&](size_t i) -> const device_stats* {
    return i < st.devices.size() ? &st.devices[i] : nullptr;
  };
  double elapsed_s = last_ == std::chrono::steady_clock::time_point{}
                         ? 0
                         : std::chrono::duration<double>(now - last_).count();
  // A device's own labels, `more` after them: its name, and for a device
  // on a remote host that the node joined, `node`, the host's HOST:PORT
  // (a device of this machine has none, so that its series stay as they
  // were).
  auto device_labels = [&](size_t i, labels more = {}) {
    auto& d = in.devices[i];
    labels out{{"device", d.name}};
    if (!d.remote.empty())
      out.push_back({"node", d.remote});
    out.insert(out.end(), more.begin(), more.end());
    return out;
  };
  // dcgm-exporter's names and labels, for GPUs (simulated ones say so).
  auto gpu_labels = [&](size_t i) {
    auto& d = in.devices[i];
    labels out{{"gpu", std::to_string(i)},
               {"UUID", d.uuid.empty() ? d.name : d.uuid},
               {"device", d.name},
               {"modelName", d.model},
               {"cohort_simulated", d.simulated ? "true" : "false"}};
    if (!d.remote.empty())
      out.push_back({"node", d.remote});
    return out;
  };
  {
    family util{out, "DCGM_FI_DEV_GPU_UTIL",
                "GPU utilization (in %): device busy time over wall time "
                "since the previous scrape",
                MetricType::Gauge};
    for (size_t i = 0; i < in.devices.size(); ++i) {
      auto* s = dev_stats(i);
      if (!is_gpu(in.devices[i]) || s == nullptr)
        continue;
      auto& before = busy_before_[in.devices[i].name];
      double pct = 0;
      if (elapsed_s > 0 && s->busy_ns >= before)
        pct = std::min(100.0,
                       100.0 * double(s->busy_ns - before) / 1e9 / elapsed_s);
      before = s->busy_ns;
      util.add(gpu_labels(i), std::round(pct));
    }
  }
  {
    family used{out, "DCGM_FI_DEV_FB_USED",
                "Framebuffer memory used (in MiB): what the device's pool "
                "holds from the driver",
                MetricType::Gauge};
    family free{out, "DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB)",
                MetricType::Gauge};
    for (size_t i = 0; i < in.devices.size(); ++i) {
      auto* m = memory_of(in, i);
      if (!is_gpu(in.devices[i]) || m == nullptr)
        continue;
      used.add(gpu_labels(i), std::floor(double(m->held) / mib));
      free.add(gpu_labels(i),
               std::floor(double(m->capacity - std::min(m->capacity, m->held)) /
                          mib));
    }
  }
  {
    family xid{out, "DCGM_FI_DEV_XID_ERRORS",
               "Value of the last XID error encountered", MetricType::Gauge};
    family xids{out, "cohort_device_xid_errors_total",
                "Xid errors the device reported", MetricType::Counter};
    for (size_t i = 0; i < in.devices.size() && i < in.xids.size(); ++i) {
      if (!is_gpu(in.devices[i]))
        continue;
      xid.add(gpu_labels(i), in.xids[i].second);
      xids.add(device_labels(i), double(in.xids[i].first));
    }
  }
  {
    family info{out, "cohort_device_info",
                "Every device: its kind, model and whether it is simulated",
                MetricType::Gauge};
    family status{out, "cohort_device_status",
                  "1 for the device's current status, 0 for the others",
                  MetricType::Gauge};
    family up{out, "cohort_device_up",
              "1 while the device takes work (available or degraded)",
              MetricType::Gauge};
    family completed{out, "cohort_device_completed_total",
                     "Items that ended on the device with their result",
                     MetricType::Counter};
    family failed{out, "cohort_device_failed_placements_total",
                  "Placements that failed on the device and moved on",
                  MetricType::Counter};
    family refusals{out, "cohort_device_memory_refusals_total",
                    "Placements the device refused for memory although the "
                    "balancer's books let them through (the item waited)",
                    MetricType::Counter};
    family busy{out, "cohort_device_busy_seconds_total",
                "Device time spent on completed items (modeled on simulated "
                "devices)",
                MetricType::Counter};
    family losses{out, "cohort_device_losses_total",
                  "Times the device was lost", MetricType::Counter};
    family restarts{out, "cohort_device_restarts_total",
                    "Times the device came back after a loss",
                    MetricType::Counter};
    family queue{out, "cohort_queue_depth",
                 "Items placed on the device that have not ended (running or "
                 "queued)",
                 MetricType::Gauge};
    family circuit{out, "cohort_circuit_state",
                   "The device's circuit breaker: 0 closed, 1 open, 2 "
                   "half-open",
                   MetricType::Gauge};
    family opens{out, "cohort_circuit_opens_total",
                 "Times the device's circuit opened", MetricType::Counter};
    family crossing{out, "cohort_device_crossing_seconds",
                    "A device outside the node's process (host process or "
                    "remote host): the measured fixed cost of reaching it "
                    "and back per item, which placement adds to its "
                    "completions (absent until measured)",
                    MetricType::Gauge};
    family crossing_per_mib{
        out, "cohort_device_crossing_seconds_per_mebibyte",
        "A device outside the node's process: the measured cost of reaching "
        "it and back per MiB of inputs an item carries",
        MetricType::Gauge};
    static constexpr device_status statuses[] = {
        device_status::available, device_status::degraded,
        device_status::draining, device_status::resetting,
        device_status::offline};
    for (size_t i = 0; i < in.devices.size(); ++i) {
      auto& d = in.devices[i];
      auto dl = device_labels(i);
      info.add(
          device_labels(i, {{"kind", to_string(d.kind)},
                            {"model", d.model},
                            {"simulated", d.simulated ? "true" : "false"}}),
          1);
      auto* s = dev_stats(i);
      if (s == nullptr)
        continue;
      for (auto x : statuses)
        status.add(device_labels(i, {{"status", to_string(x)}}),
                   s->status == x ? 1 : 0);
      up.add(dl, s->status == device_status::available ||
                         s->status == device_status::degraded
                     ? 1
                     : 0);
      completed.add(dl, double(s->completed));
      failed.add(dl, double(s->failed_placements));
      refusals.add(dl, double(s->memory_refusals));
      busy.add(dl, double(s->busy_ns) / 1e9);
      losses.add(dl, s->losses);
      restarts.add(dl, s->restarts);
      queue.add(dl, double(s->queued));
      circuit.add(dl, double(static_cast<uint8_t>(s->circuit)));
      opens.add(dl, s->circuit_opens);
      if (d.elsewhere() &&
          (s->crossing_ns > 0 || s->crossing_ns_per_byte > 0)) {
        crossing.add(dl, s->crossing_ns / 1e9);
        crossing_per_mib.add(dl, s->crossing_ns_per_byte * 1048576 / 1e9);
      }
    }
  }
  {
    family cap{out, "cohort_device_memory_capacity_bytes",
               "The device's memory", MetricType::Gauge};
    family limit{out, "cohort_device_memory_limit_bytes",
                 "The share of it the runtime may use", MetricType::Gauge};
    family used{out, "cohort_device_memory_used_bytes",
                "Device memory handed out to items now", MetricType::Gauge};
    family held{out, "cohort_device_memory_pool_held_bytes",
                "Device memory the pool holds from the driver",
                MetricType::Gauge};
    family peak{out, "cohort_device_memory_peak_used_bytes",
                "The most device memory handed out to items at once since "
                "the device's pool was made",
                MetricType::Gauge};
    family peak_held{out, "cohort_device_memory_pool_peak_held_bytes",
                     "The most device memory the pool held from the driver "
                     "at once since it was made",
                     MetricType::Gauge};
    family allocs{out, "cohort_allocations_total",
                  "Device allocations by result: ok, or the error that "
                  "refused them",
                  MetricType::Counter};
    for (size_t i = 0; i < in.devices.size(); ++i) {
      auto* m = memory_of(in, i);
      if (m == nullptr)
        continue;
      auto dl = device_labels(i);
      cap.add(dl, double(m->capacity));
      limit.add(dl, double(m->limit));
      used.add(dl, double(m->used));
      held.add(dl, double(m->held));
      peak.add(dl, double(m->peak_used));
      peak_held.add(dl, double(m->peak_held));
      allocs.add(device_labels(i, {{"result", "ok"}}), double(m->allocations));
      for (auto& [why, n] : m->refused)
        allocs.add(device_labels(i, {{"result", why}}), double(n));
    }
  }
  {
    family admitted{out, "cohort_items_admitted_total", "Items admitted",
                    MetricType::Counter};
    admitted.add({}, double(st.admission.admitted));
    family rejected{out, "cohort_items_rejected_total",
                    "Items refused before admission, by reason",
                    MetricType::Counter};
    for (auto& [why, n] : st.admission.rejected_by_reason)
      rejected.add({{"reason", why}}, double(n));
    family completed{out, "cohort_items_completed_total",
                     "Admitted items that ended with their result",
                     MetricType::Counter};
    completed.add({}, double(st.completed));
    family failed{out, "cohort_items_failed_total",
                  "Admitted items that ended with a definitive error",
                  MetricType::Counter};
    failed.add({}, double(st.failed));
    family retried{out, "cohort_items_retried_total",
                   "Placements repeated after a failure", MetricType::Counter};
    retried.add({}, double(st.retries));
    family outstanding{out, "cohort_items_outstanding",
                       "Items admitted and not yet ended", MetricType::Gauge};
    outstanding.add({}, double(st.outstanding));
    family dups{out, "cohort_duplicates_dropped_total",
                "Late completions of items that had already ended (never "
                "delivered)",
                MetricType::Counter};
    dups.add({}, double(st.duplicates_dropped));
    family fallbacks{out, "cohort_fallbacks_total",
                     "Items moved to a CPU worker, by reason: the error that "
                     "moved them, or device_memory",
                     MetricType::Counter};
    for (auto& [why, n] : st.fallbacks_by_reason)
      fallbacks.add({{"reason", why}}, double(n));
  }
  {
    family lat{out, "cohort_work_latency_seconds",
               "Time from admission to result, per kernel and device",
               MetricType::Histogram};
    std::map<std::string, std::string> remote;
    for (auto& d : in.devices)
      if (!d.remote.empty())
        remote[d.name] = d.remote;
    for (auto& h : st.latency) {
      labels l{{"kernel", h.kernel}, {"device", h.device}};
      if (auto r = remote.find(h.device); r != remote.end())
        l.push_back({"node", r->second});
      lat.add_histogram(l, h);
    }
  }
  {
    family inflight{out, "cohort_tenant_inflight",
                    "The tenant's items admitted and not yet ended",
                    MetricType::Gauge};
    family cap{out, "cohort_tenant_inflight_limit",
               "The tenant's in-flight cap (0: none)", MetricType::Gauge};
    family waiting{out, "cohort_tenant_waiting",
                   "The tenant's items held back by a limit",
                   MetricType::Gauge};
    family mem{out, "cohort_tenant_memory_bytes",
               "Device memory the tenant's items hold", MetricType::Gauge};
    family quota{out, "cohort_tenant_memory_quota_bytes",
                 "The tenant's device memory quota (0: none)",
                 MetricType::Gauge};
    for (auto& t : in.headroom.tenants) {
      labels tl{{"tenant", t.tenant}};
      inflight.add(tl, double(t.inflight));
      cap.add(tl, double(t.max_inflight));
      waiting.add(tl, double(t.waiting));
      mem.add(tl, double(t.memory));
      quota.add(tl, double(t.memory_quota));
    }
    family fb{out, "cohort_tenant_fallbacks_total",
              "The tenant's items that fell back to a CPU worker",
              MetricType::Counter};
    family fb_s{out, "cohort_tenant_fallback_seconds_total",
                "Admission-to-end time of the tenant's fallback items",
                MetricType::Counter};
    family over{out, "cohort_tenant_fallbacks_over_budget_total",
                "Fallback items that took longer than the tenant's budget",
                MetricType::Counter};
    family held{out, "cohort_tenant_fallbacks_held_back_total",
                "Items the tenant's fallback budget kept off the CPU workers",
                MetricType::Counter};
    for (auto& [tenant, f] : st.fallback_by_tenant) {
      labels tl{{"tenant", tenant}};
      fb.add(tl, double(f.items));
      fb_s.add(tl, double(f.total_ns) / 1e9);
      over.add(tl, double(f.over_budget));
      held.add(tl, double(f.held_back));
    }
  }
  if (in.audit) {
    auto& a = *in.audit;
    auto one = [&](const char* name, const char* help, MetricType type,
                   double v) {
      family{out, name, help, type}.add({}, v);
    };
    one("cohort_audit_records_total", "Audit records appended",
        MetricType::Counter, double(a.records_appended));
    one("cohort_audit_records_written_total",
        "Audit records handed to the kernel", MetricType::Counter,
        double(a.records_written));
    one("cohort_audit_records_synced_total",
        "Audit records covered by a completed fsync (durable)",
        MetricType::Counter, double(a.records_synced));
    one("cohort_audit_bytes_written_total", "Audit log bytes written",
        MetricType::Counter, double(a.bytes_written));
    one("cohort_audit_fsyncs_total", "Audit log fsyncs", MetricType::Counter,
        double(a.fsyncs));
    one("cohort_audit_rotations_total", "Audit log rotations",
        MetricType::Counter, double(a.rotations));
    one("cohort_audit_write_errors_total", "Failed audit log writes or fsyncs",
        MetricType::Counter, double(a.write_errors));
    one("cohort_audit_pending_records", "Audit records not yet written",
        MetricType::Gauge, double(a.pending));
    one("cohort_audit_failing",
        "1 while the audit log cannot be written (new items are refused "
        "unless on_write_failure is AUDIT_KEEP_RUNNING)",
        MetricType::Gauge, a.failing ? 1.0 : 0.0);
    one("cohort_audit_dropped_records_total",
        "Audit records dropped while the log could not be written and its "
        "memory for unwritten records was full",
        MetricType::Counter, double(a.dropped));
  }
  {
    family{out, "cohort_kernel_bundles_loaded_total",
           "Kernel bundles loaded (signature, trust and digests checked)",
           MetricType::Counter}
        .add({}, double(in.bundles.loaded));
    // Every reason, 0 included: a rate over a series that appears only at
    // the first refusal would miss that refusal.
    family refused{out, "cohort_kernel_bundle_refusals_total",
                   "Kernel bundles refused, by reason", MetricType::Counter};
    for (unsigned i = 0; i < kernels::bundle::refusal_count; ++i) {
      std::string why = to_string(static_cast<kernels::bundle::refusal>(i));
      auto n = in.bundles.refused.find(why);
      refused.add({{"reason", why}},
                  n == in.bundles.refused.end() ? 0.0 : double(n->second));
    }
    // A refusal at start is in the counter's first sample, where increase()
    // sees nothing: the rule also reads this gauge.
    family now{out, "cohort_kernel_bundles_refused",
               "Kernel bundle directories whose last load was refused, by "
               "reason (0 again once the directory loads)",
               MetricType::Gauge};
    for (unsigned i = 0; i < kernels::bundle::refusal_count; ++i) {
      std::string why = to_string(static_cast<kernels::bundle::refusal>(i));
      auto n = in.bundles.refused_now.find(why);
      now.add({{"reason", why}},
              n == in.bundles.refused_now.end() ? 0.0 : double(n->second));
    }
  }
  {
    // Kernel hosts (docs/kernels.md, "Kernel hosts"): the process's.
    family{out, "cohort_kernel_hosts_started_total",
           "Kernel host processes started to run bundles' CPU code",
           MetricType::Counter}
        .add({}, double(in.bundles.hosts_started));
    family faults{out, "cohort_kernel_host_faults_total",
                  "Bundle kernel calls that ended their kernel host process "
                  "(crash: crashed, aborted or exited it; timeout: killed at "
                  "its kernel timeout)",
                  MetricType::Counter};
    faults.add({{"reason", "crash"}}, double(in.bundles.host_crashes));
    faults.add({{"reason", "timeout"}}, double(in.bundles.host_timeouts));
  }
  {
    // Device-resident objects (docs/objects.md): what they hold now, per
    // tenant and place ("host" for host copies), and what happened to them.
    std::map<std::string, uint64_t> live;
    std::map<std::pair<std::string, std::string>, uint64_t> bytes;
    for (auto& o : in.objects) {
      ++live[o.tenant];
      for (auto& d : o.devices)
        bytes[{o.tenant, d}] += o.bytes();
      if (o.host_copy)
        bytes[{o.tenant, "host"}] += o.bytes();
    }
    family objects{out, "cohort_objects", "Live device-resident objects",
                   MetricType::Gauge};
    for (auto& [tenant, n] : live)
      objects.add({{"tenant", tenant}}, double(n));
    family held{out, "cohort_object_bytes",
                "Bytes of device-resident objects' copies, by tenant and "
                "where the copy is (a device, or host)",
                MetricType::Gauge};
    for (auto& [key, b] : bytes)
      held.add({{"tenant", key.first}, {"device", key.second}}, double(b));
    auto& oc = in.stats.objects;
    counter("cohort_objects_made_total",
            "Objects made (put, or an item's output kept on a device)",
            double(oc.made));
    counter("cohort_objects_freed_total",
            "Objects freed (their last holder let go)", double(oc.freed));
    counter("cohort_object_copies_stored_total",
            "Object copies stored on devices", double(oc.copies_stored));
    counter("cohort_object_evictions_total",
            "Object copies evicted from a device to make room",
            double(oc.evicted));
    counter("cohort_object_spills_total",
            "Only copies of objects read back to host memory before they were "
            "evicted",
            double(oc.spilled));
    counter("cohort_object_copies_lost_total",
            "Object copies that went with a lost device",
            double(oc.copies_lost));
    counter(
        "cohort_objects_lost_total",
        "Objects lost with a device that held their only copy (their readers "
        "end with object_lost)",
        double(oc.lost));
    // Sharing across processes.
    family{out, "cohort_object_attachments",
           "Attachments of other processes to shared objects now",
           MetricType::Gauge}
        .add({}, double(oc.attached_now));
    counter("cohort_object_exports_total",
            "Objects exported to other processes", double(oc.exported));
    counter("cohort_object_attaches_total",
            "Attaches of other processes to exported objects",
            double(oc.attaches));
    counter("cohort_object_attaches_refused_total",
            "Attaches refused (unknown or revoked token, another user, write "
            "under a read-only export, the export's limit)",
            double(oc.attach_refused));
    counter("cohort_object_detaches_total",
            "Attachments ended by their process with a detach",
            double(oc.detaches));
    counter("cohort_object_attachments_reclaimed_total",
            "Attachments reclaimed: their process exited, or closed its "
            "connection, without detaching",
            double(oc.reclaimed));
  }
  {
    // cohort exec's sessions (docs/exec.md); zeros without an exec socket,
    // so that every name is there from the first scrape.
    auto x = in.exec.value_or(exec::session_stats{});
    family{out, "cohort_exec_sessions", "cohort exec sessions open now",
           MetricType::Gauge}
        .add({}, double(x.sessions.size()));
    std::map<std::string, std::pair<uint64_t, uint64_t>> by_tenant;
    for (auto& s : x.sessions) {
      by_tenant[s.tenant].first += s.leased_bytes;
      by_tenant[s.tenant].second += s.processes;
    }
    family leased{out, "cohort_exec_leased_bytes",
                  "Device memory leased to programs of cohort exec now "
                  "(what their allocations hold and the credit they hold "
                  "ahead), by tenant",
                  MetricType::Gauge};
    family procs{out, "cohort_exec_processes",
                 "Processes of cohort exec's programs joined to a session "
                 "now, by tenant",
                 MetricType::Gauge};
    for (auto& [tenant, v] : by_tenant) {
      leased.add({{"tenant", tenant}}, double(v.first));
      procs.add({{"tenant", tenant}}, double(v.second));
    }
    counter("cohort_exec_sessions_opened_total", "cohort exec sessions opened",
            double(x.opened));
    counter("cohort_exec_sessions_refused_total",
            "cohort exec sessions refused (no grant, unknown tenant, busy)",
            double(x.open_refusals));
    counter("cohort_exec_sessions_expired_total",
            "cohort exec sessions that expired without a process",
            double(x.expired));
    counter("cohort_exec_leases_total",
            "Leases of device-memory credit granted to programs of cohort exec",
            double(x.leases));
    counter("cohort_exec_leased_bytes_total",
            "Bytes of device-memory credit leased to programs of cohort exec",
            double(x.leased_bytes_total));
    counter("cohort_exec_lease_refusals_total",
            "Leases refused (the session's limit, or the tenant's quota)",
            double(x.lease_refusals));
    counter("cohort_exec_reclaims_total",
            "Processes of cohort exec's programs that ended holding credit, "
            "returned to their session and tenant",
            double(x.reclaims));
    counter("cohort_exec_reclaimed_bytes_total",
            "Bytes returned with processes that ended holding them",
            double(x.reclaimed_bytes));
  }
  {
    // Device rescans (docs/gpu.md, "Rescanning at run time"); zeros on a
    // node that does not rescan.
    auto r = in.rescans.value_or(actors::rescan_counts{});
    family scans{out, "cohort_device_rescans_total",
                 "Rescans of the machine's GPUs, by result (ok; failed: the "
                 "scan's helper was missing, crashed or hung)",
                 MetricType::Counter};
    scans.add({{"result", "ok"}}, double(r.scans - r.failed));
    scans.add({{"result", "failed"}}, double(r.failed));
    counter("cohort_devices_removed_total",
            "GPUs removed: missing from enough rescans in a row",
            double(r.removed));
    counter("cohort_devices_returned_total",
            "Removed GPUs that a rescan found again and brought back",
            double(r.returned));
    counter("cohort_devices_found_total",
            "GPUs a rescan found that the node did not run (appeared since "
            "it started), each counted once per appearance",
            double(r.found));
    counter("cohort_devices_added_total",
            "GPUs a rescan found and added to the running fleet",
            double(r.added));
  }
  {
    family firing{out, "cohort_alerts_firing",
                  "1 for every in-process alert firing now", MetricType::Gauge};
    for (auto& a : in.alerts)
      firing.add(
          {{"alert", a.name}, {"subject", a.subject}, {"severity", a.severity}},
          1);
  }
  {
    family http{out, "cohort_http_requests_total",
                "Admin API and metrics requests by route and status code",
                MetricType::Counter};
    for (auto& [key, n] : requests_)
      http.add({{"route", key.first}, {"code", std::to_string(key.second)}},
               double(n));
  }
  family{out, "cohort_http_connections_timed_out_total",
         "HTTP connections closed because a request took longer than the "
         "read timeout to arrive",
         MetricType::Counter}
      .add({}, double(timed_out_connections_));
  last_ = now;
  std::ostringstream os;
  prometheus::TextSerializer{}.Serialize(os, out);
  return os.str();
}

} // namespace cohort::tools
