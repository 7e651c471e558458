// The HTTP front cannot be starved: bodies over the limit (with a length and
// chunked) are refused with 413 and do not grow the process, header floods
// get 431, a trickling client is closed at the read deadline, /metrics
// answers while 200 slow clients hold connections, a port in use is refused,
// and stop never hangs. Also the command line's strict numbers and the
// blank token file.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstring>
#include <fstream>
#include <thread>

#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/runtime_fixture.hpp"
#include "tests/temp_dir.hpp"
#include "tests/tools/cli_fixture.hpp"
#include "tests/tools/served_fixture.hpp"
#include "tools/serve_command.hpp"

using namespace cohort;
using namespace std::chrono_literals;

namespace {

using test::token;

using test::has;

/// A raw client socket, for requests no well-behaved client library sends.
struct raw_client {
  int fd = -1;

  explicit raw_client(int port, std::chrono::milliseconds timeout = 5000ms) {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd >= 0);
    timeval tv{};
    tv.tv_sec = timeout.count() / 1000;
    tv.tv_usec = (timeout.count() % 1000) * 1000;
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(uint16_t(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }

  ~raw_client() {
    if (fd >= 0)
      ::close(fd);
  }

  bool connected = false;

  /// False once the peer closed or reset the connection.
  bool send(const std::string& data) {
    size_t done = 0;
    while (done < data.size()) {
      auto n = ::send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
      if (n <= 0)
        return false;
      done += size_t(n);
    }
    return true;
  }

  /// Everything until the peer closes (or the timeout).
  std::string read_all() {
    std::string out;
    char buf[4096];
    for (;;) {
      auto n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0)
        return out;
      out.append(buf, size_t(n));
    }
  }

  /// True when the peer closed the connection (an orderly end or a reset).
  bool closed_by_peer() {
    char c;
    auto n = ::recv(fd, &c, 1, 0);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
  }
};

int status_of(const std::string& reply) {
  int status = 0;
  std::sscanf(reply.c_str(), "HTTP/1.%*d %d", &status);
  return status;
}

// Resident memory of this process, in bytes.
uint64_t rss_bytes() {
  std::ifstream in{"/proc/self/statm"};
  uint64_t pages = 0;
  uint64_t resident = 0;
  in >> pages >> resident;
  return resident * uint64_t(::sysconf(_SC_PAGESIZE));
}

// The served node of the admin API's tests, its requests with a short
// read timeout: a server that stops answering fails the test quickly.
struct http_served : test::served {
  void start(tools::http_limits limits = {}) {
    served::start(test::make_config(dir, 1, {}), token, limits);
  }

  httplib::Result get(const std::string& path) {
    httplib::Client c{"127.0.0.1", port};
    c.set_read_timeout(5);
    return c.Get(path.c_str());
  }

  httplib::Result post(const std::string& path, const std::string& body) {
    httplib::Client c{"127.0.0.1", port};
    c.set_read_timeout(5);
    httplib::Headers h{{"Authorization", "Bearer " + token}};
    return c.Post(path.c_str(), h, body, "application/json");
  }
};

std::string quota_request(const std::string& head_extra) {
  return "POST /v1/tenants/t/quota HTTP/1.1\r\nHost: x\r\n"
         "Authorization: Bearer " +
         token + "\r\nContent-Type: application/json\r\n" + head_extra + "\r\n";
}

} // namespace

TEST_CASE_METHOD(http_served,
                 "a body over the limit is refused with 413, with a length "
                 "and chunked, and does not grow the process",
                 "[tools][serve][http]") {
  tools::http_limits lim;
  lim.max_body_bytes = 64 << 10;
  start(lim);
  SECTION("a body within the limit is served") {
    auto r = post("/v1/tenants/t/quota", R"({"max_inflight": 9})");
    REQUIRE(r);
    CHECK(r->status == 200);
  }
  SECTION("a Content-Length over the limit: 413 before the body is read") {
    raw_client c{port};
    REQUIRE(c.connected);
    REQUIRE(c.send(quota_request("Content-Length: 300000000\r\n")));
    auto reply = c.read_all();
    INFO(reply);
    CHECK(status_of(reply) == 413);
    CHECK(has(reply, "body_too_large"));
  }
  SECTION("a chunked body over the limit: 413 at its end, the excess "
          "dropped") {
    raw_client c{port, 20000ms};
    REQUIRE(c.connected);
    REQUIRE(c.send(quota_request("Transfer-Encoding: chunked\r\n")));
    auto before = rss_bytes();
    // 64 MiB in chunks of 64 KiB: 1,000 times the limit.
    std::string chunk(64 << 10, ' ');
    char size_line[32];
    std::snprintf(size_line, sizeof size_line, "%zx\r\n", chunk.size());
    std::string framed = size_line + chunk + "\r\n";
    bool sent = true;
    for (int i = 0; i < 1024 && sent; ++i)
      sent = c.send(framed);
    if (sent)
      c.send("0\r\n\r\n");
    auto reply = c.read_all();
    auto grown = rss_bytes() - std::min(before, rss_bytes());
    INFO(reply);
    CHECK(status_of(reply) == 413);
    CHECK(grown < (16u << 20));
  }
  SECTION("a chunked body within the limit is served") {
    raw_client c{port};
    REQUIRE(c.connected);
    std::string body = R"({"max_inflight": 5})";
    char size_line[32];
    std::snprintf(size_line, sizeof size_line, "%zx\r\n", body.size());
    REQUIRE(c.send(quota_request("Transfer-Encoding: chunked\r\n"
                                 "Connection: close\r\n") +
                   size_line + body + "\r\n0\r\n\r\n"));
    auto reply = c.read_all();
    INFO(reply);
    CHECK(status_of(reply) == 200);
  }
}

TEST_CASE_METHOD(http_served, "header floods are refused with 431",
                 "[tools][serve][http]") {
  tools::http_limits lim;
  lim.max_headers = 32;
  lim.max_header_bytes = 8 << 10;
  start(lim);
  SECTION("too many header fields") {
    raw_client c{port};
    REQUIRE(c.connected);
    std::string req = "GET /metrics HTTP/1.1\r\nHost: x\r\n";
    for (int i = 0; i < 40; ++i)
      req += "X-H" + std::to_string(i) + ": v\r\n";
    REQUIRE(c.send(req + "\r\n"));
    auto reply = c.read_all();
    INFO(reply);
    CHECK(status_of(reply) == 431);
  }
  SECTION("headers over the byte limit") {
    raw_client c{port};
    REQUIRE(c.connected);
    REQUIRE(c.send("GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " +
                   std::string(10 << 10, 'a') + "\r\n\r\n"));
    auto reply = c.read_all();
    INFO(reply);
    CHECK(status_of(reply) == 431);
  }
  SECTION("a million header fields: refused or closed, never kept") {
    raw_client c{port};
    REQUIRE(c.connected);
    std::string block;
    for (int i = 0; i < 1000; ++i)
      block += "X-H: v\r\n";
    bool sent = c.send("GET /metrics HTTP/1.1\r\nHost: x\r\n");
    for (int i = 0; i < 1000 && sent; ++i)
      sent = c.send(block);
    auto reply = c.read_all();
    INFO(reply.substr(0, 200));
    CHECK((reply.empty() || status_of(reply) == 431));
  }
  SECTION("a normal request still passes, and refusals are counted") {
    raw_client c{port};
    REQUIRE(c.connected);
    REQUIRE(c.send("GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " +
                   std::string(10 << 10, 'a') + "\r\n\r\n"));
    c.read_all();
    auto r = get("/metrics");
    REQUIRE(r);
    CHECK(r->status == 200);
    CHECK(has(r->body, "cohort_http_requests_total{route=\"refused\",code="
                       "\"431\"} 1"));
  }
}

TEST_CASE_METHOD(http_served,
                 "a client that trickles its request is closed at the read "
                 "deadline",
                 "[tools][serve][http]") {
  tools::http_limits lim;
  lim.read_timeout_s = 0.5;
  start(lim);
  raw_client c{port, 200ms};
  REQUIRE(c.connected);
  REQUIRE(c.send("GET /metrics HTTP/1.1\r\nHost: x\r\n"));
  // A byte every 100 ms resets any inactivity timer; the deadline holds.
  bool closed = false;
  auto t0 = std::chrono::steady_clock::now();
  while (!closed && std::chrono::steady_clock::now() - t0 < 5s) {
    closed = !c.send("X") || c.closed_by_peer();
    std::this_thread::sleep_for(100ms);
  }
  CHECK(closed);
  CHECK(std::chrono::steady_clock::now() - t0 < 3s);
  CHECK(http->timed_out() >= 1);
  // The server goes on serving others, and counts what it closed.
  auto r = get("/metrics");
  REQUIRE(r);
  CHECK(r->status == 200);
  CHECK(has(r->body, "# TYPE cohort_http_connections_timed_out_total counter"));
  CHECK_FALSE(has(r->body, "cohort_http_connections_timed_out_total 0"));
}

TEST_CASE_METHOD(http_served,
                 "/metrics answers while 200 slow clients hold connections",
                 "[tools][serve][http]") {
  start();
  std::vector<std::unique_ptr<raw_client>> slow;
  for (int i = 0; i < 200; ++i) {
    slow.push_back(std::make_unique<raw_client>(port, 100ms));
    REQUIRE(slow.back()->connected);
    REQUIRE(slow.back()->send("POST /v1/tenants/t/quota HTTP/1.1\r\n"
                              "Host: x\r\nX-Slow: "));
  }
  for (int round = 0; round < 3; ++round) {
    for (auto& s : slow)
      s->send("a");
    auto t0 = std::chrono::steady_clock::now();
    auto m = get("/metrics");
    REQUIRE(m);
    CHECK(m->status == 200);
    CHECK(has(m->body, "cohort_items_completed_total"));
    // Generous: what matters is that it answers at all.
    CHECK(std::chrono::steady_clock::now() - t0 < 2s);
  }
}

TEST_CASE_METHOD(http_served,
                 "a connection over the limit is closed on accept, not queued "
                 "behind idle ones",
                 "[tools][serve][http]") {
  tools::http_limits lim;
  lim.max_connections = 16;
  lim.read_timeout_s = 30;
  start(lim);
  std::vector<std::unique_ptr<raw_client>> idle;
  for (int i = 0; i < 16; ++i) {
    idle.push_back(std::make_unique<raw_client>(port));
    REQUIRE(idle.back()->connected);
    REQUIRE(idle.back()->send("GET /metrics HTTP/1.1\r\nHost: x\r\n"));
  }
  // Every one of them accepted and counted before the next comes.
  std::this_thread::sleep_for(300ms);
  for (int round = 0; round < 3; ++round) {
    raw_client over{port, 3000ms};
    REQUIRE(over.connected);
    auto t0 = std::chrono::steady_clock::now();
    CHECK(over.closed_by_peer());
    CHECK(std::chrono::steady_clock::now() - t0 < 2s);
  }
  auto t0 = std::chrono::steady_clock::now();
  auto refused = get("/metrics");
  CHECK_FALSE(refused);
  CHECK(std::chrono::steady_clock::now() - t0 < 2s);
  // One idle connection goes: the next scrape is served.
  idle.pop_back();
  std::this_thread::sleep_for(300ms);
  auto m = get("/metrics");
  REQUIRE(m);
  CHECK(m->status == 200);
  CHECK(has(m->body, "cohort_http_requests_total"));
}

TEST_CASE("stopping the HTTP server never hangs", "[tools][serve][http]") {
  test::actor_fixture f;
  auto r = actors::runtime::start(f.sys, test::make_config(f.dir, 1, {}));
  REQUIRE(r);
  tools::metrics_exporter metrics{**r};
  tools::admin_api api{**r, token, metrics};
  {
    // Stop before start, and twice.
    tools::http_service http{api};
    http.stop();
    http.stop();
  }
  for (int i = 0; i < 50; ++i) {
    tools::http_service http{api};
    auto port = http.start("127.0.0.1", 0);
    REQUIRE(port);
    if (i % 2 == 1) {
      // Clients mid-request while the server stops.
      std::vector<std::unique_ptr<raw_client>> held;
      for (int k = 0; k < 20; ++k) {
        held.push_back(std::make_unique<raw_client>(*port));
        held.back()->send("GET /metrics HTTP/1.1\r\nHost: x\r\n");
      }
      auto t0 = std::chrono::steady_clock::now();
      http.stop();
      CHECK(std::chrono::steady_clock::now() - t0 < 2s);
    } else {
      http.stop();
    }
  }
  (*r)->stop();
}

TEST_CASE("cohort serve refuses a port in use", "[tools][serve][http]") {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(::listen(fd, 4) == 0);
  socklen_t len = sizeof a;
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  auto port = std::to_string(ntohs(a.sin_port));
  test::temp_dir dir;
  auto r = test::cohort_cli("serve --listen 127.0.0.1:" + port +
                            " --for 5 --audit " + dir.file("audit.log"));
  INFO(r.output);
  CHECK(r.status == 2);
  CHECK(has(r.output, "in use"));
  ::close(fd);
}

TEST_CASE_METHOD(test::served,
                 "HEAD is GET without a body, and an escaped control "
                 "character in a URL is not decoded",
                 "[tools][serve][http]") {
  // Item 1 waits on sim1, which is offline, for as long as the test looks.
  auto cfg = test::make_config(dir, 0, {{"sim0", 1}, {"sim1", 1}});
  cfg.mutable_tenant(0)->clear_devices();
  cfg.mutable_tenant(0)->add_devices("sim1");
  cfg.mutable_tenant(0)->set_queue_timeout_ms(120000);
  start(cfg);
  REQUIRE_FALSE(rt->set_offline("sim1"));
  auto waiting = rt->submit(test::gemv_item(1));
  auto ask = [&](const std::string& request_line) {
    raw_client c{port};
    REQUIRE(c.connected);
    REQUIRE(c.send(request_line +
                   " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
    return c.read_all();
  };
  auto head = ask("HEAD /metrics");
  INFO(head);
  CHECK(status_of(head) == 200);
  CHECK(has(head, "text/plain; version=0.0.4"));
  // Headers only: nothing after the blank line.
  auto end = head.find("\r\n\r\n");
  REQUIRE(end != std::string::npos);
  CHECK(head.size() == end + 4);
  CHECK(status_of(ask("HEAD /v1/items/1")) == 200);
  // HEAD of a POST route is still not allowed.
  CHECK(status_of(ask("HEAD /v1/devices/rescan")) == 405);
  auto item = ask("GET /v1/items/1");
  CHECK(status_of(item) == 200);
  CHECK(has(item, "\"id\": \"1\""));
  // "1%00" is not item 1, nor is "1%0a"; other escapes are decoded.
  for (auto path : {"/v1/items/1%00", "/v1/items/1%0a", "/v1/items/1%00/",
                    "/v1/items/1%7f"}) {
    auto reply = ask(std::string{"GET "} + path);
    INFO(path << ": " << reply);
    CHECK(status_of(reply) >= 400);
    CHECK(status_of(reply) < 500);
    CHECK_FALSE(has(reply, "\"id\": \"1\""));
  }
  CHECK(status_of(ask("GET /v1/items/%31")) == 200);
}

TEST_CASE("cohort serve refuses a blank token file and bad numbers",
          "[tools][serve][http]") {
  test::temp_dir dir;
  for (auto text : {"", "\n", "   \n", " \t \r\n"}) {
    auto tok = test::write(dir, "token", text);
    auto r = test::cohort_cli("serve --listen 127.0.0.1:0 --for 5 "
                              "--token-file " +
                              tok);
    INFO(r.output);
    CHECK(r.status == 2);
    CHECK(has(r.output, "empty or blank"));
  }
  for (auto bad :
       {"--for inf", "--for nan", "--for 1e300", "--for -1", "--for ''",
        "--for 5x", "--repeat 1.5", "--repeat -1", "--repeat 4294967296",
        "--repeat 1e3", "--http-max-body 1e30", "--http-max-body -1",
        "--http-max-body 2G", "--http-max-headers 0", "--http-read-timeout inf",
        "--http-read-timeout 0", "--http-max-connections 4294967297",
        "--http-threads 0", "--http-max-header-bytes 12"}) {
    auto r = test::cohort_cli(std::string{"serve --listen 127.0.0.1:0 "} + bad);
    INFO(bad << ": " << r.output);
    CHECK(r.status == 2);
  }
  // The limits themselves run.
  auto r = test::cohort_cli("serve --listen 127.0.0.1:0 --for 0.2 --audit " +
                            dir.file("audit.log") +
                            " --http-max-body 256K "
                            "--http-max-headers 20 --http-max-header-bytes 4K "
                            "--http-read-timeout 2.5 --http-max-connections 64 "
                            "--http-max-connections-per-ip 8 --http-threads 1");
  INFO(r.output);
  CHECK(r.status == 0);
}

TEST_CASE("a token file is a small regular file with the token on its first "
          "line, at every door",
          "[tools][serve][http]") {
  test::temp_dir dir;
  auto fifo = dir.file("fifo");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  auto big = dir.file("big");
  {
    // A token and then 100 KB: a secret file is not a place for data.
    std::ofstream out{big};
    out << "0123456789abcdef0123\n" << std::string(100000, 'x');
  }
  auto escape = test::write(dir, "escape", "0123456789abcdef\x1b[2J\n");
  auto blank = test::write(dir, "blank", " \n");
  auto good = test::write(dir, "good", "0123456789abcdef0123\n");
  struct bad_file {
    std::string path, says;
  };
  std::vector<bad_file> bad{
      {"/dev/zero", "a character device"},    {fifo, "a FIFO"},
      {dir.path.string(), "a directory"},     {big, "more than 65536 bytes"},
      {escape, "control character (byte 27"}, {blank, "empty or blank"},
      {dir.file("missing"), "cannot read"},
  };
  // Nothing listens at the admin URL: each refusal comes before a call.
  std::string url = " --url http://127.0.0.1:9";
  for (auto& b : bad) {
    for (auto cmd : {"serve --listen 127.0.0.1:0 --for 5 --token-file ",
                     "admin stats --token-file ",
                     "jobs cancel --tenant t --token-file "}) {
      bool serve = std::string{cmd}.starts_with("serve");
      auto r = test::cohort_cli(cmd + b.path + (serve ? "" : url));
      INFO(cmd << b.path << ": " << r.output);
      CHECK(r.status == 2);
      CHECK(has(r.output, "--token-file"));
      CHECK(has(r.output, b.says));
      CHECK_FALSE(has(r.output, "cannot reach"));
    }
  }
  // A good one is read: admin gets as far as calling the node.
  auto r = test::cohort_cli("admin stats --token-file " + good + url);
  INFO(r.output);
  CHECK(has(r.output, "cannot reach"));
}

TEST_CASE("cohort serve checks a config's scheduler before starting its "
          "threads",
          "[tools][serve][http]") {
  test::temp_dir dir;
  for (auto threads : {"4294967295", "100000"}) {
    auto cfg = test::write(dir, "cfg.textproto",
                           std::string{"devices { cpu_workers: 1 } "
                                       "scheduler { threads: "} +
                               threads + " }");
    // timeout: it used to try to start them all, growing without a word.
    auto r = test::run_command("timeout 60 " + std::string{COHORT_BINARY} +
                               " serve --listen 127.0.0.1:0 --for 5 --config " +
                               cfg + " --audit " + dir.file("audit.log"));
    INFO(threads << ": " << r.output);
    CHECK(r.status == 2);
    CHECK(has(r.output, "scheduler: threads is"));
    CHECK(has(r.output, "not in 1..256"));
  }
}

TEST_CASE("cohort admin reads numbers strictly", "[tools][serve][http]") {
  // Nothing listens there: a bad number is refused before any request.
  std::string admin = "admin --url http://127.0.0.1:9 quota t ";
  for (auto bad :
       {"--max-inflight 4294967296", "--max-inflight -1", "--max-inflight 1.5",
        "--max-inflight 8K", "--max-inflight ''", "--memory-quota 1e30",
        "--memory-quota -5", "--memory-quota 1.5X", "--memory-quota inf",
        "--memory-quota 99999999999T", "--rate inf", "--rate nan", "--rate -1",
        "--rate 1e300", "--rate 3x", "--burst 4294967296", "--burst x",
        "--bogus 1"}) {
    auto r = test::cohort_cli(admin + bad);
    INFO(bad << ": " << r.output);
    CHECK(r.status == 2);
    CHECK_FALSE(has(r.output, "cannot reach"));
  }
  // Good numbers get as far as the (absent) node.
  auto r = test::cohort_cli(admin + "--max-inflight 4294967295 --memory-quota "
                                    "1.5G --rate 0.5 --burst 3");
  INFO(r.output);
  CHECK(r.status == 1);
  CHECK(has(r.output, "cannot reach"));
}

TEST_CASE_METHOD(http_served,
                 "the admin API refuses numbers out of range with 400",
                 "[tools][serve][http]") {
  start();
  for (auto body :
       {R"({"max_inflight": 4294967296})", R"({"max_inflight": -1})",
        R"({"max_inflight": 1.5})", R"({"memory_quota_bytes": 1e30})",
        R"({"memory_quota_bytes": "18446744073709551615"})",
        R"({"memory_quota_bytes": -5})",
        R"({"rate_limit": {"items_per_second": "Infinity"}})",
        R"({"rate_limit": {"items_per_second": "NaN"}})",
        R"({"rate_limit": {"items_per_second": -1}})",
        R"({"rate_limit": {"burst": 4294967296}})"}) {
    auto r = post("/v1/tenants/t/quota", body);
    REQUIRE(r);
    INFO(body << ": " << r->body);
    CHECK(r->status == 400);
    CHECK(has(r->body, "bad_request"));
  }
  auto h = rt->headroom("t");
  REQUIRE(h);
  CHECK(h->tenants.at(0).memory_quota == 0);
}
