// A node served in process for the tests of the admin API: a runtime, its
// metrics and admin API, and the HTTP service on a free local port.
#pragma once

#include <memory>
#include <string>

#include <catch2/catch.hpp>
#include <httplib.h>

#include "tests/runtime_fixture.hpp"
#include "tools/admin_api.hpp"
#include "tools/http_service.hpp"
#include "tools/metrics.hpp"

namespace cohort::test {

inline const std::string token = "s3cret-admin-token-0123";

struct served : test::actor_fixture {
  std::unique_ptr<actors::runtime> rt;
  std::unique_ptr<tools::metrics_exporter> metrics;
  std::unique_ptr<tools::admin_api> api;
  std::unique_ptr<tools::http_service> http;
  int port = 0;

  void start(pb::RuntimeConfig cfg, std::string tok = token,
             tools::http_limits limits = {}) {
    auto r = actors::runtime::start(sys, cfg);
    REQUIRE(r);
    rt = std::move(*r);
    metrics = std::make_unique<tools::metrics_exporter>(*rt);
    api = std::make_unique<tools::admin_api>(*rt, std::move(tok), *metrics);
    http = std::make_unique<tools::http_service>(*api, limits);
    auto p = http->start("127.0.0.1", 0);
    REQUIRE(p);
    port = *p;
  }

  ~served() {
    if (http)
      http->stop();
    if (rt)
      rt->stop();
  }

  httplib::Result get(const std::string& path) {
    httplib::Client c{"127.0.0.1", port};
    return c.Get(path.c_str());
  }

  httplib::Result post(const std::string& path, const std::string& body,
                       const std::string& auth = "Bearer " + token) {
    httplib::Client c{"127.0.0.1", port};
    httplib::Headers h;
    if (!auth.empty())
      h.emplace("Authorization", auth);
    return c.Post(path.c_str(), h, body, "application/json");
  }
};

} // namespace cohort::test
