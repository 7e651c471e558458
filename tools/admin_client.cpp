#include "tools/admin_client.hpp"

#include <cstdio>

#include <httplib.h>

#include "tools/terminal_text.hpp"

namespace cohort::tools {

admin_answer admin_call(const std::string& url, const std::string& method,
                        const std::string& path, const std::string& token,
                        const std::string& body, int read_timeout_s) {
  admin_answer out;
  httplib::Client client{url};
  if (!client.is_valid()) {
    out.unreachable = "not an http:// or https:// address";
    return out;
  }
  client.set_connection_timeout(5);
  client.set_read_timeout(read_timeout_s);
  httplib::Headers headers;
  if (!token.empty())
    headers.emplace("Authorization", "Bearer " + token);
  auto res = method == "GET"
                 ? client.Get(path.c_str(), headers)
                 : client.Post(path.c_str(), headers, body, "application/json");
  if (!res) {
    out.unreachable = httplib::to_string(res.error());
    return out;
  }
  out.status = res->status;
  out.body = std::move(res->body);
  return out;
}

std::optional<std::string> admin_body(const char* who, const std::string& url,
                                      const std::string& method,
                                      const std::string& path,
                                      const std::string& token,
                                      const std::string& body) {
  auto a = admin_call(url, method, path, token, body);
  if (a.status == 0) {
    std::fprintf(stderr, "%s: cannot reach %s: %s\n", who, url.c_str(),
                 a.unreachable.c_str());
    return std::nullopt;
  }
  if (!a.ok()) {
    std::fprintf(stderr, "%s: HTTP %d: %s\n", who, a.status,
                 terminal_lines(a.body).c_str());
    return std::nullopt;
  }
  return std::move(a.body);
}

} // namespace cohort::tools
