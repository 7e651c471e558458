// A timeline of a runtime's work (docs/tracing.md): what the balancer saw
// while a trace was being recorded, as compact events, and their Chrome
// trace event JSON, which Perfetto and chrome://tracing open.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <caf/error.hpp>
#include <caf/meta/load_callback.hpp>
#include <caf/meta/type_name.hpp>

namespace cohort {

/// What a trace event is.
enum class trace_kind : uint8_t {
  /// An item from its submission until its run request went to a device
  /// (`device`); `end_ns` is when it went.
  wait,
  /// A launch on `device`'s `stream` from `begin_ns` to `end_ns`: its
  /// transfers and kernels (`count` items when merged, a gang's slice, a
  /// re-run that rebuilds an object).
  run,
  /// A launch failed on `device` and its item is placed again (`text`).
  failover,
  /// An item ended without a result (`text`: why; cancellations too), or
  /// was refused at admission (`device` -1).
  ended,
  /// Something happened to `device`: its status, its circuit (`text`).
  device,
  /// Items placed on `device` and not ended yet (`count`) at `begin_ns`.
  placed,
};

/// Flags of a run event.
enum trace_flag : uint8_t {
  /// It ended on a CPU worker after a GPU failed it or had no memory.
  trace_fallback = 1,
  /// A slice of a gang item (`job` is the gang's).
  trace_gang = 2,
  /// The re-run of the item that made an object whose copies were lost.
  trace_rebuild = 4,
  /// An ended event: refused at admission, never admitted.
  trace_refused = 8,
};

/// One event; times are the steady clock's, in nanoseconds.
struct trace_event {
  int64_t begin_ns = 0;
  int64_t end_ns = 0;
  /// The item's job number (item_view::job); 0 for none.
  uint64_t job = 0;
  /// run: items in the launch; wait: its placement (1 the first);
  /// placed: the items.
  uint32_t count = 0;
  /// Index into trace_snapshot::devices (-1: none) and its stream.
  int32_t device = -1;
  uint32_t stream = 0;
  /// Index into trace_snapshot::tenants (-1: none).
  int32_t tenant = -1;
  /// Index into trace_snapshot::texts (no_text: none).
  uint32_t text = no_text;
  trace_kind kind = trace_kind::wait;
  /// kernels::kernel_id of the item (of its first stage).
  uint8_t kernel = 0;
  /// trace_flag bits.
  uint8_t flags = 0;
  /// run: of its time, the copies in before its first kernel and out after
  /// its last, when its device timed them apart (GPUs; ns, at most ~4 s).
  uint32_t copy_in_ns = 0;
  uint32_t copy_out_ns = 0;

  static constexpr uint32_t no_text = 0xffffffffu;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, trace_event& x) {
  auto kind = static_cast<uint8_t>(x.kind);
  auto load = caf::meta::load_callback([&]() -> caf::error {
    x.kind = static_cast<trace_kind>(kind);
    return caf::none;
  });
  return f(caf::meta::type_name("trace_event"), x.begin_ns, x.end_ns, x.job,
           x.count, x.device, x.stream, x.tenant, x.text, kind, x.kernel,
           x.flags, x.copy_in_ns, x.copy_out_ns, load);
}

/// A device as a trace names it.
struct trace_device {
  std::string name;
  /// device_kind in words (cpu, sim, cuda, hip).
  std::string kind;
  bool simulated = false;
  uint32_t streams = 1;
  /// Where it runs when not in the node's process: its host process or its
  /// remote host; empty otherwise.
  std::string where;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, trace_device& x) {
  return f(caf::meta::type_name("trace_device"), x.name, x.kind, x.simulated,
           x.streams, x.where);
}

/// A trace as recorded so far, or when it stopped.
struct trace_snapshot {
  /// Recording still (a look at a trace that goes on).
  bool recording = false;
  /// When it started: the steady clock and the wall clock then (ns).
  int64_t started_ns = 0;
  int64_t started_wall_ns = 0;
  /// When this snapshot was taken (steady clock, ns).
  int64_t taken_ns = 0;
  /// The most events it keeps, and those it did not keep past them.
  uint64_t max_events = 0;
  uint64_t dropped = 0;
  std::vector<trace_device> devices;
  std::vector<std::string> tenants;
  std::vector<trace_event> events;
  std::vector<std::string> texts;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, trace_snapshot& x) {
  return f(caf::meta::type_name("trace_snapshot"), x.recording, x.started_ns,
           x.started_wall_ns, x.taken_ns, x.max_events, x.dropped, x.devices,
           x.tenants, x.events, x.texts);
}

/// Events a trace keeps unless told otherwise, and the most it may keep
/// (an event takes 56 bytes in the node, about 200 in its JSON).
inline constexpr uint64_t default_trace_events = 1'000'000;
inline constexpr uint64_t max_trace_events = 4'000'000;

/// `x` as the Chrome trace event format's JSON object (docs/tracing.md):
/// a process per device with a thread per stream holding its launches,
/// each item's wait as an async slice, device events and failures as
/// instants, a counter of items placed per device.
std::string chrome_trace_json(const trace_snapshot& x);

} // namespace cohort
