#include "tools/admin_command.hpp"

#include <cstdio>
#include <cstdlib>

#include <google/protobuf/util/json_util.h>

#include "messages/admin.pb.h"
#include "messages/convert.hpp"
#include "messages/errc.hpp"
#include "messages/secret_file.hpp"
#include "tools/admin_client.hpp"
#include "tools/byte_units.hpp"
#include "tools/strict_numbers.hpp"
#include "tools/terminal_text.hpp"

namespace cohort::tools {

namespace {

int admin_bad_input(const std::string& msg) {
  std::fprintf(stderr, "cohort admin: %s (see `cohort admin --help`)\n",
               terminal_text(msg).c_str());
  return exit_bad_input;
}

} // namespace

std::string node_url(const std::string& given) {
  if (!given.empty())
    return given;
  if (auto* env = std::getenv("COHORT_URL"))
    return env;
  return "http://127.0.0.1:9470";
}

int cmd_objects(const objects_cli& c) {
  auto url = node_url(c.url);
  auto path = c.tenant.empty() ? std::string{"/v1/objects"}
                               : "/v1/tenants/" + c.tenant + "/objects";
  auto body = admin_body("cohort objects", url, "GET", path);
  if (!body)
    return exit_failed;
  if (c.json) {
    std::fputs(body->c_str(), stdout);
    return exit_ok;
  }
  pb::ObjectList list;
  if (!parse_answer(*body, list)) {
    std::fprintf(stderr,
                 "cohort objects: %s answered something that is not "
                 "an object list\n",
                 url.c_str());
    return exit_failed;
  }
  std::printf("%-8s %-16s %-4s %12s %10s %-24s %-4s %7s %8s %6s\n", "ID",
              "TENANT", "TYPE", "ELEMENTS", "BYTES", "DEVICES", "HOST",
              "HOLDERS", "ATTACHED", "AGE");
  uint64_t on_devices = 0;
  uint64_t host_only = 0;
  for (auto& o : list.objects()) {
    std::string devs;
    for (auto& d : o.devices())
      devs += (devs.empty() ? "" : ",") + d;
    if (devs.empty())
      devs = "-";
    on_devices += o.bytes() * uint64_t(o.devices_size());
    if (o.devices_size() == 0 && o.host_copy())
      host_only += o.bytes();
    auto age = o.age_ms() < 10000 ? std::to_string(o.age_ms()) + "ms"
                                  : std::to_string(o.age_ms() / 1000) + "s";
    std::printf("%-8llu %-16s %-4s %12llu %10s %-24s %-4s %3u+%-3u %8u %6s\n",
                (unsigned long long)o.id(), terminal_text(o.tenant()).c_str(),
                terminal_text(o.dtype()).c_str(),
                (unsigned long long)o.elements(),
                human_bytes(o.bytes()).c_str(), terminal_text(devs).c_str(),
                o.host_copy() ? "yes" : "no", o.handles(), o.readers(),
                o.attached(), age.c_str());
  }
  std::printf("%d object%s: %s in device memory, %s in host memory only\n",
              list.objects_size(), list.objects_size() == 1 ? "" : "s",
              human_bytes(on_devices).c_str(), human_bytes(host_only).c_str());
  return exit_ok;
}

caf::expected<std::string> admin_token(const std::string& token_file) {
  std::string token;
  if (auto* env = std::getenv("COHORT_ADMIN_TOKEN"))
    token = env;
  if (!token_file.empty()) {
    auto t = read_secret_file("--token-file", token_file, errc::io_error);
    if (!t)
      return t.error();
    token = std::move(*t);
  }
  return token;
}

int cmd_admin(const admin_cli& c) {
  auto url = node_url(c.url);
  auto token_or = admin_token(c.token_file);
  if (!token_or)
    return admin_bad_input(describe(token_or.error()));
  auto token = std::move(*token_or);
  std::string cmd;
  for (auto& [name, app] : c.commands)
    if (parsed(app))
      cmd = name;
  std::string method = "GET";
  std::string path;
  std::string body;
  if (cmd == "stats" || cmd == "devices" || cmd == "tenants" ||
      cmd == "alerts" || cmd == "objects" || cmd == "metrics" ||
      cmd == "exec-sessions") {
    path = cmd == "metrics" ? "/metrics" : "/v1/" + cmd;
  } else if (cmd == "rescan") {
    method = "POST";
    path = "/v1/devices/rescan";
  } else if (cmd == "drain" || cmd == "offline" || cmd == "online") {
    method = "POST";
    path = "/v1/devices/" + c.target + "/" + cmd;
  } else if (cmd == "simulate") {
    auto plan = load_plan(c.target);
    if (!plan)
      return admin_bad_input(describe(plan.error()));
    method = "POST";
    path = "/v1/simulate";
    google::protobuf::util::MessageToJsonString(*plan, &body);
  } else {
    pb::TenantLimits limits;
    for (auto& [k, v] : c.limits.given()) {
      // Strict: a value that wraps or saturates (4294967296 in-flight
      // items, 1e30 bytes) would set a different limit than asked for.
      caf::error err;
      if (k == "--max-inflight") {
        auto n = parse_count(k, v, UINT32_MAX);
        if (n)
          limits.set_max_inflight(uint32_t(*n));
        else
          err = n.error();
      } else if (k == "--memory-quota") {
        auto n = parse_bytes(k, v, INT64_MAX);
        if (n)
          limits.set_memory_quota_bytes(*n);
        else
          err = n.error();
      } else if (k == "--rate") {
        auto x = parse_real(k, v, 0, 1e9);
        if (x)
          limits.mutable_rate_limit()->set_items_per_second(*x);
        else
          err = x.error();
      } else if (k == "--burst") {
        auto n = parse_count(k, v, UINT32_MAX);
        if (n)
          limits.mutable_rate_limit()->set_burst(uint32_t(*n));
        else
          err = n.error();
      }
      if (err)
        return admin_bad_input(describe(err));
    }
    method = "POST";
    path = "/v1/tenants/" + c.target + "/quota";
    google::protobuf::util::MessageToJsonString(limits, &body);
  }
  // A rescan waits for its scan (devices.rescan_timeout_ms, 30 s unless
  // set).
  auto res =
      admin_call(url, method, path, token, body, cmd == "rescan" ? 300 : 30);
  if (res.status == 0) {
    std::fprintf(stderr, "cohort admin: cannot reach %s: %s\n", url.c_str(),
                 res.unreachable.c_str());
    return exit_failed;
  }
  std::fputs(res.body.c_str(), res.ok() ? stdout : stderr);
  if (!res.ok())
    std::fprintf(stderr, "cohort admin: HTTP %d\n", res.status);
  return res.ok() ? exit_ok : exit_failed;
}

} // namespace cohort::tools
