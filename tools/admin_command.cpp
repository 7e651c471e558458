#include "tools/admin_command.hpp"

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include <google/protobuf/util/json_util.h>
#include <httplib.h>

#include "messages/convert.hpp"
#include "messages/errc.hpp"
#include "tools/strict_numbers.hpp"

namespace cohort::tools {

namespace {

constexpr int exit_ok = 0;
constexpr int exit_failed = 1;
constexpr int exit_bad_input = 2;

const char* admin_usage =
    R"(usage: cohort admin [--url URL] [--token-file FILE] COMMAND
  stats | devices | tenants | alerts | metrics
  simulate PLAN                  dry run of an allocation plan (text format)
  drain DEVICE | offline DEVICE | online DEVICE
  quota TENANT [--max-inflight N] [--memory-quota BYTES] [--rate R] [--burst N]
URL defaults to $COHORT_URL or http://127.0.0.1:9470; the token (mutating
calls) comes from --token-file or $COHORT_ADMIN_TOKEN.
)";

int bad_input(const std::string& msg) {
  std::fprintf(stderr, "cohort admin: %s\n%s", msg.c_str(), admin_usage);
  return exit_bad_input;
}

} // namespace

int cmd_admin(const std::vector<std::string>& all) {
  std::string url = "http://127.0.0.1:9470";
  if (auto* env = std::getenv("COHORT_URL"))
    url = env;
  std::string token;
  if (auto* env = std::getenv("COHORT_ADMIN_TOKEN"))
    token = env;
  std::vector<std::string> args;
  for (size_t i = 0; i < all.size(); ++i) {
    if ((all[i] == "--url" || all[i] == "--token-file") && i + 1 >= all.size())
      return bad_input(all[i] + " needs a value");
    if (all[i] == "--url") {
      url = all[++i];
    } else if (all[i] == "--token-file") {
      std::ifstream in{all[++i]};
      if (!in)
        return bad_input("cannot read the token file '" + all[i] + "'");
      std::getline(in, token);
    } else {
      args.push_back(all[i]);
    }
  }
  if (args.empty())
    return bad_input("missing COMMAND");
  auto& cmd = args[0];
  std::string method = "GET";
  std::string path;
  std::string body;
  if ((cmd == "stats" || cmd == "devices" || cmd == "tenants" ||
       cmd == "alerts" || cmd == "metrics") &&
      args.size() == 1) {
    path = cmd == "metrics" ? "/metrics" : "/v1/" + cmd;
  } else if ((cmd == "drain" || cmd == "offline" || cmd == "online") &&
             args.size() == 2) {
    method = "POST";
    path = "/v1/devices/" + args[1] + "/" + cmd;
  } else if (cmd == "simulate" && args.size() == 2) {
    auto plan = load_plan(args[1]);
    if (!plan)
      return bad_input(describe(plan.error()));
    method = "POST";
    path = "/v1/simulate";
    google::protobuf::util::MessageToJsonString(*plan, &body);
  } else if (cmd == "quota" && args.size() >= 2) {
    pb::TenantLimits limits;
    for (size_t i = 2; i < args.size(); ++i) {
      auto& k = args[i];
      if (i + 1 >= args.size())
        return bad_input(k + " needs a value");
      auto& v = args[++i];
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
      } else {
        return bad_input("unknown quota option '" + k + "'");
      }
      if (err)
        return bad_input(describe(err));
    }
    method = "POST";
    path = "/v1/tenants/" + args[1] + "/quota";
    google::protobuf::util::MessageToJsonString(limits, &body);
  } else {
    return bad_input("unknown command or wrong arguments: '" + cmd + "'");
  }
  httplib::Client client{url};
  client.set_connection_timeout(5);
  client.set_read_timeout(30);
  httplib::Headers headers;
  if (!token.empty())
    headers.emplace("Authorization", "Bearer " + token);
  auto res = method == "GET"
                 ? client.Get(path.c_str(), headers)
                 : client.Post(path.c_str(), headers, body, "application/json");
  if (!res) {
    std::fprintf(stderr, "cohort admin: cannot reach %s: %s\n", url.c_str(),
                 httplib::to_string(res.error()).c_str());
    return exit_failed;
  }
  bool ok = res->status >= 200 && res->status < 300;
  std::fputs(res->body.c_str(), ok ? stdout : stderr);
  if (!ok)
    std::fprintf(stderr, "cohort admin: HTTP %d\n", res->status);
  return ok ? exit_ok : exit_failed;
}

} // namespace cohort::tools
