#include "messages/system_config.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include <unistd.h>

#include <caf/all.hpp>
#include <caf/io/middleman.hpp>
#include <caf/openssl/manager.hpp>
#include <caf/scheduler/coordinator.hpp>

#include "messages/alert.hpp"
#include "messages/audit_event.hpp"
#include "messages/audit_stats.hpp"
#include "messages/cohort.pb.h"
#include "messages/device_info.hpp"
#include "messages/errc.hpp"
#include "messages/host.hpp"
#include "messages/jobs.hpp"
#include "messages/latency_stealing.hpp"
#include "messages/memory_stats.hpp"
#include "messages/network.hpp"
#include "messages/quota.hpp"
#include "messages/share.hpp"
#include "messages/simulation.hpp"
#include "messages/stats.hpp"
#include "messages/trace.hpp"
#include "messages/work.hpp"

namespace cohort {

void register_types(caf::actor_system_config& cfg) {
  cfg.add_message_type<work_item>("cohort::work_item");
  cfg.add_message_type<work_result>("cohort::work_result");
  cfg.add_message_type<std::vector<work_item>>(
      "std::vector<cohort::work_item>");
  cfg.add_message_type<work_end>("cohort::work_end");
  cfg.add_message_type<std::vector<work_end>>("std::vector<cohort::work_end>");
  cfg.add_message_type<work_done>("cohort::work_done");
  cfg.add_message_type<std::vector<work_done>>(
      "std::vector<cohort::work_done>");
  cfg.add_message_type<run_request>("cohort::run_request");
  cfg.add_message_type<host_buffer>("cohort::host_buffer");
  cfg.add_message_type<object_info>("cohort::object_info");
  cfg.add_message_type<std::vector<object_info>>(
      "std::vector<cohort::object_info>");
  cfg.add_message_type<share_grant>("cohort::share_grant");
  cfg.add_message_type<share_peer>("cohort::share_peer");
  cfg.add_message_type<share_handle>("cohort::share_handle");
  cfg.add_message_type<attachment_info>("cohort::attachment_info");
  cfg.add_message_type<std::vector<run_request>>(
      "std::vector<cohort::run_request>");
  cfg.add_message_type<device_info>("cohort::device_info");
  cfg.add_message_type<audit_event>("cohort::audit_event");
  cfg.add_message_type<std::vector<audit_event>>(
      "std::vector<cohort::audit_event>");
  cfg.add_message_type<audit_entry>("cohort::audit_entry");
  cfg.add_message_type<std::vector<audit_entry>>(
      "std::vector<cohort::audit_entry>");
  cfg.add_message_type<audit_batch>("cohort::audit_batch");
  cfg.add_message_type<audit_stats>("cohort::audit_stats");
  cfg.add_message_type<std::vector<device_info>>(
      "std::vector<cohort::device_info>");
  cfg.add_message_type<device_stats>("cohort::device_stats");
  cfg.add_message_type<std::vector<device_stats>>(
      "std::vector<cohort::device_stats>");
  cfg.add_message_type<balancer_stats>("cohort::balancer_stats");
  cfg.add_message_type<fallback_stats>("cohort::fallback_stats");
  cfg.add_message_type<latency_histogram>("cohort::latency_histogram");
  cfg.add_message_type<alert>("cohort::alert");
  cfg.add_message_type<std::vector<alert>>("std::vector<cohort::alert>");
  cfg.add_message_type<std::vector<latency_histogram>>(
      "std::vector<cohort::latency_histogram>");
  cfg.add_message_type<quota_stats>("cohort::quota_stats");
  cfg.add_message_type<memory_snapshot>("cohort::memory_snapshot");
  cfg.add_message_type<quota_lease>("cohort::quota_lease");
  cfg.add_message_type<quota_usage>("cohort::quota_usage");
  cfg.add_message_type<headroom_report>("cohort::headroom_report");
  cfg.add_message_type<allocation_plan>("cohort::allocation_plan");
  cfg.add_message_type<simulation_report>("cohort::simulation_report");
  cfg.add_message_type<std::vector<memory_snapshot>>(
      "std::vector<cohort::memory_snapshot>");
  cfg.add_message_type<host_hello>("cohort::host_hello");
  cfg.add_message_type<sim_fault>("cohort::sim_fault");
  cfg.add_message_type<kernel_code>("cohort::kernel_code");
  cfg.add_message_type<item_view>("cohort::item_view");
  cfg.add_message_type<std::vector<item_view>>(
      "std::vector<cohort::item_view>");
  cfg.add_message_type<item_filter>("cohort::item_filter");
  cfg.add_message_type<trace_snapshot>("cohort::trace_snapshot");
  cfg.add_message_type<std::vector<kernel_code>>(
      "std::vector<cohort::kernel_code>");
  cfg.add_error_category(errc_category, [](uint8_t code, caf::atom_value,
                                           const caf::message& ctx) {
    return describe(caf::error{code, errc_category, ctx});
  });
}

void apply_scheduler(caf::actor_system_config& cfg, const pb::Scheduler& s) {
  using caf::config_value;
  // caf::string_view takes a char pointer only under GCC.
  auto count = [&](const char* key, bool has, uint32_t x) {
    if (has)
      cfg.set(caf::string_view{key, std::strlen(key)},
              config_value::integer{x});
  };
  auto us = [](uint32_t x) {
    return caf::timespan{std::chrono::microseconds{x}};
  };
  cfg.set("scheduler.policy", s.policy() == "sharing" ? caf::atom("sharing")
                                                      : caf::atom("stealing"));
  auto threads = s.has_threads()
                     ? s.threads()
                     : std::max(2u, std::thread::hardware_concurrency());
  cfg.set("scheduler.max-threads", config_value::integer{threads});
  count("scheduler.max-throughput", s.has_max_throughput(), s.max_throughput());
  count("work-stealing.aggressive-poll-attempts",
        s.has_aggressive_poll_attempts(), s.aggressive_poll_attempts());
  count("work-stealing.aggressive-steal-interval",
        s.has_aggressive_steal_interval(), s.aggressive_steal_interval());
  count("work-stealing.moderate-poll-attempts", s.has_moderate_poll_attempts(),
        s.moderate_poll_attempts());
  count("work-stealing.moderate-steal-interval",
        s.has_moderate_steal_interval(), s.moderate_steal_interval());
  cfg.set("work-stealing.moderate-sleep-duration",
          us(s.has_moderate_sleep_us() ? s.moderate_sleep_us() : 0));
  count("work-stealing.relaxed-steal-interval", s.has_relaxed_steal_interval(),
        s.relaxed_steal_interval());
  if (s.has_relaxed_sleep_us())
    cfg.set("work-stealing.relaxed-sleep-duration", us(s.relaxed_sleep_us()));
}

system_config::system_config() : system_config(pb::RuntimeConfig{}) {
  // nop
}

system_config::system_config(const pb::RuntimeConfig& cfg) {
  register_types(*this);
  apply_scheduler(*this, cfg.scheduler());
  // CAF makes its own scheduler unless one is loaded.
  auto& policy = cfg.scheduler().policy();
  if (policy != "sharing" && policy != "caf_stealing")
    load<caf::scheduler::coordinator<latency_stealing>>();
  if (needs_network(cfg)) {
    if (auto net = compile_network(cfg))
      load_network(*this, *net);
    else
      load_network(*this);
  }
}

namespace {

// Whether the config's real GPUs may run in device host processes
// (devices.gpu_host_processes, actors/runtime.hpp gpu_in_host): by default
// on a machine with GPU device files.
bool may_host_gpus(const pb::RuntimeConfig& cfg) {
  auto& d = cfg.devices();
  if (d.has_gpus() && !d.gpus())
    return false;
  for (auto& [name, hosted] : d.gpu_host_process())
    if (hosted)
      return true;
  if (d.has_gpu_host_processes())
    return d.gpu_host_processes();
  if (!cfg.share_socket().empty())
    return false;
  return ::access("/dev/nvidiactl", F_OK) == 0 ||
         ::access("/dev/kfd", F_OK) == 0;
}

} // namespace

bool needs_network(const pb::RuntimeConfig& cfg) {
  for (auto& g : cfg.devices().sim_gpu())
    if (g.host_process())
      return true;
  return may_host_gpus(cfg) || cfg.network().join_size() > 0 ||
         !cfg.network().certificate().empty();
}

namespace {

// Whether `cfg` already loads CAF module `T`: loaded twice, CAF would make
// two of it (a config made by system_config from a runtime config loads
// the middleman itself when it needs it; a caller may load it again).
template <class T> bool loads(const caf::actor_system_config& cfg) {
  caf::actor_system_config probe;
  probe.load<T>();
  auto& want = probe.module_factories.back().target_type();
  return std::any_of(
      cfg.module_factories.begin(), cfg.module_factories.end(),
      [&](const auto& f) { return f && f.target_type() == want; });
}

} // namespace

void load_network(caf::actor_system_config& cfg) {
  if (!loads<caf::io::middleman>(cfg))
    cfg.load<caf::io::middleman>();
  // Both ends send a heartbeat every 500 ms and drop a connection that was
  // silent for two seconds: a peer that hangs (a host stopped with
  // SIGSTOP) then goes down like one that died, within 2.5 s, well within
  // the kernel watchdog's 5 s, while a process starved of CPU for a second
  // (a loaded machine, a sanitizer build) is no loss. CAF 0.17 drops a
  // connection still in its handshake at the first tick of the heartbeat:
  // a tick every 100 ms cut TLS handshakes on a slow machine.
  cfg.set("middleman.heartbeat-interval",
          caf::timespan{std::chrono::milliseconds{500}});
  cfg.set("middleman.connection-timeout",
          caf::timespan{std::chrono::milliseconds{2000}});
}

void load_network(caf::actor_system_config& cfg, const network_settings& net) {
  load_network(cfg);
  if (!net.tls())
    return;
  // After the middleman: CAF's TLS module refuses to start without it.
  if (!loads<caf::openssl::manager>(cfg))
    cfg.load<caf::openssl::manager>();
  cfg.openssl_certificate = net.certificate;
  cfg.openssl_key = net.key;
  cfg.openssl_passphrase = net.passphrase;
  cfg.openssl_cafile = net.cafile;
  cfg.openssl_capath = net.capath;
}

} // namespace cohort
