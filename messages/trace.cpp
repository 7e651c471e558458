#include "messages/trace.hpp"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <ctime>
#include <map>
#include <utility>

#include "kernels/catalog.hpp"
#include "messages/json.hpp"

namespace cohort {

namespace {

// The trace's clock: nanoseconds since it started, never before.
int64_t since(const trace_snapshot& x, int64_t ns) {
  return std::max<int64_t>(0, ns - x.started_ns);
}

// `ns` as the format's microseconds, exactly (a launch's parts add up to
// it to the nanosecond, as a viewer's nesting needs).
std::string us(int64_t ns) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%" PRId64 ".%03" PRId64, ns / 1000,
                ns % 1000);
  return buf;
}

std::string kind_words(const trace_device& d) {
  if (d.simulated)
    return "simulated GPU";
  if (d.kind == "cpu")
    return "CPU worker";
  if (d.kind == "cuda")
    return "CUDA GPU";
  if (d.kind == "hip")
    return "HIP GPU";
  return d.kind;
}

// The words of a device event before its first colon: its name on the
// timeline (the whole text goes in its args).
std::string headline(const std::string& text) {
  auto end = std::min(text.find(':'), size_t{48});
  return text.substr(0, end);
}

class writer {
public:
  explicit writer(const trace_snapshot& x) : x_(x) {
    out_.reserve(256 + x.events.size() * 160);
  }

  std::string finish() && {
    header();
    for (size_t i = 0; i < x_.events.size(); ++i)
      event(i, x_.events[i]);
    out_ += "\n]}\n";
    return std::move(out_);
  }

private:
  // Process 1 is the node; device d is process d + 2, its stream s thread
  // s + 1 (thread 0 holds its events).
  static int pid_of(int32_t device) { return device < 0 ? 1 : device + 2; }

  void printf_(const char* fmt, auto... xs) {
    char buf[256];
    auto n = std::snprintf(buf, sizeof buf, fmt, xs...);
    out_.append(buf, size_t(std::min<int>(n, int(sizeof buf) - 1)));
  }

  void next() {
    out_ += first_ ? "\n" : ",\n";
    first_ = false;
  }

  void name_process(int pid, const std::string& name, int order) {
    next();
    printf_("{\"ph\":\"M\",\"pid\":%d,\"name\":\"process_name\",\"args\":"
            "{\"name\":",
            pid);
    out_ += json_string(name) + "}}";
    next();
    printf_("{\"ph\":\"M\",\"pid\":%d,\"name\":\"process_sort_index\","
            "\"args\":{\"sort_index\":%d}}",
            pid, order);
  }

  void name_thread(int pid, int tid, const std::string& name) {
    next();
    printf_("{\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"name\":\"thread_name\","
            "\"args\":{\"name\":",
            pid, tid);
    out_ += json_string(name) + "}}";
  }

  void header() {
    char when[64] = "";
    std::time_t secs = std::time_t(x_.started_wall_ns / 1000000000);
    std::tm tm{};
    if (gmtime_r(&secs, &tm) != nullptr)
      std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    printf_("{\"displayTimeUnit\":\"ms\",\"otherData\":{\"producer\":"
            "\"cohort\",\"started\":\"%s\",\"started_wall_ns\":%" PRId64
            ",\"seconds\":%.6f,\"events\":%zu,\"dropped\":%" PRIu64
            ",\"max_events\":%" PRIu64 ",\"recording\":%s},\n"
            "\"traceEvents\":[",
            when, x_.started_wall_ns, double(x_.taken_ns - x_.started_ns) / 1e9,
            x_.events.size(), x_.dropped, x_.max_events,
            x_.recording ? "true" : "false");
    name_process(1, "node: admission and ends", 0);
    name_thread(1, 0, "items");
    for (size_t d = 0; d < x_.devices.size(); ++d) {
      auto& dev = x_.devices[d];
      auto pid = pid_of(int32_t(d));
      name_process(pid,
                   dev.name + " (" + kind_words(dev) +
                       (dev.where.empty() ? "" : ", " + dev.where) + ")",
                   int(d) + 1);
      name_thread(pid, 0, "events");
      for (uint32_t s = 0; s < std::max(1u, dev.streams); ++s)
        name_thread(pid, int(s) + 1, "stream " + std::to_string(s));
    }
    if (x_.dropped > 0) {
      next();
      printf_("{\"ph\":\"i\",\"s\":\"g\",\"pid\":1,\"tid\":0,\"ts\":%s,"
              "\"name\":\"trace full: %" PRIu64 " events not kept\"}",
              us(since(x_, x_.taken_ns)).c_str(), x_.dropped);
    }
  }

  std::string tenant(int32_t t) const {
    return t >= 0 && size_t(t) < x_.tenants.size() ? x_.tenants[size_t(t)]
                                                   : std::string{};
  }

  std::string text(const trace_event& e) const {
    return e.text < x_.texts.size() ? x_.texts[e.text] : std::string{};
  }

  // A part of launch `e` (its copies, its kernels) inside its slice;
  // none when empty.
  void part(const trace_event& e, int pid, const char* name, int64_t begin,
            int64_t end) {
    if (end <= begin)
      return;
    next();
    printf_("{\"ph\":\"X\",\"cat\":\"launch\",\"pid\":%d,\"tid\":%u,"
            "\"ts\":%s,\"dur\":%s,\"name\":\"%s\",\"args\":{\"job\":%" PRIu64
            "}}",
            pid, e.stream + 1, us(since(x_, begin)).c_str(),
            us(since(x_, end) - since(x_, begin)).c_str(), name, e.job);
  }

  void common_args(const trace_event& e) {
    printf_("\"args\":{\"job\":%" PRIu64, e.job);
    if (auto t = tenant(e.tenant); !t.empty())
      out_ += ",\"tenant\":" + json_string(t);
  }

  void event(size_t index, const trace_event& e) {
    auto pid = pid_of(e.device < int32_t(x_.devices.size()) ? e.device : -1);
    auto kernel = std::string{kernels::name(kernels::kernel_id(e.kernel))};
    switch (e.kind) {
    case trace_kind::wait:
      // An async slice: waits overlap each other and the launches.
      next();
      printf_("{\"ph\":\"b\",\"cat\":\"wait\",\"id\":\"0x%zx\",\"pid\":%d,"
              "\"tid\":0,\"ts\":%s,\"name\":",
              index, pid, us(since(x_, e.begin_ns)).c_str());
      out_ += json_string("wait " + kernel) + ",";
      common_args(e);
      printf_(",\"placement\":%u}}", e.count);
      next();
      printf_("{\"ph\":\"e\",\"cat\":\"wait\",\"id\":\"0x%zx\",\"pid\":%d,"
              "\"tid\":0,\"ts\":%s}",
              index, pid, us(since(x_, e.end_ns)).c_str());
      return;
    case trace_kind::run: {
      // Launches on one stream run one after another: one drawn to begin
      // before the last ended (clocks of two processes, reports that
      // travelled) begins when it ended.
      auto& last = stream_end_[{e.device, e.stream}];
      auto begin = std::max(e.begin_ns, last);
      auto end = std::max(begin, e.end_ns);
      last = end;
      std::string name = kernel;
      if (e.count > 1)
        name += " x" + std::to_string(e.count);
      if ((e.flags & trace_gang) != 0)
        name += " (gang slice)";
      if ((e.flags & trace_rebuild) != 0)
        name += " (rebuild)";
      if ((e.flags & trace_fallback) != 0)
        name += " (fallback)";
      next();
      printf_("{\"ph\":\"X\",\"cat\":\"launch\",\"pid\":%d,\"tid\":%u,"
              "\"ts\":%s,\"dur\":%s,\"name\":",
              pid, e.stream + 1, us(since(x_, begin)).c_str(),
              us(since(x_, end) - since(x_, begin)).c_str());
      out_ += json_string(name) + ",";
      common_args(e);
      printf_(",\"items\":%u,\"fallback\":%s}}", e.count,
              (e.flags & trace_fallback) != 0 ? "true" : "false");
      // A GPU that timed its copies apart: they and the kernels nest in
      // the launch.
      if (e.copy_in_ns > 0 || e.copy_out_ns > 0) {
        // Drawn shorter than measured (it began when the one before it
        // ended): its parts shrink alike.
        double scale = e.end_ns > e.begin_ns
                           ? double(end - begin) / double(e.end_ns - e.begin_ns)
                           : 0.0;
        scale = std::min(scale, 1.0);
        auto in = std::min<int64_t>(int64_t(e.copy_in_ns * scale), end - begin);
        auto out =
            std::min<int64_t>(int64_t(e.copy_out_ns * scale), end - begin - in);
        part(e, pid, "copy in", begin, begin + in);
        part(e, pid, "kernels", begin + in, end - out);
        part(e, pid, "copy out", end - out, end);
      }
      return;
    }
    case trace_kind::failover:
    case trace_kind::ended: {
      const char* name = e.kind == trace_kind::failover       ? "failover"
                         : (e.flags & trace_refused) != 0     ? "refused"
                         : text(e).rfind("cancelled", 0) == 0 ? "cancelled"
                                                              : "failed";
      next();
      printf_("{\"ph\":\"i\",\"s\":\"t\",\"cat\":\"item\",\"pid\":%d,"
              "\"tid\":0,\"ts\":%s,\"name\":\"%s %s\",",
              pid, us(since(x_, e.begin_ns)).c_str(), name, kernel.c_str());
      common_args(e);
      out_ += ",\"why\":" + json_string(text(e)) + "}}";
      return;
    }
    case trace_kind::device:
      next();
      printf_("{\"ph\":\"i\",\"s\":\"p\",\"cat\":\"device\",\"pid\":%d,"
              "\"tid\":0,\"ts\":%s,\"name\":",
              pid, us(since(x_, e.begin_ns)).c_str());
      out_ += json_string(headline(text(e))) +
              ",\"args\":{\"detail\":" + json_string(text(e)) + "}}";
      return;
    case trace_kind::placed:
      next();
      printf_("{\"ph\":\"C\",\"pid\":%d,\"ts\":%s,\"name\":\"placed\","
              "\"args\":{\"items\":%u}}",
              pid, us(since(x_, e.begin_ns)).c_str(), e.count);
      return;
    }
  }

  const trace_snapshot& x_;
  std::string out_;
  bool first_ = true;
  std::map<std::pair<int32_t, uint32_t>, int64_t> stream_end_;
};

} // namespace

std::string chrome_trace_json(const trace_snapshot& x) {
  return writer{x}.finish();
}

} // namespace cohort
