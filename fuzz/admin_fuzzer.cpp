// libFuzzer target: the admin API's request bodies and paths, as `cohort
// serve` hands them to admin_api::handle (apart from HTTP) with the right
// token. One runtime (a CPU worker, two simulated GPUs, tenant "t") serves
// every input. The first byte picks the route:
//   0: POST /v1/simulate with the rest as its body (AllocationPlan JSON)
//   1: POST /v1/tenants/t/quota with the rest as its body (TenantLimits)
//   2: POST /v1/tenants/NAME/quota, NAME the rest's first line, then a body
//   3: the rest's first line is "METHOD PATH", what follows the body.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <unistd.h>

#include <caf/all.hpp>

#include "actors/runtime.hpp"
#include "messages/system_config.hpp"
#include "tools/admin_api.hpp"
#include "tools/metrics.hpp"

using namespace cohort;

namespace {

const std::string token = "fuzz-admin-token";

struct node {
  system_config cfg;
  caf::actor_system sys{cfg};
  std::unique_ptr<actors::runtime> rt;
  std::unique_ptr<tools::metrics_exporter> metrics;
  std::unique_ptr<tools::admin_api> api;

  node() {
    pb::RuntimeConfig c;
    c.mutable_devices()->set_cpu_workers(1);
    c.mutable_devices()->set_gpus(false);
    for (auto name : {"sim0", "sim1"}) {
      auto* g = c.mutable_devices()->add_sim_gpu();
      g->set_name(name);
      g->set_memory_mib(1024);
      g->set_streams(2);
      g->set_speed(1);
    }
    auto* t = c.add_tenant();
    t->set_tenant("t");
    t->add_kernels("*");
    t->add_devices("*");
    auto dir = std::filesystem::temp_directory_path();
    auto path =
        dir / ("cohort-fuzz-admin-" + std::to_string(::getpid()) + ".log");
    std::filesystem::remove(path);
    c.set_audit_path(path.string());
    c.mutable_audit()->set_fsync(pb::FSYNC_NEVER);
    auto r = actors::runtime::start(sys, c);
    if (!r) {
      std::fprintf(stderr, "admin fuzzer: %s\n", describe(r.error()).c_str());
      std::abort();
    }
    rt = std::move(*r);
    metrics = std::make_unique<tools::metrics_exporter>(*rt);
    api = std::make_unique<tools::admin_api>(*rt, token, *metrics);
  }
};

// Split at the first newline.
std::pair<std::string, std::string> first_line(const std::string& s) {
  auto nl = s.find('\n');
  if (nl == std::string::npos)
    return {s, ""};
  return {s.substr(0, nl), s.substr(nl + 1)};
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Never destroyed: the actor system outlives every input and the process
  // ends without a shutdown.
  static node* n = new node;
  if (size == 0)
    return 0;
  std::string rest{reinterpret_cast<const char*>(data) + 1, size - 1};
  std::string method = "POST", path, body;
  switch (data[0] % 4) {
  case 0:
    path = "/v1/simulate";
    body = rest;
    break;
  case 1:
    path = "/v1/tenants/t/quota";
    body = rest;
    break;
  case 2: {
    auto [name, b] = first_line(rest);
    path = "/v1/tenants/" + name + "/quota";
    body = b;
    break;
  }
  default: {
    auto [line, b] = first_line(rest);
    auto sp = line.find(' ');
    method = line.substr(0, sp);
    path = sp == std::string::npos ? "" : line.substr(sp + 1);
    body = b;
    // Scrapes and stats are not what this target is for, and slow.
    if (path.find("metrics") != std::string::npos)
      return 0;
    break;
  }
  }
  auto reply = n->api->handle(method, path, "Bearer " + token, body, "fuzz");
  if (reply.status < 200 || reply.status > 599 || reply.body.empty())
    __builtin_trap();
  // Put tenant t back: a quota input must not starve the next ones.
  if (data[0] % 4 == 1 && reply.status == 200)
    (void)n->api->handle("POST", "/v1/tenants/t/quota", "Bearer " + token, "{}",
                         "fuzz");
  return 0;
}
