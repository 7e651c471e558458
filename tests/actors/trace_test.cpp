// Traces (docs/tracing.md): what the balancer records while a trace runs
// (waits, launches on their streams, failovers, ends, device events), its
// bounds and refusals, and the Chrome trace event JSON it is written as.
#include <catch2/catch.hpp>

#include <map>
#include <set>

#include "messages/json.hpp"
#include "messages/trace.hpp"
#include "tests/json_fixture.hpp"
#include "tests/runtime_fixture.hpp"

using namespace cohort;
using namespace cohort::actors;
using namespace std::chrono_literals;

using fixture = test::actor_fixture;

namespace {

using test::field;
using test::number_of;
using test::parse_json;
using test::text_of;
using test::trace_events;

size_t count_kind(const trace_snapshot& x, trace_kind k) {
  return size_t(std::count_if(x.events.begin(), x.events.end(),
                              [&](auto& e) { return e.kind == k; }));
}

std::string text_in(const trace_snapshot& x, const trace_event& e) {
  return e.text < x.texts.size() ? x.texts[e.text] : std::string{};
}

} // namespace

TEST_CASE_METHOD(fixture,
                 "a trace holds each item's wait, its launch on its device's "
                 "stream, failovers, refusals and device events, and a "
                 "viewer can read its JSON",
                 "[actors][trace]") {
  auto cfg = test::make_config(dir, 0, {{"sim0", 1}, {"sim1", 1}});
  for (auto& g : *cfg.mutable_devices()->mutable_sim_gpu())
    g.set_launch_latency_us(2000);
  auto rt = runtime::start(sys, cfg);
  REQUIRE(rt);
  auto& r = **rt;
  REQUIRE_FALSE(r.start_trace(10'000));
  // The first launch on sim0 fails (an application Xid): its item moves.
  r.sim_device("sim0")->raise_xid(13);
  auto items = test::gemv_items(12);
  auto e = test::submit_all(sys, r, items, [] {});
  test::check_exactly_once(items, e);
  // An item of a tenant without a grant is refused at the door.
  auto refused = r.submit(test::gemv_item(99, "nobody"));
  CHECK_FALSE(refused.get());
  REQUIRE_FALSE(r.set_offline("sim1"));
  REQUIRE(test::wait_status(r, 1, device_status::offline) ==
          device_status::offline);
  auto look = r.trace(false);
  REQUIRE(look);
  CHECK(look->recording);
  auto x = r.trace(true);
  REQUIRE(x);
  CHECK_FALSE(x->recording);
  CHECK(x->dropped == 0);
  REQUIRE(x->devices.size() == 2);
  CHECK(x->devices[0].name == "sim0");
  CHECK(x->devices[0].simulated);
  CHECK(x->devices[0].streams == 2);
  CHECK(x->tenants == std::vector<std::string>{"t"});

  // Every item waited and ran; the one that failed on sim0 ran twice.
  std::map<uint64_t, int> waits, runs;
  size_t launches = 0;
  for (auto& ev : x->events) {
    if (ev.kind == trace_kind::wait) {
      ++waits[ev.job];
      CHECK(ev.begin_ns <= ev.end_ns);
      CHECK(ev.count >= 1);
    } else if (ev.kind == trace_kind::run) {
      ++runs[ev.job];
      ++launches;
      CHECK(ev.stream < 2);
      CHECK(ev.count == 1);
      // A launch takes its modeled 2 ms (and more for the gemv itself).
      CHECK(ev.end_ns - ev.begin_ns >= 2'000'000);
      CHECK(ev.kernel == uint8_t(kernel_id::gemv));
      CHECK(ev.tenant == 0);
    }
  }
  CHECK(waits.size() == items.size());
  CHECK(runs.size() == items.size());
  CHECK(count_kind(*x, trace_kind::failover) >= 1);
  bool failover_said = false, refusal_said = false, offline_said = false;
  for (auto& ev : x->events) {
    auto t = text_in(*x, ev);
    if (ev.kind == trace_kind::failover && ev.device == 0) {
      failover_said = true;
      CHECK(waits[ev.job] == 2);
    }
    if (ev.kind == trace_kind::ended && (ev.flags & trace_refused) != 0)
      refusal_said = ev.device == -1 && t.find("nobody") != std::string::npos;
    if (ev.kind == trace_kind::device && ev.device == 1 &&
        t.find("offline") == 0)
      offline_said = true;
  }
  CHECK(failover_said);
  CHECK(refusal_said);
  CHECK(offline_said);
  CHECK(count_kind(*x, trace_kind::placed) >= 1);

  auto doc = parse_json(chrome_trace_json(*x));
  auto& other = field(doc, "otherData").struct_value();
  CHECK(text_of(other, "producer") == "cohort");
  CHECK(number_of(other, "events") == double(x->events.size()));
  auto es = trace_events(doc);
  auto names = test::check_trace_viewable(es);
  // A launch that failed is a failover, not a launch drawn.
  CHECK(names.count("gemv") == launches);
  std::set<std::string> processes, threads;
  for (auto& ev : es) {
    if (text_of(ev, "ph") != "M")
      continue;
    auto& args = field(ev, "args").struct_value();
    (text_of(ev, "name") == "process_name" ? processes : threads)
        .insert(text_of(args, "name"));
  }
  CHECK(processes.count("sim0 (simulated GPU)") == 1);
  CHECK(processes.count("sim1 (simulated GPU)") == 1);
  CHECK(threads.count("stream 1") == 1);
}

TEST_CASE_METHOD(fixture,
                 "a trace keeps at most its bound of events and counts the "
                 "rest; a second start and a stop without a trace are "
                 "refused",
                 "[actors][trace]") {
  auto cfg = test::make_config(dir, 0, {{"sim0", 1}});
  auto rt = runtime::start(sys, cfg);
  REQUIRE(rt);
  auto& r = **rt;
  CHECK(code_of(r.trace(true).error()) == errc::invalid_transition);
  CHECK(code_of(r.start_trace(0)) == errc::invalid_arguments);
  CHECK(code_of(r.start_trace(max_trace_events + 1)) ==
        errc::invalid_arguments);
  REQUIRE_FALSE(r.start_trace(5));
  CHECK(code_of(r.start_trace(5)) == errc::invalid_transition);
  auto items = test::gemv_items(20);
  auto e = test::submit_all(sys, r, items, [] {});
  test::check_exactly_once(items, e);
  auto x = r.trace(true);
  REQUIRE(x);
  CHECK(x->events.size() == 5);
  CHECK(x->max_events == 5);
  CHECK(x->dropped > 0);
  auto doc = parse_json(chrome_trace_json(*x));
  CHECK(number_of(field(doc, "otherData").struct_value(), "dropped") ==
        double(x->dropped));
  bool full_said = false;
  for (auto& ev : trace_events(doc))
    full_said = full_said ||
                text_of(ev, "name").find("trace full") != std::string::npos;
  CHECK(full_said);
  // Stopped: a new one may start, and starts empty.
  REQUIRE_FALSE(r.start_trace(100));
  auto y = r.trace(true);
  REQUIRE(y);
  CHECK(count_kind(*y, trace_kind::wait) == 0);
  CHECK(count_kind(*y, trace_kind::run) == 0);
  CHECK(y->dropped == 0);
}

TEST_CASE("a trace's JSON draws launches on one stream one after another "
          "and escapes what it quotes",
          "[actors][trace]") {
  trace_snapshot x;
  x.started_ns = 1'000'000;
  x.taken_ns = 9'000'000;
  x.max_events = 100;
  x.devices.push_back({"gpu\"0", "cuda", false, 1, "host process"});
  x.tenants.push_back("t\n1");
  x.texts.push_back(std::string{"bad \xff byte: \x01"});
  // Two launches that overlap on stream 0 (clocks of two processes), a
  // wait that began before the trace, a failure with a text.
  x.events.push_back({.begin_ns = 2'000'000,
                      .end_ns = 5'000'000,
                      .job = 1,
                      .count = 1,
                      .device = 0,
                      .tenant = 0,
                      .kind = trace_kind::run,
                      .kernel = uint8_t(kernel_id::axpy)});
  x.events.push_back({.begin_ns = 4'000'000,
                      .end_ns = 6'000'000,
                      .job = 2,
                      .count = 3,
                      .device = 0,
                      .tenant = 0,
                      .kind = trace_kind::run,
                      .kernel = uint8_t(kernel_id::axpy),
                      .flags = trace_fallback});
  x.events.push_back({.begin_ns = 0,
                      .end_ns = 3'000'000,
                      .job = 2,
                      .count = 1,
                      .device = 0,
                      .kind = trace_kind::wait,
                      .kernel = uint8_t(kernel_id::axpy)});
  x.events.push_back({.begin_ns = 7'000'000,
                      .job = 3,
                      .device = 0,
                      .text = 0,
                      .kind = trace_kind::ended,
                      .kernel = uint8_t(kernel_id::axpy)});
  auto doc = parse_json(chrome_trace_json(x));
  auto es = trace_events(doc);
  auto names = test::check_trace_viewable(es);
  CHECK(names.count("axpy") == 1);
  CHECK(names.count("axpy x3 (fallback)") == 1);
  bool second_moved = false, failed_said = false, named = false;
  for (auto& e : es) {
    if (text_of(e, "name") == "axpy x3 (fallback)") {
      // It began when the first ended, 4 ms after the start (in µs).
      CHECK(number_of(e, "ts") == Approx(4000.0));
      CHECK(number_of(e, "dur") == Approx(1000.0));
      second_moved = true;
    }
    if (text_of(e, "ph") == "b")
      CHECK(number_of(e, "ts") == 0);
    if (text_of(e, "name") == "failed axpy") {
      auto& args = field(e, "args").struct_value();
      CHECK(text_of(args, "why") == "bad \xef\xbf\xbd byte: \x01");
      failed_said = true;
    }
    if (text_of(e, "name") == "process_name")
      named = named || text_of(field(e, "args").struct_value(), "name") ==
                           "gpu\"0 (CUDA GPU, host process)";
  }
  CHECK(second_moved);
  CHECK(failed_said);
  CHECK(named);
  CHECK(json_string("a\"b\\c\n") == "\"a\\\"b\\\\c\\u000a\"");
  CHECK(json_string("\xc3\xa9") == "\"\xc3\xa9\"");
  CHECK(json_string("\xc0\xaf") == "\"\\ufffd\\ufffd\"");
}
