#include "tools/health_command.hpp"

#include <algorithm>
#include <cctype>
#include <cinttypes>
#include <cstdio>

#include "tools/admin_client.hpp"
#include "tools/admin_command.hpp"
#include "tools/appendf.hpp"
#include "tools/byte_units.hpp"

namespace cohort::tools {

namespace {

std::string temperature_text(int32_t c) {
  return c < 0 ? std::string{"-"} : std::to_string(c) + " C";
}

std::string power_text(double w) {
  if (w < 0)
    return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f W", w);
  return buf;
}

// "42%", or "n/a" where the library reports no utilization (MIG).
std::string busy_text(const pb::HealthSample& s) {
  return s.utilization_unknown() ? std::string{"n/a"}
                                 : std::to_string(s.gpu_util_percent()) + "%";
}

// The least and most of `values`, and a line of their trend.
void add_trend(std::string& out, const char* what,
               const std::vector<double>& values, const char* unit,
               const char* fmt_value) {
  if (values.empty())
    return;
  auto [lo, hi] = std::minmax_element(values.begin(), values.end());
  char range[64];
  char lo_text[24], hi_text[24];
  std::snprintf(lo_text, sizeof lo_text, fmt_value, *lo);
  std::snprintf(hi_text, sizeof hi_text, fmt_value, *hi);
  std::snprintf(range, sizeof range, "%s to %s %s", lo_text, hi_text, unit);
  appendf(out, "%-12s%-24s %s\n", what, range, sparkline(values, 60).c_str());
}

} // namespace

std::string sparkline(const std::vector<double>& values, size_t width) {
  static const char* blocks[] = {"\u2581", "\u2582", "\u2583", "\u2584",
                                 "\u2585", "\u2586", "\u2587", "\u2588"};
  if (values.empty() || width == 0)
    return {};
  auto [lo, hi] = std::minmax_element(values.begin(), values.end());
  auto buckets = std::min(width, values.size());
  std::string out;
  for (size_t b = 0; b < buckets; ++b) {
    // Each bucket shows its most (a short peak stays visible).
    auto from = b * values.size() / buckets;
    auto to = std::max(from + 1, (b + 1) * values.size() / buckets);
    auto most = *std::max_element(values.begin() + std::ptrdiff_t(from),
                                  values.begin() + std::ptrdiff_t(to));
    size_t level = *hi > *lo ? size_t((most - *lo) / (*hi - *lo) * 7 + 0.5) : 0;
    out += blocks[std::min<size_t>(level, 7)];
  }
  return out;
}

std::string health_report(const pb::DeviceHealth& h, int samples) {
  std::string out;
  appendf(out, "device      %s (%s%s)\n", h.device().c_str(), h.kind().c_str(),
          h.simulated() ? ", simulated" : "");
  appendf(out,
          "status      %s, circuit %s (opened %u times), %u losses, %u "
          "restarts\n",
          h.status().c_str(), h.circuit().c_str(), h.circuit_opens(),
          h.losses(), h.restarts());
  if (h.source().empty()) {
    appendf(out, "counters    none: %s\n", h.unavailable_reason().c_str());
  } else {
    char every[32];
    if (h.interval_ms() < 1000)
      std::snprintf(every, sizeof every, "%u ms", h.interval_ms());
    else
      std::snprintf(every, sizeof every, "%.1f s", h.interval_ms() / 1000.0);
    appendf(out, "counters    %s, every %s, %d samples kept\n",
            h.source().c_str(), every, h.samples_size());
    if (h.has_now()) {
      auto& n = h.now();
      std::string power = power_text(n.power_w());
      if (n.power_limit_w() > 0)
        power += " of " + power_text(n.power_limit_w());
      appendf(out, "latest      %s, %s, %s busy",
              temperature_text(n.temperature_c()).c_str(), power.c_str(),
              busy_text(n).c_str());
      if (n.memory_total_bytes() > 0)
        appendf(out, ", memory %s of %s",
                human_bytes(n.memory_used_bytes()).c_str(),
                human_bytes(n.memory_total_bytes()).c_str());
      if (!n.time().empty())
        appendf(out, " (%s)", n.time().c_str());
      appendf(out, "\n");
      appendf(out,
              "ECC         %" PRIu64 " corrected, %" PRIu64 " uncorrected\n",
              n.ecc_corrected(), n.ecc_uncorrected());
    }
  }
  if (h.xid_errors() == 0) {
    appendf(out, "Xids        none\n");
  } else {
    appendf(out, "Xids        %" PRIu64 ", the last %u\n", h.xid_errors(),
            h.last_xid());
    // The newest few, newest last.
    int from = std::max(0, h.xids_size() - 5);
    for (int i = from; i < h.xids_size(); ++i)
      appendf(out, "            %s  Xid %u\n", h.xids(i).time().c_str(),
              h.xids(i).xid());
  }
  if (h.samples_size() == 0)
    return out;
  std::vector<double> temps, power, busy;
  for (auto& s : h.samples()) {
    if (s.temperature_c() >= 0)
      temps.push_back(s.temperature_c());
    if (s.power_w() >= 0)
      power.push_back(s.power_w());
    if (!s.utilization_unknown())
      busy.push_back(s.gpu_util_percent());
  }
  auto span_s = double(h.samples(h.samples_size() - 1).time_ns() -
                       h.samples(0).time_ns()) /
                1e9;
  appendf(out, "\nover the last %.0f s (%d samples):\n", span_s,
          h.samples_size());
  add_trend(out, "temperature", temps, "C", "%.0f");
  add_trend(out, "power", power, "W", "%.1f");
  add_trend(out, "busy", busy, "%", "%.0f");
  appendf(out, "\n%-24s %6s %9s %5s  %s\n", "TIME", "TEMP", "POWER", "BUSY",
          "MEMORY");
  int from = std::max(0, h.samples_size() - samples);
  for (int i = from; i < h.samples_size(); ++i) {
    auto& s = h.samples(i);
    auto memory = s.memory_total_bytes() > 0
                      ? human_bytes(s.memory_used_bytes()) + " of " +
                            human_bytes(s.memory_total_bytes())
                      : std::string{"-"};
    appendf(out, "%-24s %6s %9s %5s  %s\n", s.time().c_str(),
            temperature_text(s.temperature_c()).c_str(),
            power_text(s.power_w()).c_str(), busy_text(s).c_str(),
            memory.c_str());
  }
  return out;
}

int cmd_health(const health_cli& c) {
  auto url = node_url(c.url);
  // The name goes in the path as it is: nothing that would end or change
  // the path's segment.
  bool name_ok = !c.device.empty();
  for (char ch : c.device)
    name_ok &= std::isgraph(static_cast<unsigned char>(ch)) && ch != '/' &&
               ch != '?' && ch != '#' && ch != '%';
  if (!name_ok) {
    std::fprintf(stderr,
                 "cohort health: '%s' is not a device name (see `cohort "
                 "devices`)\n",
                 c.device.c_str());
    return exit_bad_input;
  }
  auto body = admin_body("cohort health", url, "GET",
                         "/v1/devices/" + c.device + "/health");
  if (!body)
    return exit_failed;
  if (c.json) {
    std::fputs(body->c_str(), stdout);
    return exit_ok;
  }
  pb::DeviceHealth h;
  if (!parse_answer(*body, h)) {
    std::fprintf(stderr,
                 "cohort health: %s answered something that is not a "
                 "device's health\n",
                 url.c_str());
    return exit_failed;
  }
  std::fputs(health_report(h, c.samples).c_str(), stdout);
  return exit_ok;
}

} // namespace cohort::tools
