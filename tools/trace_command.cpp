#include "tools/trace_command.hpp"

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <unistd.h>

#include "messages/errc.hpp"
#include "messages/trace.hpp"
#include "tools/admin_client.hpp"
#include "tools/admin_command.hpp"
#include "tools/terminal_text.hpp"

namespace cohort::tools {

namespace {

constexpr const char* who = "cohort trace";

// Writes `json` to `path`; false (after saying why) when it cannot.
bool write_file(const std::string& path, const std::string& json) {
  auto* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    std::fprintf(stderr, "%s: cannot write '%s': %s\n", who, path.c_str(),
                 std::strerror(errno));
    return false;
  }
  bool ok = std::fwrite(json.data(), 1, json.size(), f) == json.size();
  ok = std::fclose(f) == 0 && ok;
  if (!ok) {
    std::fprintf(stderr, "%s: writing '%s' failed: %s\n", who, path.c_str(),
                 std::strerror(errno));
    std::remove(path.c_str());
  }
  return ok;
}

// Stops the node's trace and writes it to `c.output`.
int stop_and_write(const trace_cli& c, const std::string& url,
                   const std::string& token) {
  // A large trace takes the node a while to put in JSON.
  auto a = admin_call(url, "POST", "/v1/trace/stop", token, {}, 300);
  if (!a.ok()) {
    if (a.status == 0)
      std::fprintf(stderr, "%s: cannot reach %s: %s\n", who, url.c_str(),
                   a.unreachable.c_str());
    else
      std::fprintf(stderr, "%s: HTTP %d: %s\n", who, a.status,
                   terminal_lines(a.body).c_str());
    return exit_failed;
  }
  if (!write_file(c.output, a.body))
    return exit_failed;
  std::printf("trace written to %s (%zu bytes; open it in "
              "https://ui.perfetto.dev)\n",
              c.output.c_str(), a.body.size());
  return exit_ok;
}

int record(const trace_cli& c, const std::string& url,
           const std::string& token) {
  if (c.stop)
    return stop_and_write(c, url, token);
  std::string body =
      c.max_events == 0
          ? std::string{"{}"}
          : "{\"max_events\":" + std::to_string(c.max_events) + "}";
  if (!admin_body(who, url, "POST", "/v1/trace/start", token, body))
    return exit_failed;
  std::fprintf(stderr, "%s: recording for %.2f s\n", who, c.seconds);
  std::this_thread::sleep_for(std::chrono::duration<double>(c.seconds));
  return stop_and_write(c, url, token);
}

} // namespace

int cmd_trace(const trace_cli& c) {
  auto url = node_url(c.url);
  auto token = admin_token(c.token_file);
  if (!token) {
    std::fprintf(stderr, "%s: %s (see `cohort trace --help`)\n", who,
                 describe(token.error()).c_str());
    return exit_bad_input;
  }
  // The file must be writable before the node records anything; one made
  // here goes again when no trace comes.
  bool existed = ::access(c.output.c_str(), F_OK) == 0;
  if (auto* f = std::fopen(c.output.c_str(), "a"); f == nullptr) {
    std::fprintf(stderr, "%s: cannot write '%s': %s\n", who, c.output.c_str(),
                 std::strerror(errno));
    return exit_failed;
  } else {
    std::fclose(f);
  }
  auto rc = record(c, url, *token);
  if (rc != exit_ok && !existed)
    std::remove(c.output.c_str());
  return rc;
}

} // namespace cohort::tools
