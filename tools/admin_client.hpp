// The admin API's HTTP client, for the commands that talk to a running node
// (cohort admin, jobs, objects, watch).
#pragma once

#include <optional>
#include <string>

#include <google/protobuf/util/json_util.h>

namespace cohort::tools {

/// A node's answer to one call, or why there is none.
struct admin_answer {
  /// The HTTP status; 0 when the node could not be reached.
  int status = 0;
  std::string body;
  /// Why the node could not be reached (status 0).
  std::string unreachable;

  bool ok() const { return status >= 200 && status < 300; }
};

/// Calls `method` `path` of the node at `url` (GET, or POST with `body` as
/// JSON), with `token` as its bearer token when not empty. Connects within
/// 5 s and reads within `read_timeout_s`.
admin_answer admin_call(const std::string& url, const std::string& method,
                        const std::string& path, const std::string& token = {},
                        const std::string& body = {}, int read_timeout_s = 30);

/// admin_call for a command that prints: a 2xx answer's body, or nothing
/// after printing to stderr why ("WHO: cannot reach URL: ..." or "WHO:
/// HTTP 404: ...").
std::optional<std::string> admin_body(const char* who, const std::string& url,
                                      const std::string& method,
                                      const std::string& path,
                                      const std::string& token = {},
                                      const std::string& body = {});

/// Parses an answer of the admin API into `out`, ignoring fields this
/// build does not know (a newer node); false when it is not one.
template <class Message>
bool parse_answer(const std::string& body, Message& out) {
  google::protobuf::util::JsonParseOptions lenient;
  lenient.ignore_unknown_fields = true;
  return google::protobuf::util::JsonStringToMessage(body, &out, lenient).ok();
}

} // namespace cohort::tools
