#include "messages/system_config.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <typeindex>
#include <vector>

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

namespace {

// Registers `T` as `name` and `std::vector<T>` as "std::vector<name>", as
// CAF's add_message_type<T> does, without the third type it adds,
// `caf::stream<T>`: Cohort sends no CAF streams. Each registered type
// instantiates its serializer, deserializer and printer; add_message_type
// made 102 of them for the 34 types here (and 28 more for the vectors also
// registered explicitly) where 68 are used, and they were half of this
// unit's compile time. The maps written are the ones
// actor_system_config::add_message_type_impl writes (CAF 0.17).
template <class T>
void register_one(caf::actor_system_config& cfg, std::string name) {
  cfg.type_names_by_rtti.emplace(std::type_index(typeid(T)), name);
  cfg.value_factories_by_name.emplace(std::move(name),
                                      &caf::make_type_erased_value<T>);
  cfg.value_factories_by_rtti.emplace(std::type_index(typeid(T)),
                                      &caf::make_type_erased_value<T>);
}

template <class T>
void add(caf::actor_system_config& cfg, const std::string& name) {
  register_one<std::vector<T>>(cfg, "std::vector<" + name + ">");
  register_one<T>(cfg, name);
}

} // namespace

void register_types(caf::actor_system_config& cfg) {
  add<work_item>(cfg, "cohort::work_item");
  add<work_result>(cfg, "cohort::work_result");
  add<work_end>(cfg, "cohort::work_end");
  add<work_done>(cfg, "cohort::work_done");
  add<run_request>(cfg, "cohort::run_request");
  add<host_buffer>(cfg, "cohort::host_buffer");
  add<object_info>(cfg, "cohort::object_info");
  add<share_grant>(cfg, "cohort::share_grant");
  add<share_peer>(cfg, "cohort::share_peer");
  add<share_handle>(cfg, "cohort::share_handle");
  add<attachment_info>(cfg, "cohort::attachment_info");
  add<device_info>(cfg, "cohort::device_info");
  add<audit_event>(cfg, "cohort::audit_event");
  add<audit_entry>(cfg, "cohort::audit_entry");
  add<audit_batch>(cfg, "cohort::audit_batch");
  add<audit_stats>(cfg, "cohort::audit_stats");
  add<device_stats>(cfg, "cohort::device_stats");
  add<balancer_stats>(cfg, "cohort::balancer_stats");
  add<fallback_stats>(cfg, "cohort::fallback_stats");
  add<latency_histogram>(cfg, "cohort::latency_histogram");
  add<alert>(cfg, "cohort::alert");
  add<quota_stats>(cfg, "cohort::quota_stats");
  add<memory_snapshot>(cfg, "cohort::memory_snapshot");
  add<quota_lease>(cfg, "cohort::quota_lease");
  add<quota_usage>(cfg, "cohort::quota_usage");
  add<headroom_report>(cfg, "cohort::headroom_report");
  add<allocation_plan>(cfg, "cohort::allocation_plan");
  add<simulation_report>(cfg, "cohort::simulation_report");
  add<host_hello>(cfg, "cohort::host_hello");
  add<sim_fault>(cfg, "cohort::sim_fault");
  add<kernel_code>(cfg, "cohort::kernel_code");
  add<item_view>(cfg, "cohort::item_view");
  add<item_filter>(cfg, "cohort::item_filter");
  add<trace_snapshot>(cfg, "cohort::trace_snapshot");
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
