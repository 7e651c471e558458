#include "tools/watch_command.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <map>
#include <thread>

#include "tools/admin_client.hpp"
#include "tools/admin_command.hpp"
#include "tools/appendf.hpp"
#include "tools/byte_units.hpp"

namespace cohort::tools {

namespace {

std::atomic<bool> interrupted{false};

extern "C" void on_interrupt(int) {
  interrupted = true;
}

// Gets `path` into `out`; false (with `why` set) when it could not.
template <class Message>
bool fetch(const std::string& url, const std::string& path, Message& out,
           std::string& why) {
  auto a = admin_call(url, "GET", path, {}, {}, 10);
  if (a.status == 0) {
    why = "cannot reach " + url + ": " + a.unreachable;
    return false;
  }
  if (!a.ok()) {
    why = "GET " + path + ": HTTP " + std::to_string(a.status);
    return false;
  }
  if (!parse_answer(a.body, out)) {
    why = url + " answered GET " + path +
          " with something that is not the admin API's";
    return false;
  }
  return true;
}

std::string wall_text(std::chrono::system_clock::time_point t) {
  auto secs = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  ::gmtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

std::string duration_text(double s) {
  char buf[32];
  if (s < 0)
    s = 0;
  if (s < 120)
    std::snprintf(buf, sizeof buf, "%.0fs", s);
  else if (s < 7200)
    std::snprintf(buf, sizeof buf, "%.0fm", s / 60);
  else
    std::snprintf(buf, sizeof buf, "%.1fh", s / 3600);
  return buf;
}

// "+12.5/s" from two counts `dt` seconds apart, "" without a previous look.
std::string rate_text(uint64_t now, uint64_t before, double dt, bool have) {
  if (!have || dt <= 0 || now < before)
    return "";
  char buf[32];
  std::snprintf(buf, sizeof buf, " (+%.1f/s)", double(now - before) / dt);
  return buf;
}

const pb::DeviceView* find_device(const pb::DeviceList& list,
                                  const std::string& name) {
  for (auto& d : list.devices())
    if (d.name() == name)
      return &d;
  return nullptr;
}

} // namespace

watch_snapshot watch_look(const std::string& url) {
  watch_snapshot s;
  s.at = std::chrono::steady_clock::now();
  s.wall = std::chrono::system_clock::now();
  if (fetch(url, "/v1/stats", s.stats, s.error) &&
      fetch(url, "/v1/devices", s.devices, s.error))
    fetch(url, "/v1/tenants", s.tenants, s.error);
  return s;
}

std::string watch_frame(const std::string& url, const watch_snapshot& now,
                        const watch_snapshot* before, double interval_s) {
  std::string out;
  appendf(out, "cohort watch  %s  %s  every %.1fs\n", url.c_str(),
          wall_text(now.wall).c_str(), interval_s);
  if (!now.error.empty()) {
    appendf(out, "\n  %s\n  (looking again every %.1fs)\n", now.error.c_str(),
            interval_s);
    return out;
  }
  bool have = before != nullptr && before->error.empty();
  double dt =
      have ? std::chrono::duration<double>(now.at - before->at).count() : 0;
  auto& s = now.stats;
  appendf(
      out,
      "items: %" PRIu64 " admitted%s, %" PRIu64 " completed%s, %" PRIu64
      " failed, %" PRIu64 " rejected, %" PRIu64 " in flight, %" PRIu64
      " retries, %" PRIu64 " fallbacks\n",
      s.admitted(),
      rate_text(s.admitted(), have ? before->stats.admitted() : 0, dt, have)
          .c_str(),
      s.completed(),
      rate_text(s.completed(), have ? before->stats.completed() : 0, dt, have)
          .c_str(),
      s.failed(), s.rejected(), s.outstanding(), s.retries(), s.fallbacks());

  appendf(out, "\n%-12s %-6s %-13s %-10s %-9s %7s %9s %5s  %-21s %5s\n",
          "DEVICE", "KIND", "WHERE", "STATUS", "CIRCUIT", "QUEUED", "DONE/S",
          "BUSY", "MEMORY USED", "XIDS");
  for (auto& d : now.devices.devices()) {
    std::string done_rate = "-";
    std::string busy = "-";
    if (have) {
      if (auto* b = find_device(before->devices, d.name());
          b != nullptr && dt > 0) {
        char buf[32];
        if (d.completed() >= b->completed()) {
          std::snprintf(buf, sizeof buf, "%.1f",
                        double(d.completed() - b->completed()) / dt);
          done_rate = buf;
        }
        // Device time over wall time, over its streams.
        auto used = std::max(0.0, d.busy_seconds() - b->busy_seconds()) /
                    (dt * std::max(1u, d.streams()));
        std::snprintf(buf, sizeof buf, "%.0f%%", std::min(100.0, 100 * used));
        busy = buf;
      }
    }
    auto limit = d.memory_limit_bytes() != 0 ? d.memory_limit_bytes()
                                             : d.memory_capacity_bytes();
    auto memory =
        human_bytes(d.memory_used_bytes()) + " / " + human_bytes(limit);
    std::string xids = std::to_string(d.xid_errors());
    if (d.xid_errors() > 0)
      xids += " (" + std::to_string(d.last_xid()) + ")";
    appendf(out,
            "%-12s %-6s %-13s %-10s %-9s %7" PRIu64 " %9s %5s  %-21s %5s\n",
            d.name().c_str(), d.kind().c_str(), d.location().c_str(),
            d.status().c_str(), d.circuit().c_str(), d.queued(),
            done_rate.c_str(), busy.c_str(), memory.c_str(), xids.c_str());
  }

  appendf(out, "\n%-16s %10s %8s  %-21s %9s\n", "TENANT", "IN FLIGHT",
          "WAITING", "MEMORY", "FALLBACKS");
  for (auto& t : now.tenants.tenants()) {
    auto inflight = std::to_string(t.inflight()) + "/" +
                    (t.max_inflight() != 0 ? std::to_string(t.max_inflight())
                                           : std::string{"-"});
    auto memory = human_bytes(t.memory_bytes()) +
                  (t.memory_quota_bytes() != 0
                       ? " / " + human_bytes(t.memory_quota_bytes())
                       : std::string{});
    appendf(out, "%-16s %10s %8" PRIu64 "  %-21s %9" PRIu64 "\n",
            t.tenant().c_str(), inflight.c_str(), t.waiting(), memory.c_str(),
            t.fallbacks());
  }

  if (s.alerts_size() == 0) {
    appendf(out, "\nALERTS: none firing\n");
  } else {
    appendf(out, "\nALERTS (%d firing)\n", s.alerts_size());
    auto wall_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                       now.wall.time_since_epoch())
                       .count();
    for (auto& a : s.alerts())
      appendf(out, "%-9s %-24s %-12s for %-6s %s\n", a.severity().c_str(),
              a.name().c_str(), a.subject().c_str(),
              duration_text(double(wall_ns - a.since_ns()) / 1e9).c_str(),
              a.detail().c_str());
  }
  return out;
}

int cmd_watch(const watch_cli& c) {
  auto url = node_url(c.url);
  int frames = c.once ? 1 : c.count;
  bool redraw = c.clear && frames != 1 && ::isatty(STDOUT_FILENO) == 1;
  interrupted = false;
  auto old_int = std::signal(SIGINT, on_interrupt);
  auto old_term = std::signal(SIGTERM, on_interrupt);
  watch_snapshot before;
  bool have_before = false;
  bool reached = false;
  auto period = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(c.interval_s));
  for (int shown = 0; !interrupted && (frames == 0 || shown < frames);
       ++shown) {
    auto now = watch_look(url);
    reached = now.error.empty();
    auto frame =
        watch_frame(url, now, have_before ? &before : nullptr, c.interval_s);
    if (redraw)
      std::fputs("\x1b[H\x1b[J", stdout);
    else if (shown > 0)
      std::fputs("\n", stdout);
    std::fputs(frame.c_str(), stdout);
    std::fflush(stdout);
    before = std::move(now);
    have_before = true;
    if (frames != 0 && shown + 1 >= frames)
      break;
    // Sleeps in short steps, so that Ctrl-C ends it at once.
    auto until = before.at + period;
    while (!interrupted && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(
          until - std::chrono::steady_clock::now(),
          std::chrono::milliseconds(50)));
  }
  std::signal(SIGINT, old_int);
  std::signal(SIGTERM, old_term);
  return reached ? exit_ok : exit_failed;
}

} // namespace cohort::tools
