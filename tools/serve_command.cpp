#include "tools/serve_command.hpp"

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include <caf/all.hpp>
#include <httplib.h>

#include "actors/audit_log.hpp"
#include "messages/convert.hpp"
#include "messages/errc.hpp"
#include "messages/system_config.hpp"
#include "tools/pipeline.hpp"

namespace cohort::tools {

http_service::http_service(admin_api& api)
    : api_(api), server_(std::make_unique<httplib::Server>()) {
  auto serve = [this](const httplib::Request& req, httplib::Response& res) {
    auto r = api_.handle(
        req.method, req.path, req.get_header_value("Authorization"), req.body,
        req.remote_addr + ":" + std::to_string(req.remote_port));
    res.status = r.status;
    if (r.status == 401)
      res.set_header("WWW-Authenticate", "Bearer realm=\"cohort\"");
    res.set_content(std::move(r.body), r.content_type.c_str());
  };
  // Every path goes to the API, which answers 404 and 405 itself.
  server_->Get(".*", serve);
  server_->Post(".*", serve);
  server_->Put(".*", serve);
  server_->Delete(".*", serve);
  server_->Patch(".*", serve);
  server_->set_payload_max_length(8 << 20);
}

http_service::~http_service() {
  stop();
}

caf::expected<int> http_service::start(const std::string& host, int port) {
  int bound = port == 0
                  ? server_->bind_to_any_port(host.c_str())
                  : (server_->bind_to_port(host.c_str(), port) ? port : -1);
  if (bound < 0)
    return make_error(errc::invalid_arguments,
                      "cannot listen on " + host + ":" + std::to_string(port));
  thread_ = std::thread{[this] { server_->listen_after_bind(); }};
  return bound;
}

void http_service::stop() {
  if (thread_.joinable()) {
    server_->stop();
    thread_.join();
  }
}

namespace {

constexpr int exit_ok = 0;
constexpr int exit_failed = 1;
constexpr int exit_bad_input = 2;

int bad_input(const std::string& msg) {
  std::fprintf(stderr, "cohort serve: %s\n", msg.c_str());
  return exit_bad_input;
}

struct serve_options {
  std::string config;
  std::string host = "127.0.0.1";
  int port = 9470;
  std::string token_file;
  std::string audit;
  std::string pipeline;
  uint32_t repeat = 0; // 0: until stopped
  double for_seconds = 0;
};

caf::expected<serve_options> parse(const std::vector<std::string>& args) {
  serve_options o;
  for (size_t i = 0; i < args.size(); ++i) {
    auto& k = args[i];
    auto value = [&]() -> caf::expected<std::string> {
      if (i + 1 >= args.size())
        return make_error(errc::invalid_arguments, k + " needs a value");
      return args[++i];
    };
    auto v = value();
    if (!v)
      return v.error();
    if (k == "--config") {
      o.config = *v;
    } else if (k == "--listen") {
      auto colon = v->rfind(':');
      if (colon == std::string::npos)
        return make_error(errc::invalid_arguments,
                          "--listen takes HOST:PORT, got '" + *v + "'");
      o.host = v->substr(0, colon);
      char* end = nullptr;
      auto port = std::strtol(v->c_str() + colon + 1, &end, 10);
      if (*end != '\0' || colon + 1 == v->size() || port < 0 || port > 65535)
        return make_error(errc::invalid_arguments,
                          "--listen: bad port in '" + *v + "'");
      o.port = int(port);
    } else if (k == "--token-file") {
      o.token_file = *v;
    } else if (k == "--audit") {
      o.audit = *v;
    } else if (k == "--pipeline") {
      o.pipeline = *v;
    } else if (k == "--repeat" || k == "--for") {
      char* end = nullptr;
      double x = std::strtod(v->c_str(), &end);
      if (*end != '\0' || v->empty() || x < 0)
        return make_error(errc::invalid_arguments,
                          k + " takes a non-negative number, got '" + *v + "'");
      if (k == "--repeat")
        o.repeat = uint32_t(x);
      else
        o.for_seconds = x;
    } else {
      return make_error(errc::invalid_arguments, "unknown option '" + k + "'");
    }
  }
  return o;
}

caf::expected<std::string> read_token(const serve_options& o) {
  std::string token;
  if (!o.token_file.empty()) {
    std::ifstream in{o.token_file};
    if (!in)
      return make_error(errc::invalid_arguments,
                        "cannot read the token file '" + o.token_file + "'");
    std::getline(in, token);
  } else if (auto* env = std::getenv("COHORT_ADMIN_TOKEN")) {
    token = env;
  }
  while (!token.empty() && (token.back() == '\r' || token.back() == ' '))
    token.pop_back();
  if (!token.empty() && token.size() < 16)
    return make_error(errc::invalid_arguments,
                      "the admin token must have at least 16 characters");
  return token;
}

} // namespace

int cmd_serve(const std::vector<std::string>& args) {
  auto opts = parse(args);
  if (!opts)
    return bad_input(describe(opts.error()));
  auto token = read_token(*opts);
  if (!token)
    return bad_input(describe(token.error()));
  pb::PipelineSpec spec;
  bool has_pipeline = !opts->pipeline.empty();
  if (has_pipeline) {
    auto loaded = load_pipeline(opts->pipeline);
    if (!loaded)
      return bad_input(describe(loaded.error()));
    spec = std::move(*loaded);
  }
  pb::RuntimeConfig cfg = has_pipeline ? config_for(spec) : [] {
    auto c = actors::default_config();
    actors::add_sim_gpus(c, 4);
    return c;
  }();
  if (!opts->config.empty()) {
    auto loaded = load_config(opts->config);
    if (!loaded)
      return bad_input(describe(loaded.error()));
    cfg = std::move(*loaded);
  }
  if (!opts->audit.empty())
    cfg.set_audit_path(opts->audit);
  // SIGINT and SIGTERM are taken by sigwait below: blocked before any
  // thread starts, so that every thread inherits the mask.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  system_config sys_cfg;
  caf::actor_system sys{sys_cfg};
  auto rt = actors::runtime::start(sys, cfg);
  if (!rt)
    return bad_input(describe(rt.error()));
  metrics_exporter metrics{**rt};
  admin_api api{**rt, *token, metrics};
  http_service http{api};
  auto port = http.start(opts->host, opts->port);
  if (!port) {
    (*rt)->stop();
    return bad_input(describe(port.error()));
  }
  std::printf("cohort serve: listening on http://%s:%d (metrics at /metrics, "
              "admin API at /v1; mutating calls %s)\n",
              opts->host.c_str(), *port,
              token->empty() ? "disabled: no token" : "need the token");
  for (auto& d : (*rt)->devices())
    std::printf("  device %-8s %s%s\n", d.name.c_str(), to_string(d.kind),
                d.simulated ? " (simulated)" : "");
  std::fflush(stdout);
  // The workload: the pipeline's batches, run after run.
  auto stopping = std::make_shared<std::atomic<bool>>(false);
  std::thread workload;
  if (has_pipeline) {
    workload = std::thread{[&] {
      for (uint32_t n = 1;
           !*stopping && (opts->repeat == 0 || n <= opts->repeat); ++n) {
        run_options ro;
        ro.cancel = stopping;
        auto rep = run_pipeline_on(sys, **rt, cfg, spec, ro);
        if (!rep) {
          std::printf("pipeline run %u: %s\n", n,
                      describe(rep.error()).c_str());
          break;
        }
        std::printf(
            "pipeline run %u: %llu items, %llu completed, %llu failed, "
            "%llu rejected, %llu lost in %.2f s%s\n",
            n, (unsigned long long)(rep->items - rep->not_submitted),
            (unsigned long long)rep->completed, (unsigned long long)rep->failed,
            (unsigned long long)rep->rejected, (unsigned long long)rep->lost,
            rep->seconds, rep->not_submitted > 0 ? " (stopped early)" : "");
        std::fflush(stdout);
      }
    }};
  }
  int sig = 0;
  if (opts->for_seconds > 0) {
    timespec ts;
    ts.tv_sec = time_t(opts->for_seconds);
    ts.tv_nsec = long((opts->for_seconds - double(ts.tv_sec)) * 1e9);
    sig = sigtimedwait(&stop_signals, nullptr, &ts);
  } else {
    sigwait(&stop_signals, &sig);
  }
  std::printf("cohort serve: stopping (%s)\n",
              sig > 0 ? strsignal(sig) : "time is up");
  std::fflush(stdout);
  // Nothing new comes in; what was admitted ends; the log is flushed.
  http.stop();
  *stopping = true;
  if (workload.joinable())
    workload.join();
  auto audit_path = (*rt)->audit_path();
  auto flushed = (*rt)->flush_audit();
  auto audit = (*rt)->audit_stats();
  (*rt)->stop();
  // Every item admitted in this run ended exactly once: the log says so.
  // Records before this run (an earlier node's) are verified, not counted.
  uint64_t first = audit ? audit->opened_at_seq : 0;
  uint64_t admitted = 0;
  uint64_t ended = 0;
  auto verdict =
      actors::audit_log::verify(audit_path, [&](const pb::AuditRecord& r) {
        if (r.seq() <= first)
          return;
        if (r.kind() == pb::ADMITTED)
          ++admitted;
        else if (r.kind() == pb::COMPLETED || r.kind() == pb::FAILED)
          ++ended;
      });
  // A log that could not be written is not a verified record of this run.
  bool complete = flushed && audit && audit->dropped == 0;
  std::printf("cohort serve: stopped; %llu items admitted, %llu ended in "
              "this run; audit log %s: %s, %llu records (%llu from this "
              "run)\n",
              (unsigned long long)admitted, (unsigned long long)ended,
              audit_path.c_str(),
              !verdict.ok ? "BROKEN"
              : !complete ? "INCOMPLETE"
                          : "verified",
              (unsigned long long)verdict.good_records,
              (unsigned long long)(verdict.last_seq > first
                                       ? verdict.last_seq - first
                                       : 0));
  if (!verdict.ok)
    std::printf("  first bad record %llu: %s\n",
                (unsigned long long)verdict.first_bad, verdict.reason.c_str());
  if (!complete)
    std::printf("  the log could not be written: %s; %llu write errors, %llu "
                "records dropped\n",
                flushed ? "records were dropped"
                        : describe(flushed.error()).c_str(),
                (unsigned long long)(audit ? audit->write_errors : 0),
                (unsigned long long)(audit ? audit->dropped : 0));
  return verdict.ok && complete && admitted == ended ? exit_ok : exit_failed;
}

} // namespace cohort::tools
