// The admin API's router (tools/http_router.hpp), and its routes against the
// table of docs/admin-api.md.
#include <catch2/catch.hpp>

#include <cctype>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <stdexcept>

#include "tools/admin_api.hpp"
#include "tools/http_router.hpp"

using namespace cohort::tools;
using outcome = http_route_match::outcome;

TEST_CASE("the router matches methods, fixed segments and parameters",
          "[tools][http]") {
  http_router r;
  auto stats = r.add("GET", "/v1/stats");
  auto drain = r.add("POST", "/v1/devices/:name/drain");
  auto quota = r.add("POST", "/v1/tenants/:name/quota");
  auto any = r.add("POST", "/v1/tenants/:name/:what");
  auto put = r.add("PUT", "/v1/stats");

  auto m = r.match("GET", "/v1/stats");
  CHECK(m.what == outcome::found);
  CHECK(m.index == stats);
  CHECK(m.params.empty());
  // A query string, doubled and trailing slashes do not change the path.
  CHECK(r.match("GET", "/v1//stats/?verbose=1").index == stats);

  m = r.match("POST", "/v1/devices/sim0/drain");
  REQUIRE(m.what == outcome::found);
  CHECK(m.index == drain);
  CHECK(m.params == std::vector<std::string>{"sim0"});

  // The route with more fixed segments wins.
  m = r.match("POST", "/v1/tenants/t1/quota");
  CHECK(m.index == quota);
  m = r.match("POST", "/v1/tenants/t1/limits");
  CHECK(m.index == any);
  CHECK(m.params == std::vector<std::string>{"t1", "limits"});

  m = r.match("DELETE", "/v1/stats");
  CHECK(m.what == outcome::wrong_method);
  CHECK(m.allow == "GET, PUT");
  CHECK((m.index == stats || m.index == put));

  CHECK(r.match("GET", "/v1/devices/sim0").what == outcome::none);
  CHECK(r.match("POST", "/v1/devices/sim0/drain/now").what == outcome::none);
  CHECK(r.match("GET", "/").what == outcome::none);
  CHECK(r.match("GET", "").what == outcome::none);
}

TEST_CASE("the router refuses routes it could not tell apart",
          "[tools][http]") {
  http_router r;
  r.add("GET", "/v1/devices/:name");
  CHECK_THROWS_AS(r.add("GET", "/v1/devices/:other"), std::invalid_argument);
  CHECK_THROWS_AS(r.add("GET", "v1/x"), std::invalid_argument);
  CHECK_THROWS_AS(r.add("", "/v1/x"), std::invalid_argument);
  CHECK_THROWS_AS(r.add("GET", "/v1/:/x"), std::invalid_argument);
  CHECK_NOTHROW(r.add("POST", "/v1/devices/:name"));
  CHECK(r.routes().size() == 2);
}

TEST_CASE("every admin route is in docs/admin-api.md's table, and only those",
          "[tools][http]") {
  std::ifstream in{std::string{COHORT_SOURCE_DIR} + "/docs/admin-api.md"};
  REQUIRE(in);
  // | `/v1/devices/NAME/drain` | POST | yes | `drain NAME` |
  std::regex row{R"(^\| `(/[^`]*)` \| (GET|POST|PUT|DELETE) \| (yes|no) \|)"};
  std::set<std::string> documented;
  std::string line;
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_search(line, m, row))
      documented.insert(m[2].str() + " " + m[1].str() + " " +
                        (m[3] == "yes" ? "token" : "open"));
  }
  std::set<std::string> routed;
  for (auto& r : admin_api::routes()) {
    // ":name" is NAME in the table, ":job" JOB, ...
    std::string p;
    for (auto& seg : http_router::split(r.pattern)) {
      p += "/";
      if (!seg.empty() && seg[0] == ':')
        for (char c : seg.substr(1))
          p += char(std::toupper(static_cast<unsigned char>(c)));
      else
        p += seg;
    }
    routed.insert(std::string{r.method} + " " + p + " " +
                  (r.mutating ? "token" : "open"));
  }
  CHECK(documented == routed);
  CHECK(routed.size() == admin_api::routes().size());
}
