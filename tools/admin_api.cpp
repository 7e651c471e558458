#include "tools/admin_api.hpp"

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <ctime>

#include <google/protobuf/util/json_util.h>
#include <openssl/crypto.h>
#include <openssl/sha.h>

#include "messages/admin.pb.h"
#include "messages/convert.hpp"
#include "messages/errc.hpp"
#include "tools/strict_numbers.hpp"

namespace cohort::tools {

namespace {

http_reply json(int status, const google::protobuf::Message& msg) {
  google::protobuf::util::JsonPrintOptions opts;
  opts.add_whitespace = true;
  opts.always_print_primitive_fields = true;
  opts.preserve_proto_field_names = true;
  http_reply r;
  r.status = status;
  if (!google::protobuf::util::MessageToJsonString(msg, &r.body, opts).ok()) {
    r.status = 500;
    r.body = "{\"error\": \"internal\", \"message\": \"cannot encode\"}\n";
  }
  return r;
}

http_reply error(int status, std::string code, std::string message) {
  pb::ErrorReply e;
  e.set_error(std::move(code));
  e.set_message(std::move(message));
  return json(status, e);
}

// The status for a runtime error.
http_reply error(const caf::error& err) {
  auto code = code_of(err);
  int status = 500;
  switch (code) {
  case errc::unknown_device:
  case errc::unknown_tenant:
  case errc::unknown_item:
    status = 404;
    break;
  case errc::invalid_transition:
    status = 409;
    break;
  case errc::malformed_config:
  case errc::invalid_arguments:
    status = 422;
    break;
  case errc::shutting_down:
    status = 503;
    break;
  case errc::timed_out:
    status = 504;
    break;
  default:
    break;
  }
  return error(status, to_string(code), describe(err));
}

template <class Message>
bool parse(const std::string& body, Message& out, http_reply& bad) {
  google::protobuf::util::JsonParseOptions opts;
  opts.ignore_unknown_fields = false;
  auto st = google::protobuf::util::JsonStringToMessage(
      body.empty() ? "{}" : body, &out, opts);
  if (st.ok())
    return true;
  bad = error(400, "bad_request",
              "the body is not a valid " + out.GetTypeName() +
                  " in JSON: " + std::string{st.message()});
  return false;
}

// Limits that parse but cannot be meant: protobuf's JSON mapping already
// refuses integers out of their field's range and fractions; a rate may
// still be "Infinity", "NaN" or negative, and a byte count may be past
// what any quota arithmetic holds.
std::string out_of_range(const pb::TenantLimits& limits) {
  if (limits.has_rate_limit()) {
    auto rate = limits.rate_limit().items_per_second();
    if (!std::isfinite(rate) || rate < 0 || rate > 1e9)
      return "rate_limit.items_per_second must be a finite number from 0 to "
             "1e9";
  }
  if (limits.has_memory_quota_bytes() &&
      limits.memory_quota_bytes() > uint64_t(INT64_MAX))
    return "memory_quota_bytes must be at most " + std::to_string(INT64_MAX);
  return {};
}

pb::DeviceList device_list(actors::runtime& rt, const balancer_stats& st,
                           const std::vector<memory_snapshot>& mem) {
  pb::DeviceList out;
  auto xids = rt.xid_errors();
  auto removed = rt.removed_devices();
  auto infos = rt.devices();
  for (size_t i = 0; i < infos.size(); ++i) {
    auto& d = infos[i];
    auto* v = out.add_devices();
    v->set_index(uint32_t(i));
    v->set_name(d.name);
    v->set_kind(to_string(d.kind));
    v->set_simulated(d.simulated);
    v->set_model(d.model);
    v->set_streams(d.streams);
    v->set_numa_node(d.numa_node);
    v->set_location(!d.remote.empty() ? "remote host"
                    : d.host_process  ? "host process"
                                      : "node");
    v->set_remote(d.remote);
    for (auto& l : d.links) {
      auto* link = v->add_links();
      link->set_peer(l.peer);
      link->set_kind(to_string(l.kind, d.kind));
    }
    if (d.host_process)
      v->set_host_pid(rt.host_pid(d.name));
    if (auto gone = removed.find(d.name); gone != removed.end()) {
      v->set_removed(true);
      v->set_removed_why(gone->second);
    }
    if (i < st.devices.size()) {
      auto& s = st.devices[i];
      v->set_status(to_string(s.status));
      v->set_circuit(to_string(s.circuit));
      v->set_circuit_opens(s.circuit_opens);
      v->set_completed(s.completed);
      v->set_failed_placements(s.failed_placements);
      v->set_queued(s.queued);
      v->set_busy_seconds(double(s.busy_ns) / 1e9);
      v->set_losses(s.losses);
      v->set_restarts(s.restarts);
      v->set_crossing_seconds(s.crossing_ns / 1e9);
      v->set_crossing_seconds_per_mib(s.crossing_ns_per_byte * 1048576 / 1e9);
    }
    if (i < mem.size()) {
      v->set_memory_capacity_bytes(mem[i].capacity);
      v->set_memory_limit_bytes(mem[i].limit);
      v->set_memory_used_bytes(mem[i].used);
      v->set_memory_held_bytes(mem[i].held);
    }
    if (i < xids.size()) {
      v->set_xid_errors(xids[i].first);
      v->set_last_xid(xids[i].second);
    }
  }
  return out;
}

void fill_tenant(pb::TenantView& v, const tenant_headroom& t,
                 const balancer_stats& st) {
  v.set_tenant(t.tenant);
  v.set_inflight(t.inflight);
  v.set_max_inflight(t.max_inflight);
  v.set_waiting(t.waiting);
  v.set_memory_bytes(t.memory);
  v.set_memory_quota_bytes(t.memory_quota);
  v.set_cpu_workers(t.cpu_workers);
  for (auto& d : t.devices) {
    auto* dv = v.add_devices();
    dv->set_device(d.device);
    dv->set_used_bytes(d.used);
    dv->set_quota_bytes(d.quota);
    dv->set_reserved_bytes(d.reserved);
    dv->set_headroom_bytes(d.headroom);
  }
  if (auto i = st.fallback_by_tenant.find(t.tenant);
      i != st.fallback_by_tenant.end()) {
    v.set_fallbacks(i->second.items);
    v.set_fallbacks_over_budget(i->second.over_budget);
    v.set_fallbacks_held_back(i->second.held_back);
  }
}

void fill_alert(pb::AlertView& v, const cohort::alert& a) {
  v.set_name(a.name);
  v.set_subject(a.subject);
  v.set_severity(a.severity);
  v.set_since_ns(a.since_ns);
  v.set_detail(a.detail);
}

} // namespace

bool token_matches(const std::string& presented, const std::string& expected) {
  unsigned char a[SHA256_DIGEST_LENGTH];
  unsigned char b[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(presented.data()),
         presented.size(), a);
  SHA256(reinterpret_cast<const unsigned char*>(expected.data()),
         expected.size(), b);
  return CRYPTO_memcmp(a, b, sizeof a) == 0;
}

admin_api::admin_api(actors::runtime& rt, std::string token,
                     metrics_exporter& metrics)
    : rt_(rt), token_(std::move(token)), metrics_(metrics) {
  // nop
}

http_reply admin_api::handle(const std::string& method, const std::string& path,
                             const std::string& authorization,
                             const std::string& body, const std::string& peer) {
  std::string route_name = "unknown";
  auto r = route(method, path, authorization, body, peer, route_name);
  metrics_.count_request(route_name, r.status);
  return r;
}

void admin_api::count_refused(int status) {
  metrics_.count_request("refused", status);
}

void admin_api::count_timed_out_connection() {
  metrics_.count_timed_out_connection();
}

const std::vector<admin_route>& admin_api::routes() {
  using self = admin_api;
  static const std::vector<admin_route> all{
      {"GET", "/healthz", false, &self::get_healthz},
      {"GET", "/metrics", false, &self::get_metrics},
      {"GET", "/v1/stats", false, &self::get_stats},
      {"GET", "/v1/devices", false, &self::get_devices},
      {"GET", "/v1/devices/:name/health", false, &self::get_device_health},
      {"GET", "/v1/tenants", false, &self::get_tenants},
      {"GET", "/v1/alerts", false, &self::get_alerts},
      {"GET", "/v1/objects", false, &self::get_objects},
      {"GET", "/v1/tenants/:name/objects", false, &self::get_objects},
      {"GET", "/v1/exec-sessions", false, &self::get_exec_sessions},
      {"GET", "/v1/items", false, &self::get_items},
      {"GET", "/v1/tenants/:name/items", false, &self::get_items},
      {"GET", "/v1/items/:job", false, &self::get_item},
      {"POST", "/v1/items/:job/cancel", true, &self::post_cancel},
      {"POST", "/v1/tenants/:name/cancel", true, &self::post_cancel},
      {"POST", "/v1/clients/:client/cancel", true, &self::post_cancel},
      {"POST", "/v1/simulate", false, &self::post_simulate},
      {"POST", "/v1/devices/:name/drain", true, &self::post_device_action},
      {"POST", "/v1/devices/:name/offline", true, &self::post_device_action},
      {"POST", "/v1/devices/:name/online", true, &self::post_device_action},
      {"POST", "/v1/devices/rescan", true, &self::post_rescan},
      {"POST", "/v1/tenants/:name/quota", true, &self::post_tenant_quota},
      {"POST", "/v1/trace/start", true, &self::post_trace_start},
      {"GET", "/v1/trace", false, &self::take_trace},
      {"POST", "/v1/trace/stop", true, &self::take_trace},
  };
  return all;
}

const http_router& admin_api::router() {
  static const auto built = [] {
    http_router r;
    for (auto& x : routes())
      r.add(x.method, x.pattern);
    return r;
  }();
  return built;
}

http_reply admin_api::route(const std::string& method, const std::string& path,
                            const std::string& authorization,
                            const std::string& body, const std::string& peer,
                            std::string& route_name) {
  // HEAD is GET without the body (libmicrohttpd leaves the body out).
  auto m = router().match(method == "HEAD" ? "GET" : method, path);
  using outcome = http_route_match::outcome;
  if (m.what == outcome::none)
    return error(404, "not_found", "no route " + method + " " + path);
  auto& r = routes()[m.index];
  route_name = r.pattern;
  if (m.what == outcome::wrong_method) {
    auto reply = error(405, "method_not_allowed",
                       route_name + " takes " + m.allow + ", not " + method);
    reply.allow = m.allow;
    return reply;
  }
  // Mutating calls: the token, compared in constant time.
  if (r.mutating) {
    if (token_.empty())
      return error(403, "forbidden",
                   "mutating calls are disabled: this node has no admin "
                   "token (cohort serve --token-file FILE or "
                   "COHORT_ADMIN_TOKEN)");
    static const std::string bearer = "Bearer ";
    if (authorization.empty())
      return error(401, "unauthorized",
                   "this call needs 'Authorization: Bearer TOKEN'");
    if (authorization.compare(0, bearer.size(), bearer) != 0 ||
        !token_matches(authorization.substr(bearer.size()), token_))
      return error(403, "forbidden", "the admin token is wrong");
  }
  admin_request req{body, peer, std::move(m.params),
                    http_router::split(r.pattern).back(), r.pattern};
  return (this->*r.handler)(req);
}

http_reply admin_api::get_metrics(const admin_request&) {
  auto text = metrics_.scrape();
  if (!text)
    return error(text.error());
  http_reply r;
  r.body = std::move(*text);
  r.content_type = "text/plain; version=0.0.4; charset=utf-8";
  return r;
}

http_reply admin_api::get_healthz(const admin_request&) {
  pb::AdminReply ok;
  ok.set_ok(true);
  ok.set_message("serving");
  return json(200, ok);
}

http_reply admin_api::get_stats(const admin_request&) {
  auto st = rt_.placement_stats();
  if (!st)
    return error(st.error());
  pb::StatsView v;
  v.set_admitted(st->admission.admitted);
  v.set_rejected(st->admission.rejected);
  for (auto& [k, n] : st->admission.rejected_by_reason)
    (*v.mutable_rejected_by_reason())[k] = n;
  v.set_completed(st->completed);
  v.set_failed(st->failed);
  v.set_retries(st->retries);
  v.set_fallbacks(st->fallbacks);
  for (auto& [k, n] : st->fallbacks_by_reason)
    (*v.mutable_fallbacks_by_reason())[k] = n;
  v.set_outstanding(st->outstanding);
  v.set_duplicates_dropped(st->duplicates_dropped);
  v.set_devices(uint32_t(st->devices.size()));
  v.set_tenants(uint32_t(st->admission.inflight.size()));
  if (auto a = rt_.audit_stats())
    v.set_audit_records(a->records_appended);
  if (auto alerts = rt_.alerts())
    for (auto& a : *alerts)
      fill_alert(*v.add_alerts(), a);
  return json(200, v);
}

http_reply admin_api::get_alerts(const admin_request&) {
  auto alerts = rt_.alerts();
  if (!alerts)
    return error(alerts.error());
  pb::AlertList out;
  for (auto& a : *alerts)
    fill_alert(*out.add_alerts(), a);
  return json(200, out);
}

http_reply admin_api::get_objects(const admin_request& req) {
  std::string tenant = req.params.empty() ? std::string{} : req.params[0];
  if (!tenant.empty()) {
    // A tenant the node does not know is an error, not an empty list.
    auto h = rt_.headroom(tenant);
    if (!h)
      return error(h.error());
  }
  auto objects = rt_.objects(tenant);
  if (!objects)
    return error(objects.error());
  pb::ObjectList out;
  for (auto& o : *objects) {
    auto* v = out.add_objects();
    v->set_id(o.id);
    v->set_tenant(o.tenant);
    v->set_dtype(std::string{kernels::name(o.type)});
    v->set_elements(o.elements);
    v->set_bytes(o.bytes());
    for (auto& d : o.devices)
      v->add_devices(d);
    v->set_host_copy(o.host_copy);
    v->set_handles(o.handles);
    v->set_readers(o.readers);
    v->set_attached(o.attached);
    v->set_exports(o.exports);
    v->set_age_ms(o.age_ms);
  }
  return json(200, out);
}

http_reply admin_api::get_exec_sessions(const admin_request&) {
  auto x = rt_.exec_sessions();
  if (!x)
    return error(404, "no_exec_socket",
                 "this node has no exec socket (exec_sessions.socket, "
                 "docs/exec.md)");
  pb::ExecSessionList out;
  out.set_socket(rt_.exec_socket());
  for (auto& s : x->sessions) {
    auto* v = out.add_sessions();
    v->set_id(s.id);
    v->set_tenant(s.tenant);
    v->set_limit_bytes(s.limit_bytes);
    v->set_leased_bytes(s.leased_bytes);
    v->set_peak_bytes(s.peak_bytes);
    v->set_processes(s.processes);
    v->set_owner_pid(s.owner_pid);
    v->set_leases(s.leases);
    v->set_refusals(s.refusals);
    v->set_age_ms(s.age_ms);
  }
  out.set_opened(x->opened);
  out.set_ended(x->ended);
  out.set_expired(x->expired);
  out.set_open_refusals(x->open_refusals);
  out.set_leases(x->leases);
  out.set_lease_refusals(x->lease_refusals);
  out.set_reclaims(x->reclaims);
  out.set_reclaimed_bytes(x->reclaimed_bytes);
  return json(200, out);
}

namespace {

void fill(pb::ItemView& v, const item_view& x) {
  v.set_job(x.job);
  v.set_id(x.id);
  v.set_client(x.client);
  v.set_tenant(x.tenant);
  v.set_kernel(x.kernel);
  v.set_state(x.state);
  v.set_device(x.device);
  v.set_age_ms(double(x.age_ns) / 1e6);
  v.set_attempts(x.attempts);
  v.set_cancelling(x.cancelling);
  v.set_priority(x.priority);
  v.set_detail(x.detail);
}

} // namespace

http_reply admin_api::get_items(const admin_request& req) {
  item_filter f;
  if (!req.params.empty()) {
    f.tenant = req.params[0];
    // A tenant the node does not know is an error, not an empty list.
    if (auto h = rt_.headroom(f.tenant); !h)
      return error(h.error());
  }
  auto items = rt_.items(f);
  if (!items)
    return error(items.error());
  pb::ItemList out;
  for (auto& x : *items)
    fill(*out.add_items(), x);
  return json(200, out);
}

http_reply admin_api::get_item(const admin_request& req) {
  auto job = parse_id("the job number", req.params.at(0));
  if (!job)
    return error(400, "bad_request", describe(job.error()));
  auto x = rt_.item(*job);
  if (!x)
    return error(x.error());
  pb::ItemView out;
  fill(out, *x);
  return json(200, out);
}

http_reply admin_api::post_cancel(const admin_request& req) {
  // The route's segment after /v1 says what the parameter names.
  auto& param = req.params.at(0);
  item_filter f;
  std::string what;
  // An unknown job or tenant is refused before anything is cancelled (and
  // audited, as every mutating call is); a job that ended already is
  // cancelled 0 times.
  caf::error unknown;
  if (req.pattern.rfind("/v1/items/", 0) == 0) {
    auto job = parse_id("the job number", param);
    if (!job)
      return error(400, "bad_request", describe(job.error()));
    f.job = *job;
    what = "job " + param;
    if (auto x = rt_.item(*job); !x)
      unknown = x.error();
  } else if (req.pattern.rfind("/v1/clients/", 0) == 0) {
    auto client = parse_id("the client number", param);
    if (!client)
      return error(400, "bad_request", describe(client.error()));
    f.client = *client;
    what = "client " + param;
  } else {
    f.tenant = param;
    what = "tenant " + param;
    if (auto h = rt_.headroom(param); !h)
      unknown = h.error();
  }
  auto n = unknown ? caf::expected<uint64_t>{unknown}
                   : rt_.cancel_items(f, "the admin API (" + req.peer + ")");
  rt_.audit_admin(
      "admin API (" + req.peer + "): cancel " + what + ": " +
      (n ? std::to_string(*n) + " cancelled" : describe(n.error())));
  if (!n)
    return error(n.error());
  pb::CancelReply out;
  out.set_cancelled(*n);
  out.set_message("cancel " + what + ": " + std::to_string(*n) + " cancelled");
  return json(200, out);
}

http_reply admin_api::post_trace_start(const admin_request& req) {
  pb::TraceStart start;
  http_reply bad;
  if (!parse(req.body, start, bad))
    return bad;
  auto max =
      start.max_events() == 0 ? default_trace_events : start.max_events();
  auto err = rt_.start_trace(max);
  rt_.audit_admin("admin API (" + req.peer + "): start a trace of at most " +
                  std::to_string(max) + " events" +
                  (err ? ": " + describe(err) : std::string{}));
  if (err)
    return error(err);
  pb::AdminReply out;
  out.set_ok(true);
  out.set_message("recording a trace of at most " + std::to_string(max) +
                  " events");
  return json(200, out);
}

// GET /v1/trace: the trace so far, recording on; POST /v1/trace/stop: the
// trace, which stops. Chrome trace event JSON either way.
http_reply admin_api::take_trace(const admin_request& req) {
  bool stop = req.pattern == "/v1/trace/stop";
  auto x = rt_.trace(stop);
  if (stop)
    rt_.audit_admin("admin API (" + req.peer + "): stop the trace" +
                    (x ? ": " + std::to_string(x->events.size()) + " events"
                       : ": " + describe(x.error())));
  if (!x)
    return error(x.error());
  http_reply r;
  r.body = chrome_trace_json(*x);
  r.content_type = "application/json";
  return r;
}

http_reply admin_api::get_devices(const admin_request&) {
  auto st = rt_.placement_stats();
  if (!st)
    return error(st.error());
  auto mem = rt_.memory_stats();
  if (!mem)
    return error(mem.error());
  return json(200, device_list(rt_, *st, *mem));
}

namespace {

std::string iso_time(int64_t ns) {
  auto secs = time_t(ns / 1'000'000'000);
  std::tm tm{};
  ::gmtime_r(&secs, &tm);
  char buf[64];
  auto n = std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  std::snprintf(buf + n, sizeof buf - n, ".%03dZ",
                int((ns / 1'000'000) % 1000));
  return buf;
}

void fill(pb::HealthSample& out, int64_t wall_ns,
          const devices::health::gpu_sample& s) {
  out.set_time_ns(wall_ns);
  out.set_time(iso_time(wall_ns));
  out.set_temperature_c(s.temperature_c);
  out.set_power_w(s.power_w);
  out.set_power_limit_w(s.power_limit_w);
  out.set_gpu_util_percent(s.gpu_util_percent);
  out.set_memory_util_percent(s.memory_util_percent);
  out.set_utilization_unknown(!s.utilization_known);
  out.set_memory_used_bytes(s.memory_used_bytes);
  out.set_memory_total_bytes(s.memory_total_bytes);
  out.set_ecc_corrected(s.ecc_corrected);
  out.set_ecc_uncorrected(s.ecc_uncorrected);
}

} // namespace

http_reply admin_api::get_device_health(const admin_request& req) {
  auto& name = req.params.at(0);
  auto h = rt_.device_health(name);
  if (!h)
    return error(h.error());
  auto st = rt_.placement_stats();
  if (!st)
    return error(st.error());
  pb::DeviceHealth out;
  out.set_device(h->device);
  out.set_simulated(h->simulated);
  for (auto& d : rt_.devices())
    if (d.name == name)
      out.set_kind(to_string(d.kind));
  for (auto& s : st->devices)
    if (s.name == name) {
      out.set_status(to_string(s.status));
      out.set_circuit(to_string(s.circuit));
      out.set_circuit_opens(s.circuit_opens);
      out.set_losses(s.losses);
      out.set_restarts(s.restarts);
    }
  out.set_source(h->now.source);
  if (!h->now.available)
    out.set_unavailable_reason(h->now.unavailable_reason);
  else
    fill(*out.mutable_now(), h->now_ns, h->now);
  for (auto& s : h->samples)
    fill(*out.add_samples(), s.wall_ns, s.sample);
  out.set_interval_ms(uint32_t(h->interval.count()));
  out.set_xid_errors(h->xid_errors);
  out.set_last_xid(h->last_xid);
  for (auto& x : h->xids) {
    auto* e = out.add_xids();
    e->set_time_ns(x.wall_ns);
    e->set_time(iso_time(x.wall_ns));
    e->set_xid(x.xid);
  }
  return json(200, out);
}

http_reply admin_api::get_tenants(const admin_request&) {
  auto h = rt_.headroom();
  if (!h)
    return error(h.error());
  auto st = rt_.placement_stats();
  if (!st)
    return error(st.error());
  pb::TenantList out;
  for (auto& t : h->tenants)
    fill_tenant(*out.add_tenants(), t, *st);
  return json(200, out);
}

http_reply admin_api::post_simulate(const admin_request& req) {
  pb::AllocationPlan plan;
  http_reply bad;
  if (!parse(req.body, plan, bad))
    return bad;
  auto rep = rt_.simulate(from_proto(plan));
  if (!rep)
    return error(rep.error());
  pb::SimulationReply out;
  out.set_ok(rep->ok());
  for (auto& s : rep->steps) {
    auto* v = out.add_steps();
    v->set_ok(s.ok);
    v->set_code(s.code);
    v->set_detail(s.detail);
    v->set_soft(s.soft);
  }
  for (auto& d : rep->devices) {
    auto* v = out.add_devices();
    v->set_name(d.name);
    v->set_limit_bytes(d.limit);
    v->set_used_bytes(d.used);
    v->set_peak_used_bytes(d.peak_used);
    v->set_fragmentation(d.fragmentation);
  }
  for (auto& [tenant, peak] : rep->tenant_peaks)
    (*out.mutable_tenant_peaks())[tenant] = peak;
  return json(200, out);
}

http_reply admin_api::post_device_action(const admin_request& req) {
  auto& name = req.params.at(0);
  auto& action = req.last_segment;
  caf::error err = action == "drain"     ? rt_.drain(name)
                   : action == "offline" ? rt_.set_offline(name)
                                         : rt_.set_online(name);
  rt_.audit_admin("admin API (" + req.peer + "): " + action + " " + name +
                  ": " + (err ? describe(err) : std::string{"ok"}));
  if (err)
    return error(err);
  pb::AdminReply ok;
  ok.set_ok(true);
  ok.set_message(action + " " + name);
  return json(200, ok);
}

http_reply admin_api::post_rescan(const admin_request& req) {
  auto r = rt_.rescan();
  rt_.audit_admin(
      "admin API (" + req.peer + "): rescan: " +
      (r ? "scan " + std::to_string(r->scan) : describe(r.error())));
  if (!r)
    return error(r.error());
  pb::RescanReport out;
  out.set_scan(r->scan);
  auto put = [](auto* field, const std::vector<std::string>& xs) {
    for (auto& x : xs)
      field->Add(std::string{x});
  };
  put(out.mutable_removed(), r->removed);
  put(out.mutable_returned(), r->returned);
  put(out.mutable_missing(), r->missing);
  put(out.mutable_moved(), r->moved);
  put(out.mutable_added(), r->added);
  put(out.mutable_found(), r->found);
  put(out.mutable_notes(), r->notes);
  return json(200, out);
}

http_reply admin_api::post_tenant_quota(const admin_request& req) {
  auto& name = req.params.at(0);
  pb::TenantLimits limits;
  http_reply bad;
  if (!parse(req.body, limits, bad))
    return bad;
  if (auto why = out_of_range(limits); !why.empty())
    return error(400, "bad_request", why);
  std::string text;
  google::protobuf::util::JsonPrintOptions names;
  names.preserve_proto_field_names = true;
  google::protobuf::util::MessageToJsonString(limits, &text, names);
  auto err = rt_.set_tenant_limits(name, limits);
  rt_.audit_admin("admin API (" + req.peer + "): quota " + name + " " + text +
                  ": " + (err ? describe(err) : std::string{"ok"}));
  if (err)
    return error(err);
  pb::QuotaReply out;
  out.set_ok(true);
  auto h = rt_.headroom(name);
  auto st = rt_.placement_stats();
  if (h && st && !h->tenants.empty())
    fill_tenant(*out.mutable_tenant(), h->tenants.front(), *st);
  return json(200, out);
}

} // namespace cohort::tools
