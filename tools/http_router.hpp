// The admin API's router: routes declared as a method and a path pattern
// ("/v1/devices/:name/drain"), matched segment by segment. libmicrohttpd,
// the HTTP server (chosen because a slow client costs it no thread), has no
// router, and the Debian HTTP libraries that have one (cpp-httplib,
// CivetWeb, Pistache) either serve a connection per thread or lack the
// per-client limits `cohort serve` enforces; docs/admin-api.md says more.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace cohort::tools {

/// One route of a router.
struct http_route {
  /// "GET", "POST", ...
  std::string method;
  /// Segments separated by '/'; a segment ":name" matches any one segment.
  std::string pattern;
};

/// What a request matched.
struct http_route_match {
  enum class outcome {
    /// `index` is the route; `params` its ":name" segments in order.
    found,
    /// The path matches routes of other methods only: `index` is the first
    /// of them, `allow` lists their methods ("GET, POST").
    wrong_method,
    /// No route has this path.
    none,
  };
  outcome what = outcome::none;
  size_t index = 0;
  std::vector<std::string> params;
  std::string allow;
};

/// A set of routes. Immutable once built, so thread-safe to match.
class http_router {
public:
  /// Adds a route and returns its index. Throws std::invalid_argument for an
  /// empty method, a pattern that does not start with '/', an empty ":"
  /// segment, or a method and pattern that match the same paths as a route
  /// already added.
  size_t add(std::string method, std::string pattern);

  /// Matches `path` (a query string after '?' is ignored; empty segments,
  /// as in "//" or a trailing '/', are skipped). A route with fixed
  /// segments wins over one with a parameter in the same place.
  http_route_match match(const std::string& method,
                         const std::string& path) const;

  const std::vector<http_route>& routes() const { return routes_; }

  /// The segments of `path` (without its query string).
  static std::vector<std::string> split(const std::string& path);

private:
  std::vector<http_route> routes_;
  std::vector<std::vector<std::string>> segments_;
};

} // namespace cohort::tools
