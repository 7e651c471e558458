// The admin API of `cohort serve`, apart from HTTP: a request (method, path,
// Authorization header, body) in, a status and a JSON body out. Bodies are
// the `cohort.pb` admin messages in protobuf's JSON mapping (snake_case field
// names). docs/admin-api.md lists every route.
#pragma once

#include <string>
#include <vector>

#include "actors/runtime.hpp"
#include "tools/http_router.hpp"
#include "tools/metrics.hpp"

namespace cohort::tools {

/// One answer.
struct http_reply {
  int status = 200;
  std::string body;
  std::string content_type = "application/json";
  /// The methods of the route, for a 405 answer's Allow header.
  std::string allow;
};

/// A routed request, as a handler sees it.
struct admin_request {
  const std::string& body;
  /// The client's address, for the audit record.
  const std::string& peer;
  /// The route's ":name" segments, in order.
  std::vector<std::string> params;
  /// The route pattern's last segment ("drain" of .../:name/drain).
  std::string last_segment;
  /// The route's pattern ("/v1/items/:job/cancel").
  std::string pattern;
};

class admin_api;

/// One route of the admin API.
struct admin_route {
  const char* method;
  /// As http_router matches it: "/v1/devices/:name/drain".
  const char* pattern;
  /// Mutating: needs the admin token.
  bool mutating;
  http_reply (admin_api::*handler)(const admin_request&);
};

/// Thread-safe: any HTTP worker thread may call `handle`.
class admin_api {
public:
  /// Mutating calls need `Authorization: Bearer TOKEN`; with an empty
  /// `token` they are refused (403).
  admin_api(actors::runtime& rt, std::string token, metrics_exporter& metrics);

  /// `peer` (the client's address) goes into the audit record of a
  /// mutating call.
  http_reply handle(const std::string& method, const std::string& path,
                    const std::string& authorization, const std::string& body,
                    const std::string& peer = "local");

  /// Counts a request the HTTP server refused before routing it (413,
  /// 431) under the route `refused`.
  void count_refused(int status);

  /// Counts a connection the HTTP server closed at its read deadline.
  void count_timed_out_connection();

  /// Every route, in the order docs/admin-api.md lists them.
  static const std::vector<admin_route>& routes();

private:
  static const http_router& router();

  // The handlers, one per route (the table of routes()).
  http_reply get_healthz(const admin_request& req);
  http_reply get_metrics(const admin_request& req);
  http_reply get_stats(const admin_request& req);
  http_reply get_devices(const admin_request& req);
  http_reply get_tenants(const admin_request& req);
  http_reply get_alerts(const admin_request& req);
  /// Every live object, or (with a :name) one tenant's.
  http_reply get_objects(const admin_request& req);
  http_reply get_exec_sessions(const admin_request& req);
  http_reply post_simulate(const admin_request& req);
  http_reply post_device_action(const admin_request& req);
  http_reply post_rescan(const admin_request& req);
  http_reply post_tenant_quota(const admin_request& req);
  /// Live items (docs/jobs.md), or (with a :name) one tenant's; one item
  /// by job number; cancels by job, tenant or client.
  http_reply get_items(const admin_request& req);
  http_reply get_item(const admin_request& req);
  http_reply get_device_health(const admin_request& req);
  http_reply post_cancel(const admin_request& req);
  http_reply post_trace_start(const admin_request& req);
  http_reply take_trace(const admin_request& req);

  http_reply route(const std::string& method, const std::string& path,
                   const std::string& authorization, const std::string& body,
                   const std::string& peer, std::string& route_name);

  actors::runtime& rt_;
  std::string token_;
  metrics_exporter& metrics_;
};

/// True when `presented` equals `expected`, in time that depends on
/// neither (both are hashed, then compared with CRYPTO_memcmp).
bool token_matches(const std::string& presented, const std::string& expected);

} // namespace cohort::tools
