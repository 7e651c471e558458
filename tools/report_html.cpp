#include "tools/report_html.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <type_traits>

#include "messages/convert.hpp"
#include "messages/json.hpp"
#include "tools/byte_units.hpp"
#include "tools/pipeline.hpp"

namespace cohort::tools {

void run_timeline::set_devices(const std::vector<device_info>& devices) {
  devices_ = devices;
  t_s_.clear();
  busy_ns_.assign(devices.size(), {});
  queued_.assign(devices.size(), {});
}

void run_timeline::grow(const std::vector<device_info>& devices) {
  for (size_t d = devices_.size(); d < devices.size(); ++d) {
    busy_ns_.emplace_back(t_s_.size(), 0);
    queued_.emplace_back(t_s_.size(), 0);
    devices_.push_back(devices[d]);
  }
}

void run_timeline::add(double t_s, const balancer_stats& st) {
  if (st.devices.size() < devices_.size())
    return;
  t_s_.push_back(t_s);
  for (size_t d = 0; d < devices_.size(); ++d) {
    busy_ns_[d].push_back(st.devices[d].busy_ns);
    queued_[d].push_back(st.devices[d].queued);
  }
  if (t_s_.size() > max_samples)
    thin();
}

// Keeps every other sample and the last: busy times are running totals, so
// the intervals between those kept still add up.
void run_timeline::thin() {
  auto keep = [](auto& v) {
    size_t n = 0;
    for (size_t i = 0; i < v.size(); i += 2)
      v[n++] = v[i];
    if ((v.size() - 1) % 2 != 0)
      v[n++] = v.back();
    v.resize(n);
  };
  keep(t_s_);
  for (auto& b : busy_ns_)
    keep(b);
  for (auto& q : queued_)
    keep(q);
}

std::vector<std::string> run_timeline::names() const {
  std::vector<std::string> out;
  for (auto& d : devices_)
    out.push_back(d.name + (d.simulated ? " (simulated)" : ""));
  return out;
}

std::vector<std::vector<double>> run_timeline::utilization() const {
  std::vector<std::vector<double>> out(devices_.size());
  for (size_t d = 0; d < devices_.size(); ++d) {
    double streams = std::max(1u, devices_[d].streams);
    for (size_t i = 0; i < t_s_.size(); ++i) {
      double span = i == 0 ? t_s_[0] : t_s_[i] - t_s_[i - 1];
      double busy = double(busy_ns_[d][i] - (i == 0 ? 0 : busy_ns_[d][i - 1]));
      out[d].push_back(
          span > 0 ? std::clamp(busy / (span * 1e9 * streams), 0.0, 1.0) : 0.0);
    }
  }
  return out;
}

namespace {

std::string html(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
    case '&':
      out += "&amp;";
      break;
    case '<':
      out += "&lt;";
      break;
    case '>':
      out += "&gt;";
      break;
    case '"':
      out += "&quot;";
      break;
    default:
      out += c;
    }
  }
  return out;
}

std::string num(double x, const char* fmt = "%.3g") {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, x);
  return buf;
}

std::string row(std::initializer_list<std::string> cells, bool head = false) {
  std::string out = "<tr>";
  for (auto& c : cells)
    out += (head ? "<th>" : "<td>") + c + (head ? "</th>" : "</td>");
  return out + "</tr>\n";
}

template <class T> std::string json_array(const std::vector<T>& xs) {
  std::string out = "[";
  for (size_t i = 0; i < xs.size(); ++i) {
    if (i > 0)
      out += ",";
    if constexpr (std::is_same_v<T, std::string>)
      out += json_string(xs[i]);
    else if constexpr (std::is_integral_v<T>)
      out += std::to_string(xs[i]);
    else
      out += num(double(xs[i]), "%.6g");
  }
  return out + "]";
}

// The plots' data: the timeline and the latency histogram of every item,
// all kernels and devices together.
std::string plot_data(const pipeline_report& r) {
  auto& tl = r.timeline;
  std::string out = "{\"t\":" + json_array(tl.times()) + ",\"devices\":[";
  auto names = tl.names();
  auto util = tl.utilization();
  for (size_t d = 0; d < names.size(); ++d) {
    std::vector<double> percent;
    for (auto u : util[d])
      percent.push_back(100 * u);
    out += std::string{d == 0 ? "" : ","} +
           "{\"name\":" + json_string(names[d]) +
           ",\"util\":" + json_array(percent) +
           ",\"queued\":" + json_array(tl.queued()[d]) + "}";
  }
  std::vector<uint64_t> buckets(latency_bounds_s.size() + 1, 0);
  for (auto& h : r.placement.latency)
    for (size_t i = 0; i < h.buckets.size() && i < buckets.size(); ++i)
      buckets[i] += h.buckets[i];
  std::vector<std::string> labels;
  for (auto b : latency_bounds_s)
    labels.push_back(b < 1e-3 ? "\u2264" + num(b * 1e6, "%.0f") + " \u00b5s"
                     : b < 1  ? "\u2264" + num(b * 1e3, "%g") + " ms"
                              : "\u2264" + num(b, "%g") + " s");
  labels.push_back(">" + num(latency_bounds_s.back(), "%g") + " s");
  out += "],\"latency\":{\"labels\":" + json_array(labels) +
         ",\"counts\":" + json_array(buckets) + "}}";
  // Inside a script element, "</" would end it.
  for (size_t at = 0; (at = out.find("</", at)) != std::string::npos; at += 3)
    out.replace(at, 2, "<\\/");
  return out;
}

// Draws the three plots from the data into SVG; marks the body with how
// many it drew (data-drawn), or with the error that stopped it.
constexpr const char* plot_script = R"JS(
(function () {
  var NS = 'http://www.w3.org/2000/svg';
  var colors = ['#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd',
                '#8c564b', '#e377c2', '#7f7f7f', '#bcbd22', '#17becf'];
  function el(name, attrs, parent) {
    var e = document.createElementNS(NS, name);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }
  function label(parent, x, y, s, anchor) {
    var t = el('text', {x: x, y: y, 'text-anchor': anchor || 'start',
                        'font-size': 11}, parent);
    t.textContent = s;
    return t;
  }
  function fmt(v) {
    return Math.abs(v) >= 100 || v === Math.round(v) ? String(Math.round(v))
                                                     : v.toPrecision(2);
  }
  function frame(id, xmax, ymax, xunit, yunit, legend) {
    var W = 760, H = 260, L = 56, R = legend ? 190 : 16, T = 12, B = 34;
    var svg = el('svg', {width: W, height: H, viewBox: '0 0 ' + W + ' ' + H,
                         'class': 'chart'}, document.getElementById(id));
    var f = {svg: svg, W: W, H: H, L: L, R: R, T: T, B: B,
             x: function (v) { return L + (W - L - R) * v / xmax; },
             y: function (v) { return H - B - (H - T - B) * v / ymax; }};
    for (var i = 0; i <= 4; i++) {
      var v = ymax * i / 4;
      el('line', {x1: L, y1: f.y(v), x2: W - R, y2: f.y(v),
                  stroke: i ? '#e5e5e5' : '#444'}, svg);
      label(svg, L - 6, f.y(v) + 4, fmt(v) + yunit, 'end');
      if (xunit !== null)
        label(svg, f.x(xmax * i / 4), H - B + 16, fmt(xmax * i / 4) + xunit,
              'middle');
    }
    el('line', {x1: L, y1: T, x2: L, y2: H - B, stroke: '#444'}, svg);
    return f;
  }
  function lines(id, t, devices, key, ymax, yunit) {
    var xmax = t.length ? t[t.length - 1] : 1;
    if (!(xmax > 0)) xmax = 1;
    var f = frame(id, xmax, ymax, ' s', yunit, true);
    devices.forEach(function (d, k) {
      var c = colors[k % colors.length], path = '';
      d[key].forEach(function (v, i) {
        path += (i ? 'L' : 'M') + f.x(t[i]).toFixed(1) + ',' +
                f.y(Math.min(v, ymax)).toFixed(1);
      });
      el('path', {d: path || 'M0,0', fill: 'none', stroke: c,
                  'stroke-width': 1.5, 'class': 'series',
                  'data-device': d.name}, f.svg);
      var ly = f.T + 4 + k * 16;
      el('rect', {x: f.W - f.R + 12, y: ly, width: 10, height: 10, fill: c},
         f.svg);
      label(f.svg, f.W - f.R + 28, ly + 9, d.name);
    });
  }
  function bars(id, labels, counts) {
    var ymax = Math.max.apply(null, counts.concat([1]));
    var f = frame(id, labels.length, ymax, null, '', false);
    var w = (f.W - f.L - f.R) / labels.length;
    counts.forEach(function (n, i) {
      el('rect', {x: f.x(i) + 2, y: f.y(n), width: w - 4,
                  height: f.y(0) - f.y(n), fill: colors[0], 'class': 'bar',
                  'data-count': n}, f.svg);
      label(f.svg, f.x(i) + w / 2, f.H - f.B + 14, labels[i], 'middle')
          .setAttribute('font-size', 9);
      if (n > 0) label(f.svg, f.x(i) + w / 2, f.y(n) - 3, String(n), 'middle');
    });
  }
  try {
    var data = JSON.parse(document.getElementById('data').textContent);
    var qmax = 4;
    data.devices.forEach(function (d) {
      d.queued.forEach(function (q) { qmax = Math.max(qmax, q); });
    });
    qmax = Math.ceil(qmax / 4) * 4;  // whole items at every tick
    lines('utilization', data.t, data.devices, 'util', 100, '%');
    lines('queue', data.t, data.devices, 'queued', qmax, '');
    bars('latency', data.latency.labels, data.latency.counts);
    document.body.setAttribute('data-drawn', '3');
  } catch (e) {
    document.body.setAttribute('data-error', String(e));
  }
})();
)JS";

constexpr const char* style = R"CSS(
body { font-family: sans-serif; margin: 2em; color: #222; max-width: 1000px; }
h1 { font-size: 1.4em; } h2 { font-size: 1.1em; margin-top: 1.6em; }
table { border-collapse: collapse; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: right; }
th { background: #f3f3f3; } td:first-child, th:first-child { text-align: left; }
.ok { color: #1a7f37; font-weight: bold; } .bad { color: #c62828; font-weight: bold; }
.note { color: #666; font-size: 0.85em; }
)CSS";

} // namespace

std::string report_html(const pipeline_report& r) {
  auto u = [](uint64_t x) { return std::to_string(x); };
  std::string out;
  out += "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">";
  out += "<title>cohort run: " + html(r.name) + "</title><style>" + style +
         "</style></head>\n<body data-drawn=\"0\">\n";
  out += "<h1>cohort run: " + html(r.name) + "</h1>\n";
  out += r.ok() ? "<p class=\"ok\">OK: every item ended exactly once</p>\n"
                : "<p class=\"bad\">FAILED: see below</p>\n";
  out += "<table>\n" + row({"items", "completed", "failed", "rejected", "lost",
                            "duplicated", "not run", "seconds", "items/s"},
                           true);
  out += row({u(r.items), u(r.completed), u(r.failed), u(r.rejected), u(r.lost),
              u(r.duplicates), u(r.skipped), num(r.seconds, "%.3f"),
              num(r.seconds > 0 ? double(r.items) / r.seconds : 0, "%.0f")});
  out += "</table>\n<h2>Devices</h2>\n<table>\n" +
         row({"device", "kind", "status", "items", "share", "busy ms",
              "utilization", "peak queue", "losses", "restarts"},
             true);
  uint64_t total = 0;
  for (auto& d : r.placement.devices)
    total += d.completed;
  for (auto& d : r.placement.devices)
    out += row(
        {html(d.name), html(d.kind) + (d.simulated ? " (simulated)" : ""),
         to_string(d.status), u(d.completed),
         num(total ? 100.0 * double(d.completed) / double(total) : 0, "%.1f%%"),
         num(double(d.busy_ns) / 1e6, "%.1f"),
         num(100 * d.utilization, "%.0f%%"), u(d.max_queued), u(d.losses),
         u(d.restarts)});
  out += "</table>\n";
  out += "<h2>Utilization over time</h2>\n<p class=\"note\">The share of "
         "each device's streams' time spent on the launches that ended in "
         "each interval (a launch counts when it ends; simulated devices' "
         "times are modeled).</p>\n<div id=\"utilization\"></div>\n";
  out += "<h2>Queue depth over time</h2>\n<p class=\"note\">Items placed on "
         "each device and not ended yet.</p>\n<div id=\"queue\"></div>\n";
  out += "<h2>Latency</h2>\n<p class=\"note\">Items that completed, by time "
         "from admission to result.</p>\n<div id=\"latency\"></div>\n";
  if (!r.placement.latency.empty()) {
    out += "<table>\n" + row({"kernel", "device", "items", "mean ms"}, true);
    for (auto& h : r.placement.latency)
      out += row({html(h.kernel), html(h.device), u(h.count),
                  num(h.count ? 1e3 * h.sum_s / double(h.count) : 0, "%.3f")});
    out += "</table>\n";
  }
  if (!r.memory.empty()) {
    out += "<h2>Device memory</h2>\n<table>\n" +
           row({"device", "capacity", "peak used", "pool held", "allocations",
                "leaks"},
               true);
    for (auto& m : r.memory)
      out += row({html(m.device), html(human_bytes(m.capacity)),
                  html(human_bytes(m.peak_used)),
                  html(human_bytes(m.peak_held)), u(m.allocations),
                  m.live_allocations == 0
                      ? std::string{"none"}
                      : "<span class=\"bad\">" + u(m.live_allocations) +
                            " leaked</span>"});
    out += "</table>\n";
  }
  out += "<h2>Checks</h2>\n<ul>\n";
  out += "<li>CPU fallbacks: " + u(r.placement.fallbacks) + " (retries " +
         u(r.placement.retries) + ")</li>\n";
  out += "<li>audit chain: " +
         html(r.audit.ok ? "verified, " + u(r.audit.good_records) +
                               " records in " + r.audit_path
                         : "NOT verified (" + r.audit.reason +
                               r.audit_unwritten + ")") +
         "</li>\n";
  out += "<li>results: " + u(r.completed - r.mismatches) + " of " +
         u(r.completed) + " match the CPU reference</li>\n";
  for (auto& x : r.xids)
    out += "<li>Xid errors on " + html(x.device) + ": " + u(x.errors) +
           " (the last " + std::to_string(x.last) + ")</li>\n";
  for (auto& f : r.faults)
    out += "<li>fault injected: " + html(f) + "</li>\n";
  for (auto& o : r.outputs_written)
    out += "<li>output written: " + html(o) + "</li>\n";
  for (auto& o : r.outputs_not_written)
    out += "<li class=\"bad\">output NOT written: " + html(o) + "</li>\n";
  if (!r.trace_path.empty() && r.trace_error.empty())
    out += "<li>trace: " + html(r.trace_path) + " (" + u(r.trace_events) +
           " events)</li>\n";
  for (auto& e : r.errors)
    out += "<li class=\"bad\">error: " + html(e) + "</li>\n";
  out += "</ul>\n<p class=\"note\">" + u(r.timeline.size()) +
         " samples of the balancer's counters.</p>\n";
  out += "<script type=\"application/json\" id=\"data\">" + plot_data(r) +
         "</script>\n<script>" + plot_script + "</script>\n";
  out += "<noscript>The plots are drawn by the page's script.</noscript>\n";
  out += "</body></html>\n";
  return out;
}

} // namespace cohort::tools
