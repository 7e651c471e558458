// Placement: the measured model, makespan against the lower bound on a
// mixed fleet (with and without timing noise), dynamic batching, gangs and
// fair shares between tenants.
#include <catch2/catch.hpp>

#include <algorithm>
#include <set>

#include "actors/balancer/cost_model.hpp"
#include "devices/memory/asan_poison.hpp"
#include "tests/runtime_fixture.hpp"

using namespace cohort;
using namespace cohort::actors;
using namespace cohort::actors::balancer;
using namespace std::chrono_literals;

namespace {

using fixture = test::actor_fixture;
using clock_type = std::chrono::steady_clock;

// Modeled throughput of the simulated devices here: slow enough that a run
// takes milliseconds while computing it on this host takes microseconds.
constexpr double model_gflops = 0.01;
constexpr double model_gbytes = 0.01;

struct sim_spec {
  std::string name;
  double speed;
  uint32_t streams;
  bool cpu;
  int32_t numa;
};

pb::RuntimeConfig fleet_config(const test::temp_dir& dir,
                               const std::vector<sim_spec>& sims,
                               double spikes = 0) {
  auto cfg = test::make_config(dir, 0, {});
  for (auto& s : sims) {
    auto* g = cfg.mutable_devices()->add_sim_gpu();
    g->set_name(s.name);
    g->set_memory_mib(1024);
    g->set_streams(s.streams);
    g->set_speed(s.speed);
    g->set_gflops(model_gflops);
    g->set_gbytes_per_s(model_gbytes);
    g->set_cpu(s.cpu);
    g->set_numa_node(s.numa);
    g->set_spike_fraction(spikes);
  }
  return cfg;
}

// 4 simulated GPUs of speeds 1, 1, 2, 4 (2 streams each) and 2 simulated
// CPU workers of speed 0.5 (1 stream each).
std::vector<sim_spec> mixed_fleet() {
  return {{"sim0", 1, 2, false, 0},     {"sim1", 1, 2, false, 0},
          {"sim2", 2, 2, false, 0},     {"sim3", 4, 2, false, 0},
          {"simcpu0", 0.5, 1, true, 0}, {"simcpu1", 0.5, 1, true, 0}};
}

work_item gemm_item(uint64_t id, uint64_t m, uint64_t n, uint64_t k,
                    std::string tenant = "t") {
  work_item item;
  item.id = id;
  item.tenant = std::move(tenant);
  item.kernel = kernel_id::gemm;
  item.args.m = m;
  item.args.n = n;
  item.args.k = k;
  item.inputs.emplace_back(kernels::random_floats(id, m * k));
  item.inputs.emplace_back(kernels::random_floats(id + 7777, k * n));
  return item;
}

// A mixed workload: many small, many medium and some large gemms, shuffled.
std::vector<work_item> mixed_workload() {
  std::vector<work_item> out;
  uint64_t id = 1;
  for (int i = 0; i < 120; ++i)
    out.push_back(gemm_item(id++, 32, 32, 32));
  for (int i = 0; i < 120; ++i)
    out.push_back(gemm_item(id++, 64, 64, 64));
  for (int i = 0; i < 40; ++i)
    out.push_back(gemm_item(id++, 96, 96, 96));
  std::mt19937 rng{7};
  std::shuffle(out.begin(), out.end(), rng);
  return out;
}

// Modeled seconds of `item` at speed 1 (without the fixed launch cost, so
// the bound stays a bound).
double modeled_s(const work_item& item) {
  auto c = item_cost(item);
  return std::max(c.flops / (model_gflops * 1e9),
                  c.bytes / (model_gbytes * 1e9));
}

// The makespan no placement can beat: all work spread perfectly over every
// stream of every device, or the longest item on the fastest device.
double lower_bound_s(const std::vector<work_item>& items,
                     const std::vector<sim_spec>& sims) {
  double work = 0, longest = 0, capacity = 0, fastest = 0;
  for (auto& item : items) {
    work += modeled_s(item);
    longest = std::max(longest, modeled_s(item));
  }
  for (auto& s : sims) {
    capacity += s.speed * s.streams;
    fastest = std::max(fastest, s.speed);
  }
  return std::max(work / capacity, longest / fastest);
}

// Submits every item at once; returns when each ended, with the time from
// submission to its end.
struct timed_ends {
  test::ends ends;
  std::map<uint64_t, double> latency_s;
  std::vector<uint64_t> order;
  double makespan_s = 0;
};

timed_ends run_timed(caf::actor_system& sys, runtime& rt,
                     std::vector<std::vector<work_item>> waves,
                     std::chrono::milliseconds gap = 0ms) {
  caf::scoped_actor self{sys};
  auto sink = caf::actor_cast<client_sink>(self);
  timed_ends out;
  std::map<uint64_t, clock_type::time_point> sent;
  size_t n = 0;
  auto start = clock_type::now();
  for (auto& wave : waves) {
    if (&wave != &waves.front())
      std::this_thread::sleep_for(gap);
    for (auto& item : wave) {
      sent[item.id] = clock_type::now();
      ++n;
      self->send(rt.entry(), submit_atom::value, std::move(item), sink);
    }
  }
  auto took = [&](uint64_t id) {
    auto now = clock_type::now();
    out.latency_s[id] = std::chrono::duration<double>(now - sent[id]).count();
    out.makespan_s = std::chrono::duration<double>(now - start).count();
    out.order.push_back(id);
  };
  size_t received = 0;
  while (received < n && !out.ends.timed_out)
    self->receive(
        [&](result_atom, work_result& res) {
          ++out.ends.count[res.id];
          took(res.id);
          out.ends.results[res.id] = std::move(res);
          ++received;
        },
        [&](failed_atom, uint64_t id, caf::error& err) {
          ++out.ends.count[id];
          took(id);
          out.ends.errors[id] = std::move(err);
          ++received;
        },
        caf::after(std::chrono::seconds(60)) >>
            [&] { out.ends.timed_out = true; });
  return out;
}

} // namespace

TEST_CASE("the run-time model takes the median, so spikes do not move it",
          "[actors][placement]") {
  run_time_model model{15};
  auto k = kernel_id::gemm;
  for (int i = 0; i < 30; ++i)
    // Every 20th run reports ten times its time.
    model.record(0, k, 10, 1000, i % 20 == 19 ? 10000 : 1000);
  CHECK(model.rate(0, k, 10) == Approx(1.0));
  CHECK(model.samples(0, k, 10) == 15);
  // Other cells know nothing yet; the nearest size of the kernel answers.
  CHECK(model.rate(1, k, 10) == 0);
  CHECK(model.rate(0, k, 12) == 0);
  CHECK(model.nearest_rate(0, k, 12) == Approx(1.0));
  CHECK(model.nearest_rate(0, kernel_id::axpy, 12) == 0);
  // A lasting change does move it, within a window.
  for (int i = 0; i < 15; ++i)
    model.record(0, k, 10, 1000, 3000);
  CHECK(model.rate(0, k, 10) == Approx(3.0));
  CHECK(size_class(1000) == 9);
  CHECK(size_class(1024) == 10);
  CHECK(size_class(0) == 0);
}

TEST_CASE("the crossing model keeps a fixed cost and a cost per byte, by "
          "their lower quartiles",
          "[actors][placement]") {
  crossing_model m;
  CHECK_FALSE(m.measured());
  CHECK(m.predict(1 << 20) == 0);
  // Small items: 100 us, and one in four held up behind something else
  // (2 ms): the lower quartile is the link's 100 us.
  for (int i = 0; i < 40; ++i)
    m.record(i % 4 == 3 ? 2e6 : 100e3, 1024);
  CHECK(m.measured());
  CHECK(m.fixed_ns() == Approx(100e3));
  CHECK(m.ns_per_byte() == 0);
  // Items of 1 MiB take 100 us + 1 ms: 1 ns per 1.05 bytes over the fixed
  // cost.
  for (int i = 0; i < 30; ++i)
    m.record(100e3 + 1e6, 1 << 20);
  CHECK(m.ns_per_byte() == Approx(1e6 / double(1 << 20)));
  CHECK(m.predict(1 << 20) == Approx(1.1e6));
  CHECK(m.predict(0) == Approx(100e3));
  // A negative sample (clocks of two machines advance at other rates) is
  // taken as none: the fixed cost moves down, never below 0.
  for (int i = 0; i < 40; ++i)
    m.record(-5e3, 10);
  CHECK(m.fixed_ns() == 0);
  // A lasting change moves it within a window.
  for (int i = 0; i < int(crossing_model::window); ++i)
    m.record(300e3, 10);
  CHECK(m.fixed_ns() == Approx(300e3));
  // More than a window of large messages in a row retires the fixed cost:
  // the cost per byte then carries all of it.
  for (int i = 0; i < int(crossing_model::window) + 1; ++i)
    m.record(2e6, 1 << 20);
  CHECK(m.measured());
  CHECK(m.fixed_ns() == 0);
  for (int i = 0; i < int(crossing_model::window); ++i)
    m.record(2e6, 1 << 20);
  CHECK(m.predict(1 << 20) == Approx(2e6));
}

TEST_CASE_METHOD(fixture,
                 "a mixed workload on GPUs of speeds 1, 1, 2, 4 and CPU "
                 "workers finishes near the lower bound",
                 "[actors][placement]") {
  auto sims = mixed_fleet();
  auto rt = runtime::start(sys, fleet_config(dir, sims));
  REQUIRE(rt);
  auto items = mixed_workload();
  auto bound = lower_bound_s(items, sims);
  auto run = run_timed(sys, **rt, {items});
  test::check_exactly_once(items, run.ends);
  CHECK(run.ends.errors.empty());
  auto ratio = run.makespan_s / bound;
  INFO("makespan " << run.makespan_s << " s, bound " << bound << " s, ratio "
                   << ratio);
  // How near the bound, and how work splits by speed, are timing goals:
  // bench/placement measures them (a unit test on a loaded machine, or
  // under ASan, cannot: there the host side dominates). Here: no run beats
  // the bound, every device is used and nothing is left queued.
  CHECK(ratio >= 1.0);
  auto stats = (*rt)->placement_stats();
  REQUIRE(stats);
  for (auto& d : stats->devices) {
    INFO(d.name << " utilization " << d.utilization);
    CHECK(d.completed > 0);
    CHECK(d.queued == 0);
  }
  CHECK(stats->explored > 0);
  CHECK(stats->waiting == 0);
}

TEST_CASE_METHOD(fixture,
                 "with timing spikes on 5% of runs placement stays near the "
                 "lower bound",
                 "[actors][placement]") {
  auto sims = mixed_fleet();
  auto rt = runtime::start(sys, fleet_config(dir, sims, 0.05));
  REQUIRE(rt);
  auto items = mixed_workload();
  auto bound = lower_bound_s(items, sims);
  auto run = run_timed(sys, **rt, {items});
  test::check_exactly_once(items, run.ends);
  auto ratio = run.makespan_s / bound;
  INFO("makespan " << run.makespan_s << " s, bound " << bound << " s, ratio "
                   << ratio);
  CHECK(ratio >= 1.0);
  // Whether the fastest device kept its share under the noise is a timing
  // goal (bench/placement --noise 0.05); here every device is still used.
  auto stats = (*rt)->placement_stats();
  REQUIRE(stats);
  for (auto& d : stats->devices) {
    INFO(d.name);
    CHECK(d.completed > 0);
  }
}

TEST_CASE_METHOD(fixture, "the round-robin and least-loaded baselines run",
                 "[actors][placement]") {
  for (auto policy : {pb::ROUND_ROBIN, pb::LEAST_LOADED}) {
    auto cfg = test::make_config(dir, 1, {{"sim0", 1}, {"sim1", 4}});
    cfg.mutable_placement()->set_policy(policy);
    auto rt = runtime::start(sys, cfg);
    REQUIRE(rt);
    std::vector<work_item> items;
    for (uint64_t i = 1; i <= 60; ++i)
      items.push_back(test::gemv_item(i));
    auto e = test::submit_all(sys, **rt, items, [] {});
    test::check_exactly_once(items, e);
    auto stats = (*rt)->placement_stats();
    REQUIRE(stats);
    for (auto& d : stats->devices) {
      INFO(pb::PlacementPolicy_Name(policy)
           << ": " << d.name << " " << to_string(d.status) << ", "
           << d.completed << " completed, " << d.failed_placements
           << " failed placements");
      CHECK(d.completed > 0);
    }
  }
}

TEST_CASE_METHOD(fixture, "malformed placement settings are refused",
                 "[actors][placement]") {
  auto refused = [&](auto edit, const std::string& says) {
    auto cfg = test::make_config(dir, 1, {});
    edit(*cfg.mutable_placement());
    auto rt = runtime::start(sys, cfg);
    REQUIRE_FALSE(rt);
    CHECK(code_of(rt.error()) == errc::malformed_config);
    CHECK_THAT(describe(rt.error()), Catch::Contains(says));
  };
  refused([](pb::Placement& p) { p.add_batch()->set_kernel("nope"); },
          "unknown kernel");
  refused([](pb::Placement& p) { p.add_batch()->set_kernel("dot"); },
          "only axpy");
  refused(
      [](pb::Placement& p) {
        p.add_batch()->set_kernel("axpy");
        p.add_batch()->set_kernel("axpy");
      },
      "given twice");
  refused([](pb::Placement& p) { p.set_model_window(1000); }, "model_window");
  refused([](pb::Placement& p) { p.set_policy(pb::PlacementPolicy(9)); },
          "unknown policy");
}

namespace {

// Axpy items of two tenants (two alphas), and gemm items sharing one B.
std::vector<work_item> batchable_items() {
  std::vector<work_item> out;
  std::mt19937 rng{11};
  uint64_t id = 1;
  for (int i = 0; i < 120; ++i) {
    work_item item;
    item.id = id++;
    item.tenant = i % 2 ? "t" : "u";
    item.kernel = kernel_id::axpy;
    item.args.alpha = i % 10 == 0 ? 3.0f : 2.0f;
    auto n = 100 + rng() % 900;
    item.inputs.emplace_back(kernels::random_floats(item.id, n));
    item.inputs.emplace_back(kernels::random_floats(item.id + 5000, n));
    out.push_back(std::move(item));
  }
  host_buffer weights{kernels::random_floats(99, 32 * 16)};
  for (int i = 0; i < 40; ++i) {
    work_item item;
    item.id = id++;
    item.tenant = "t";
    item.kernel = kernel_id::gemm;
    item.args.m = 1 + rng() % 8;
    item.args.n = 16;
    item.args.k = 32;
    item.inputs.emplace_back(
        kernels::random_floats(item.id, item.args.m * item.args.k));
    item.inputs.push_back(weights);
    out.push_back(std::move(item));
  }
  return out;
}

pb::RuntimeConfig batch_config(const test::temp_dir& dir, bool batching,
                               uint32_t max_delay_us = 2000) {
  // One device: both runs compute on the same kernels.
  auto cfg = test::make_config(dir, 0, {{"sim0", 1}});
  auto* u = cfg.add_tenant();
  u->set_tenant("u");
  u->add_kernels("*");
  u->add_devices("*");
  if (batching)
    for (auto k : {"axpy", "gemm"}) {
      auto* rule = cfg.mutable_placement()->add_batch();
      rule->set_kernel(k);
      rule->set_preferred_batch(16);
      rule->set_max_delay_us(max_delay_us);
    }
  return cfg;
}

} // namespace

TEST_CASE_METHOD(fixture,
                 "batched results are identical to unbatched, and quota and "
                 "audit see every item",
                 "[actors][placement][batching]") {
  std::map<uint64_t, kernels::kernel_output> plain;
  {
    test::temp_dir d;
    auto rt = runtime::start(sys, batch_config(d, false));
    REQUIRE(rt);
    auto items = batchable_items();
    auto e = test::submit_all(sys, **rt, items, [] {});
    test::check_exactly_once(items, e);
    for (auto& [id, res] : e.results)
      plain[id] = res.output;
    auto stats = (*rt)->placement_stats();
    REQUIRE(stats);
    CHECK(stats->batches == 0);
  }
  auto rt = runtime::start(sys, batch_config(dir, true));
  REQUIRE(rt);
  auto items = batchable_items();
  auto e = test::submit_all(sys, **rt, items, [] {});
  test::check_exactly_once(items, e);
  REQUIRE(e.results.size() == items.size());
  for (auto& item : items) {
    INFO("item " << item.id);
    auto& got = e.results.at(item.id).output.values;
    if (item.kernel == kernel_id::axpy)
      // Elementwise: the merged launch computes each element as alone.
      CHECK(got == plain.at(item.id).values);
    else
      // BLAS picks its inner kernels by shape: stacked rows agree with the
      // reference, not always to the last bit (docs/placement.md).
      CHECK(check_result(item, e.results.at(item.id).output) == "");
  }
  auto stats = (*rt)->placement_stats();
  REQUIRE(stats);
  CHECK(stats->batches > 0);
  CHECK(stats->batched_items > stats->batches);
  CHECK(stats->admission.admitted == items.size());
  CHECK(stats->completed == items.size());
  uint64_t launches = 0;
  for (auto& d : stats->devices)
    launches += d.launches;
  CHECK(launches < items.size());
  REQUIRE((*rt)->flush_audit());
  auto recs = test::read_audit((*rt)->audit_path());
  std::map<pb::AuditKind, std::set<uint64_t>> ids;
  for (auto& r : recs)
    ids[r.kind()].insert(r.work_id());
  CHECK(ids[pb::ADMITTED].size() == items.size());
  CHECK(ids[pb::PLACED].size() == items.size());
  CHECK(ids[pb::COMPLETED].size() == items.size());
}

TEST_CASE_METHOD(fixture,
                 "a lone batchable item waits no longer than the maximum "
                 "queue delay",
                 "[actors][placement][batching]") {
  auto rt = runtime::start(sys, batch_config(dir, true, 30000));
  REQUIRE(rt);
  auto items = batchable_items();
  items.resize(1);
  auto run = run_timed(sys, **rt, {items});
  test::check_exactly_once(items, run.ends);
  auto latency = run.latency_s.at(1);
  INFO("latency " << latency << " s");
  // It waited for company, then went alone when its time was up.
  CHECK(latency >= 0.029);
  CHECK(latency < 0.030 + 0.2);
}

namespace {

// 4 simulated GPUs, two per NUMA node, and a CPU worker.
pb::RuntimeConfig gang_config(const test::temp_dir& dir, bool cross_numa) {
  auto cfg = fleet_config(dir, {{"sim0", 1, 2, false, 0},
                                {"sim1", 1, 2, false, 0},
                                {"sim2", 2, 2, false, 1},
                                {"sim3", 2, 2, false, 1}});
  cfg.mutable_devices()->set_cpu_workers(1);
  cfg.mutable_placement()->set_gang_cross_numa(cross_numa);
  return cfg;
}

std::vector<std::string> split_names(const std::string& s) {
  std::vector<std::string> out;
  size_t at = 0;
  for (;;) {
    auto plus = s.find('+', at);
    out.push_back(s.substr(at, plus - at));
    if (plus == std::string::npos)
      return out;
    at = plus + 1;
  }
}

} // namespace

TEST_CASE_METHOD(fixture,
                 "gangs and single items share a small fleet without "
                 "deadlock or partial allocation",
                 "[actors][placement][gang]") {
  for (bool cross : {false, true}) {
    INFO("cross-NUMA " << cross);
    test::temp_dir d;
    auto rt = runtime::start(sys, gang_config(d, cross));
    REQUIRE(rt);
    std::vector<work_item> items;
    std::map<uint64_t, uint32_t> gang_of;
    uint64_t id = 1;
    for (int i = 0; i < 60; ++i) {
      if (i % 3 == 0) {
        auto g = gemm_item(id, 24, 24, 24);
        // Gangs of 2, 3 and 4 when they may span NUMA nodes.
        g.gang = cross ? 2 + uint32_t(i % 9) / 3 : 2;
        gang_of[id] = g.gang;
        items.push_back(std::move(g));
      } else {
        items.push_back(gemm_item(id, 16, 16, 16));
      }
      ++id;
    }
    auto e = test::submit_all(sys, **rt, items, [] {});
    test::check_exactly_once(items, e);
    CHECK(e.errors.empty());
    for (auto& [gid, k] : gang_of) {
      auto& res = e.results.at(gid);
      auto names = split_names(res.device);
      INFO("gang " << gid << " ran on " << res.device);
      CHECK(names.size() == k);
      CHECK(std::set<std::string>(names.begin(), names.end()).size() == k);
      if (!cross) {
        // One NUMA node: sim0+sim1 or sim2+sim3.
        CHECK((res.device == "sim0+sim1" || res.device == "sim2+sim3"));
      }
    }
    auto stats = (*rt)->placement_stats();
    REQUIRE(stats);
    CHECK(stats->gangs == gang_of.size());
    CHECK(stats->outstanding == 0);
    CHECK(stats->waiting == 0);
    // All of a gang's devices in one placement record.
    REQUIRE((*rt)->flush_audit());
    for (auto& r : test::read_audit((*rt)->audit_path()))
      if (r.kind() == pb::PLACED && gang_of.count(r.work_id()))
        CHECK(split_names(r.device()).size() == gang_of[r.work_id()]);
  }
}

TEST_CASE_METHOD(fixture, "a gang that can never be placed is refused clearly",
                 "[actors][placement][gang]") {
  auto rt = runtime::start(sys, gang_config(dir, false));
  REQUIRE(rt);
  auto three = gemm_item(1, 24, 24, 24);
  three.gang = 3;
  auto five = gemm_item(2, 24, 24, 24);
  five.gang = 5;
  auto not_gemm = test::gemv_item(3);
  not_gemm.gang = 2;
  auto e = test::submit_all(sys, **rt, {three, five, not_gemm}, [] {});
  REQUIRE(e.errors.size() == 3);
  CHECK(code_of(e.errors.at(1)) == errc::no_device_available);
  CHECK_THAT(describe(e.errors.at(1)), Catch::Contains("one NUMA node"));
  CHECK(code_of(e.errors.at(2)) == errc::no_device_available);
  CHECK_THAT(describe(e.errors.at(2)), Catch::Contains("needs 5 GPUs"));
  CHECK(code_of(e.errors.at(3)) == errc::invalid_arguments);
}

TEST_CASE_METHOD(fixture,
                 "gangs go to GPUs linked by NVLink before GPUs of one NUMA "
                 "node",
                 "[actors][placement][gang]") {
  // sim0 (node 0) and sim2 (node 1) are NVLinked; sim1-sim3 only by PCIe.
  auto cfg = gang_config(dir, false);
  cfg.mutable_devices()->mutable_sim_gpu(0)->add_nvlink("sim2");
  cfg.mutable_devices()->mutable_sim_gpu(1)->add_p2p("sim3");
  auto rt = runtime::start(sys, cfg);
  REQUIRE(rt);
  auto infos = (*rt)->devices();
  auto named = [&](const std::string& name) -> const device_info& {
    for (auto& d : infos)
      if (d.name == name)
        return d;
    FAIL("no device " << name);
    return infos.front();
  };
  CHECK(named("sim0").link_to("sim2") == link_kind::fabric);
  CHECK(named("sim2").link_to("sim0") == link_kind::fabric);
  CHECK(named("sim3").link_to("sim1") == link_kind::pcie);
  CHECK(named("sim0").link_to("sim1") == link_kind::none);
  // One gang at a time: each finds every GPU free and takes the NVLinked
  // pair, though its GPUs sit on two NUMA nodes.
  for (uint64_t id = 1; id <= 6; ++id) {
    auto g = gemm_item(id, 24, 24, 24);
    g.gang = 2;
    auto e = test::submit_all(sys, **rt, {g}, [] {});
    REQUIRE(e.results.size() == 1);
    CHECK(e.results.at(id).device == "sim0+sim2");
  }
  // A gang of 3 has no NUMA node with three GPUs, nor three linked GPUs.
  auto three = gemm_item(7, 24, 24, 24);
  three.gang = 3;
  auto e = test::submit_all(sys, **rt, {three}, [] {});
  REQUIRE(e.errors.size() == 1);
  CHECK_THAT(describe(e.errors.at(7)), Catch::Contains("the most linked 2"));
}

TEST_CASE_METHOD(fixture,
                 "three GPUs linked to each other across NUMA nodes hold a "
                 "gang of three",
                 "[actors][placement][gang]") {
  auto cfg = gang_config(dir, false);
  auto* sims = cfg.mutable_devices()->mutable_sim_gpu();
  sims->Mutable(0)->add_nvlink("sim2");
  sims->Mutable(0)->add_nvlink("sim3");
  sims->Mutable(3)->add_nvlink("sim2");
  auto rt = runtime::start(sys, cfg);
  REQUIRE(rt);
  auto three = gemm_item(1, 24, 24, 24);
  three.gang = 3;
  auto e = test::submit_all(sys, **rt, {three}, [] {});
  test::check_exactly_once({three}, e);
  REQUIRE(e.results.size() == 1);
  CHECK(e.results.at(1).device == "sim0+sim2+sim3");
}

TEST_CASE_METHOD(fixture,
                 "a simulated link to a device that is not another simulated "
                 "GPU is refused",
                 "[actors][placement][gang]") {
  for (auto peer : {"sim9", "sim0", "cpu0", "simcpu"}) {
    INFO(peer);
    auto cfg = gang_config(dir, false);
    auto* cpu = cfg.mutable_devices()->add_sim_gpu();
    cpu->set_name("simcpu");
    cpu->set_memory_mib(64);
    cpu->set_streams(1);
    cpu->set_speed(1);
    cpu->set_cpu(true);
    cfg.mutable_devices()->mutable_sim_gpu(0)->add_nvlink(peer);
    auto rt = runtime::start(sys, cfg);
    REQUIRE_FALSE(rt);
    CHECK(code_of(rt.error()) == errc::malformed_config);
    CHECK_THAT(describe(rt.error()),
               Catch::Contains("not another simulated GPU"));
  }
}

TEST_CASE_METHOD(fixture,
                 "one tenant's flood does not starve another, and weights "
                 "set the shares",
                 "[actors][placement][fairness]") {
  auto cfg = fleet_config(dir, {{"sim0", 10, 2, false, 0}});
  for (auto [name, weight] : {std::pair{"a", 3.0}, std::pair{"b", 1.0}}) {
    auto* t = cfg.add_tenant();
    t->set_tenant(name);
    t->add_kernels("*");
    t->add_devices("*");
    t->set_weight(weight);
  }
  auto rt = runtime::start(sys, cfg);
  REQUIRE(rt);
  // Tenant a floods, then tenant b floods as much; then tenant t sends a
  // few latency-sensitive items.
  std::vector<work_item> flood, late;
  uint64_t id = 1;
  for (int i = 0; i < 150; ++i)
    flood.push_back(gemm_item(id++, 48, 48, 48, "a"));
  for (int i = 0; i < 150; ++i)
    flood.push_back(gemm_item(id++, 48, 48, 48, "b"));
  for (int i = 0; i < 5; ++i)
    late.push_back(gemm_item(id++, 48, 48, 48, "t"));
  auto all = flood;
  all.insert(all.end(), late.begin(), late.end());
  auto run = run_timed(sys, **rt, {flood, late}, 20ms);
  test::check_exactly_once(all, run.ends);
  double worst_late = 0;
  for (auto& item : late)
    worst_late = std::max(worst_late, run.latency_s.at(item.id));
  INFO("late items waited at most " << worst_late << " s of a "
                                    << run.makespan_s << " s run");
  CHECK(worst_late < run.makespan_s / 4);
  // While both flood, a (weight 3) gets about three quarters of the device.
  size_t a = 0, b = 0;
  for (size_t i = 0; i < 120 && i < run.order.size(); ++i) {
    auto owner = run.order[i] <= 150 ? 'a' : run.order[i] <= 300 ? 'b' : 't';
    a += owner == 'a';
    b += owner == 'b';
  }
  INFO("first 120 completions: a " << a << ", b " << b);
  CHECK(a > 2 * b);
  CHECK(b > 0);
}

TEST_CASE_METHOD(fixture,
                 "items go to the device that already holds their inputs",
                 "[actors][placement][locality]") {
  // Two equal simulated GPUs whose input caches (a quarter of 48 MiB) hold
  // one of the two shared 7 MiB matrices each, not both.
  auto cfg = test::make_config(dir, 0, {{"sim0", 1}, {"sim1", 1}});
  for (auto& g : *cfg.mutable_devices()->mutable_sim_gpu())
    g.set_memory_mib(48);
  auto rt = runtime::start(sys, cfg);
  REQUIRE(rt);
  uint64_t m = 1792, n = 1024;
  host_buffer a1{kernels::random_floats(1, m * n)};
  host_buffer a2{kernels::random_floats(2, m * n)};
  std::vector<work_item> items;
  for (uint64_t id = 1; id <= 80; ++id) {
    work_item item;
    item.id = id;
    item.tenant = "t";
    item.kernel = kernel_id::gemv;
    item.args.m = m;
    item.args.n = n;
    item.inputs = {id % 2 ? a1 : a2,
                   host_buffer{kernels::random_floats(id + 10, n)}};
    items.push_back(std::move(item));
  }
  // One at a time: both devices are free for each, so only where its matrix
  // is decides (a flood also weighs backlogs: bench/placement).
  caf::scoped_actor self{sys};
  auto sink = caf::actor_cast<client_sink>(self);
  std::map<uint64_t, std::string> ran_on;
  for (auto& item : items) {
    auto check = item;
    self->send((*rt)->entry(), submit_atom::value, std::move(item), sink);
    self->receive(
        [&](result_atom, work_result& res) {
          CHECK(check_result(check, res.output) == "");
          ran_on[res.id] = res.device;
        },
        [&](failed_atom, uint64_t id, caf::error& err) {
          FAIL("item " << id << " failed: " << describe(err));
        },
        caf::after(std::chrono::seconds(30)) >> [&] { FAIL("no answer"); });
  }
  // Per matrix, the share of its items on the device that ran most of them;
  // the two matrices on different devices.
  std::string home[2];
  for (int parity : {0, 1}) {
    std::map<std::string, int> on;
    int total = 0;
    for (auto& [id, device] : ran_on)
      if (int(id % 2) == parity) {
        ++on[device];
        ++total;
      }
    int most = 0;
    for (auto& [dev, count] : on)
      if (count > most) {
        most = count;
        home[parity] = dev;
      }
    INFO("matrix " << parity << ": " << most << " of " << total << " on "
                   << home[parity]);
    CHECK(most >= total * 9 / 10);
  }
  CHECK(home[0] != home[1]);
}
