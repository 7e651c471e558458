#include "tools/chaos_command.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>

#include <caf/all.hpp>

#include "chaos/harness.hpp"
#include "messages/errc.hpp"
#include "messages/system_config.hpp"

namespace cohort::tools {

namespace {

// Expands directories into their .textproto files, in name order.
caf::expected<std::vector<std::string>>
scenario_files(const std::vector<std::string>& args) {
  std::vector<std::string> out;
  for (auto& a : args) {
    std::error_code ec;
    if (std::filesystem::is_directory(a, ec)) {
      std::vector<std::string> inside;
      for (auto& e : std::filesystem::directory_iterator(a, ec))
        if (e.path().extension() == ".textproto")
          inside.push_back(e.path().string());
      std::sort(inside.begin(), inside.end());
      if (inside.empty())
        return make_error(errc::io_error,
                          a + ": no .textproto scenario files in it");
      out.insert(out.end(), inside.begin(), inside.end());
    } else {
      out.push_back(a);
    }
  }
  if (out.empty())
    return make_error(errc::invalid_arguments,
                      "chaos: name at least one scenario file or directory");
  return out;
}

} // namespace

int run_chaos(const chaos_options& opts, std::FILE* out) {
  auto files = scenario_files(opts.files);
  if (!files) {
    std::fprintf(stderr, "cohort: %s\n", describe(files.error()).c_str());
    return 2;
  }
  // Every file is read before anything runs: a typo fails fast.
  std::vector<pb::ChaosScenario> scenarios;
  for (auto& f : *files) {
    auto s = chaos::load_scenario(f);
    if (!s) {
      std::fprintf(stderr, "cohort: %s\n", describe(s.error()).c_str());
      return 2;
    }
    scenarios.push_back(std::move(*s));
  }
  pb::RuntimeConfig sched;
  *sched.mutable_scheduler() = opts.scheduler;
  system_config cfg{sched};
  // Scenarios with devices in host processes need CAF's middleman.
  if (std::any_of(scenarios.begin(), scenarios.end(),
                  [](auto& s) { return needs_network(s.runtime()); }))
    load_network(cfg);
  caf::actor_system sys{cfg};
  std::fprintf(out, "%-32s %6s %6s %5s %6s %4s %4s %5s %6s %4s %8s %8s %s\n",
               "scenario", "seed", "items", "ok", "failed", "lost", "dup",
               "wrong", "losses", "open", "rec p50", "rec p99", "verdict");
  std::vector<double> all_recovery;
  uint64_t items = 0, lost = 0, dup = 0, wrong = 0;
  int broken = 0;
  std::vector<std::string> notes;
  size_t runs = 0, planned = scenarios.size() * std::max(1u, opts.repeat);
  int stopped_by = 0;
  for (auto& s : scenarios) {
    for (uint32_t r = 0; r < std::max(1u, opts.repeat) && stopped_by == 0;
         ++r) {
      if (opts.stop_requested && (stopped_by = opts.stop_requested()) != 0)
        break;
      ++runs;
      chaos::run_options ro;
      ro.scale = opts.scale * (opts.soak ? 10.0 : 1.0);
      auto base = opts.seed != 0 ? opts.seed : s.seed();
      ro.seed = base + r;
      if (!opts.audit_dir.empty()) {
        ro.audit_path = (std::filesystem::path{opts.audit_dir} /
                         (s.name() + "-" + std::to_string(ro.seed) + ".log"))
                            .string();
        ro.keep_audit = true;
      }
      auto rep = chaos::run_scenario(sys, s, ro);
      if (!rep) {
        std::fprintf(stderr, "cohort: %s\n", describe(rep.error()).c_str());
        return 2;
      }
      auto& v = rep->check;
      items += v.items;
      lost += v.lost;
      dup += v.duplicated;
      wrong += v.wrong_results;
      all_recovery.insert(all_recovery.end(), v.recovery_ms.begin(),
                          v.recovery_ms.end());
      std::string p50 = "-", p99 = "-";
      if (!v.recovery_ms.empty()) {
        char b[32];
        std::snprintf(b, sizeof(b), "%.1f",
                      chaos::quantile(v.recovery_ms, 0.5));
        p50 = b;
        std::snprintf(b, sizeof(b), "%.1f",
                      chaos::quantile(v.recovery_ms, 0.99));
        p99 = b;
      }
      std::fprintf(out,
                   "%-32s %6llu %6llu %5llu %6llu %4llu %4llu %5llu %6u %4u "
                   "%8s %8s %s\n",
                   rep->name.c_str(), (unsigned long long)rep->seed,
                   (unsigned long long)v.items, (unsigned long long)v.completed,
                   (unsigned long long)v.failed, (unsigned long long)v.lost,
                   (unsigned long long)v.duplicated,
                   (unsigned long long)v.wrong_results, rep->losses,
                   rep->circuit_opens, p50.c_str(), p99.c_str(),
                   v.ok() ? "ok" : "BROKEN");
      if (!v.ok()) {
        ++broken;
        for (auto& why : v.violations)
          notes.push_back(rep->name + ": " + why);
      }
      if (v.audit_pruned > 0)
        notes.push_back(rep->name + ": " + std::to_string(v.audit_pruned) +
                        " items' admission records were in segments the "
                        "audit rotation deleted (keep_files)");
      if (v.absorbed_losses > 0)
        notes.push_back(rep->name + ": " + std::to_string(v.absorbed_losses) +
                        " losses absorbed by a recovery in progress");
      for (auto& why : rep->refused)
        notes.push_back(rep->name + ": refused by the runtime: " + why);
      for (auto& fb : rep->fallback_notes)
        notes.push_back(rep->name + ": " + fb);
      if (!rep->objects_note.empty())
        notes.push_back(rep->name + ": " + rep->objects_note);
      if (!opts.audit_dir.empty())
        notes.push_back(rep->name + ": audit log " + rep->audit_path);
      if (opts.verbose) {
        for (auto& tf : rep->timeline)
          notes.push_back(rep->name + ": at " + std::to_string(tf.at.count()) +
                          " ms " + chaos::describe(tf.f));
        for (auto& d : rep->device_notes)
          notes.push_back(rep->name + ": " + d);
      }
    }
  }
  for (auto& n : notes)
    std::fprintf(out, "  %s\n", n.c_str());
  std::fprintf(out,
               "%llu items: %llu lost, %llu duplicated, %llu wrong; recovery "
               "from a loss to its moved items ending: p50 %.1f ms, p99 %.1f "
               "ms over %zu losses (hangs timed from detection)\n",
               (unsigned long long)items, (unsigned long long)lost,
               (unsigned long long)dup, (unsigned long long)wrong,
               chaos::quantile(all_recovery, 0.5),
               chaos::quantile(all_recovery, 0.99), all_recovery.size());
  std::fprintf(out, "%s\n",
               broken == 0 ? "every invariant held"
                           : (std::to_string(broken) + " run(s) broke an "
                                                       "invariant")
                                 .c_str());
  if (stopped_by != 0) {
    std::fprintf(out,
                 "stopped (%s) after %zu of %zu runs; the others did not "
                 "run\n",
                 strsignal(stopped_by), runs, planned);
    return 1;
  }
  return broken == 0 ? 0 : 1;
}

} // namespace cohort::tools
