#include "tools/serve_command.hpp"

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <caf/all.hpp>

#include "audit/audit_log.hpp"
#include "config/compile.hpp"
#include "config/quotas.hpp"
#include "ipc/stop_signals.hpp"
#include "messages/convert.hpp"
#include "messages/errc.hpp"
#include "messages/network.hpp"
#include "messages/secret_file.hpp"
#include "messages/system_config.hpp"
#include "tools/pipeline.hpp"
#include "tools/scheduler_arg.hpp"
#include "tools/strict_numbers.hpp"

namespace cohort::tools {

namespace {

int serve_bad_input(const std::string& msg) {
  std::fprintf(stderr, "cohort serve: %s\n", msg.c_str());
  return exit_bad_input;
}

struct serve_options {
  std::string config;
  std::string host = "127.0.0.1";
  int port = 9470;
  std::string token_file;
  std::string audit;
  std::string share_socket;
  std::string scheduler;
  std::string pipeline;
  /// Remote device hosts to join, over the config's network.join.
  std::vector<std::string> join;
  uint32_t repeat = 0; // 0: until stopped
  double for_seconds = 0;
  http_limits http;
};

// The longest --for: a year; longer is as good as until stopped (omit it).
constexpr double max_for_seconds = 365.0 * 24 * 3600;

// One --http-* flag into `limits`.
caf::error parse_http_limit(const std::string& k, const std::string& v,
                            http_limits& limits) {
  auto count = [&](uint32_t& out, uint64_t lo, uint64_t hi) -> caf::error {
    auto n = parse_count(k, v, hi);
    if (!n)
      return n.error();
    if (*n < lo)
      return make_error(errc::invalid_arguments, k + " takes at least " +
                                                     std::to_string(lo) +
                                                     ", got '" + v + "'");
    out = uint32_t(*n);
    return caf::none;
  };
  auto bytes = [&](uint64_t& out, uint64_t lo, uint64_t hi) -> caf::error {
    auto n = parse_bytes(k, v, hi);
    if (!n)
      return n.error();
    if (*n < lo)
      return make_error(errc::invalid_arguments, k + " takes at least " +
                                                     std::to_string(lo) +
                                                     " bytes, got '" + v + "'");
    out = *n;
    return caf::none;
  };
  if (k == "--http-max-body")
    return bytes(limits.max_body_bytes, 0, uint64_t{1} << 30);
  if (k == "--http-max-headers")
    return count(limits.max_headers, 1, 10000);
  if (k == "--http-max-header-bytes")
    return bytes(limits.max_header_bytes, 1024, 1 << 20);
  if (k == "--http-read-timeout") {
    auto x = parse_real(k, v, 0.001, 3600);
    if (!x)
      return x.error();
    limits.read_timeout_s = *x;
    return caf::none;
  }
  if (k == "--http-max-connections")
    return count(limits.max_connections, 1, 100000);
  if (k == "--http-max-connections-per-ip")
    return count(limits.max_connections_per_ip, 0, 100000);
  if (k == "--http-threads")
    return count(limits.threads, 1, 64);
  return make_error(errc::invalid_arguments, "unknown option '" + k + "'");
}

// The options CLI11 read, each value read strictly.
caf::expected<serve_options>
parse(const std::map<std::string, std::string>& given) {
  serve_options o;
  for (auto& [k, v] : given) {
    if (k == "--config") {
      o.config = v;
    } else if (k == "--listen") {
      auto colon = v.rfind(':');
      if (colon == std::string::npos)
        return make_error(errc::invalid_arguments,
                          "--listen takes HOST:PORT, got '" + v + "'");
      o.host = v.substr(0, colon);
      char* end = nullptr;
      auto port = std::strtol(v.c_str() + colon + 1, &end, 10);
      if (*end != '\0' || colon + 1 == v.size() || port < 0 || port > 65535)
        return make_error(errc::invalid_arguments,
                          "--listen: bad port in '" + v + "'");
      o.port = int(port);
    } else if (k == "--token-file") {
      o.token_file = v;
    } else if (k == "--audit") {
      o.audit = v;
    } else if (k == "--share-socket") {
      o.share_socket = v;
    } else if (k == "--scheduler") {
      o.scheduler = v;
    } else if (k == "--pipeline") {
      o.pipeline = v;
    } else if (k == "--join") {
      // HOST:PORT, or several separated by commas; each checked with the
      // network section (compile_network).
      size_t from = 0;
      for (;;) {
        auto comma = v.find(',', from);
        auto one = v.substr(from, comma == std::string::npos ? std::string::npos
                                                             : comma - from);
        if (one.empty())
          return make_error(errc::invalid_arguments,
                            "--join takes HOST:PORT[,HOST:PORT...], got '" + v +
                                "'");
        o.join.push_back(std::move(one));
        if (comma == std::string::npos)
          break;
        from = comma + 1;
      }
    } else if (k == "--repeat") {
      auto n = parse_count(k, v, UINT32_MAX);
      if (!n)
        return n.error();
      o.repeat = uint32_t(*n);
    } else if (k == "--for") {
      auto x = parse_real(k, v, 0, max_for_seconds);
      if (!x)
        return x.error();
      o.for_seconds = *x;
    } else if (k.rfind("--http-", 0) == 0) {
      if (auto err = parse_http_limit(k, v, o.http))
        return err;
    }
  }
  return o;
}

bool blank(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' ||
         c == '\v';
}

std::string trimmed(std::string s) {
  while (!s.empty() && blank(s.back()))
    s.pop_back();
  size_t lead = 0;
  while (lead < s.size() && blank(s[lead]))
    ++lead;
  return s.substr(lead);
}

caf::expected<std::string> read_token(const serve_options& o) {
  std::string token;
  if (!o.token_file.empty()) {
    // A node meant to take admin calls would otherwise start read-only.
    auto t =
        read_secret_file("--token-file", o.token_file, errc::invalid_arguments);
    if (!t) {
      auto why = detail_of(t.error());
      if (why.find("empty or blank") != std::string::npos)
        why += "; write the admin token there (16 characters at least), or "
               "leave out --token-file for a read-only node";
      return make_error(errc::invalid_arguments, why);
    }
    token = std::move(*t);
  } else if (auto* env = std::getenv("COHORT_ADMIN_TOKEN");
             env != nullptr && *env != '\0') {
    token = trimmed(env);
    if (token.empty())
      return make_error(errc::invalid_arguments,
                        "$COHORT_ADMIN_TOKEN is blank; set the admin token "
                        "(16 characters at least), or unset it for a "
                        "read-only node");
  }
  if (!token.empty() && token.size() < 16)
    return make_error(errc::invalid_arguments,
                      "the admin token must have at least 16 characters");
  return token;
}

} // namespace

int cmd_serve(const serve_cli& c) {
  auto opts = parse(c.options.given());
  if (!opts)
    return serve_bad_input(describe(opts.error()));
  auto token = read_token(*opts);
  if (!token)
    return serve_bad_input(describe(token.error()));
  pb::PipelineSpec spec;
  bool has_pipeline = !opts->pipeline.empty();
  if (has_pipeline) {
    auto loaded = load_pipeline(opts->pipeline);
    if (!loaded)
      return serve_bad_input(describe(loaded.error()));
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
      return serve_bad_input(describe(loaded.error()));
    cfg = std::move(*loaded);
  }
  if (!opts->join.empty()) {
    // Replaces the config's list: the command line names the hosts now.
    cfg.mutable_network()->clear_join();
    for (auto& j : opts->join)
      cfg.mutable_network()->add_join(j);
    if (auto net = compile_network(cfg); !net)
      return serve_bad_input(describe(net.error()));
  }
  if (!opts->audit.empty())
    cfg.set_audit_path(opts->audit);
  if (!opts->share_socket.empty())
    cfg.set_share_socket(opts->share_socket);
  if (!opts->scheduler.empty())
    if (auto err = apply_scheduler_arg(cfg, opts->scheduler))
      return serve_bad_input(describe(err));
  // Checked before the actor system starts its scheduler's threads from it
  // (a config's `scheduler { threads: 4294967295 }` would try to start them).
  if (auto err = config::check_config(cfg))
    return serve_bad_input(describe(err));
  // SIGINT and SIGTERM stop the node: taken before any thread starts, and
  // a second one (GNU timeout sends two) does not cut the stop short.
  ipc::stop_signals stop_signals{"cohort serve"};
  system_config sys_cfg{cfg};
  caf::actor_system sys{sys_cfg};
  auto rt = actors::runtime::start(sys, cfg);
  if (!rt)
    return serve_bad_input(describe(rt.error()));
  metrics_exporter metrics{**rt};
  admin_api api{**rt, *token, metrics};
  http_service http{api, opts->http};
  auto port = http.start(opts->host, opts->port);
  if (!port) {
    (*rt)->stop();
    return serve_bad_input(describe(port.error()));
  }
  std::printf("cohort serve: listening on http://%s:%d (metrics at /metrics, "
              "admin API at /v1; mutating calls %s)\n",
              opts->host.c_str(), *port,
              token->empty() ? "disabled: no token" : "need the token");
  if (!(*rt)->share_socket().empty())
    std::printf("  sharing objects at %s\n", (*rt)->share_socket().c_str());
  for (auto& d : (*rt)->devices())
    std::printf("  device %-8s %s%s%s%s\n", d.name.c_str(), to_string(d.kind),
                d.simulated ? " (simulated)" : "",
                d.remote.empty() ? "" : " on the remote host ",
                d.remote.c_str());
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
  int sig = stop_signals.wait(opts->for_seconds);
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
      audit::audit_log::verify(audit_path, [&](const pb::AuditRecord& r) {
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
