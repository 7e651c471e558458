// The conformance suite every device backend runs: the CPU worker, the
// simulated GPU, the GPU host logic over a fake runtime, and every real CUDA
// and HIP GPU of the machine. Backends without hardware are skipped with a
// message naming why. Golden tests: every kernel, at sizes that cross block
// and tile boundaries, must match the double-precision CPU reference within
// the tolerances of kernels/reference.cpp.
#include <catch2/catch.hpp>

#include <caf/all.hpp>

#include "actors/device_actor.hpp"
#include "devices/cpu/cpu_device.hpp"
#include "devices/gpu/discover.hpp"
#include "devices/gpu/plugin.hpp"
#include "devices/sim/sim_device.hpp"
#include "kernels/random_data.hpp"
#include "messages/errc.hpp"
#include "messages/system_config.hpp"
#include "tests/devices/fake_gpu.hpp"
#include "tests/devices/launch_sync.hpp"

using namespace cohort;
using namespace cohort::devices;
using kernels::kernel_id;

namespace {

struct backend {
  std::string label;
  std::shared_ptr<device> dev;
};

struct fleet {
  std::vector<backend> run;
  std::vector<std::string> skipped;
};

// Real GPUs are opened once per process.
void add_real(fleet& out, const char* vendor, std::shared_ptr<gpu::api> rt,
              device_kind kind, const char* prefix) {
  static std::map<std::string, std::vector<std::shared_ptr<device>>> opened;
  if (!rt) {
    out.skipped.push_back(std::string{vendor} +
                          ": plugin not loaded: " + gpu::plugin(vendor).note);
    return;
  }
  if (opened.count(vendor) == 0) {
    auto& devs = opened[vendor];
    int n = 0;
    if (auto rc = rt->device_count(n); rc.failed()) {
      out.skipped.push_back(std::string{vendor} +
                            ": no device: " + rt->describe(rc.raw));
      opened.erase(vendor);
      return;
    }
    for (int i = 0; i < n; ++i) {
      auto dev =
          gpu::gpu_device::open(rt, i, kind, prefix + std::to_string(i), {});
      if (!dev)
        FAIL("opening " << prefix << i << ": " << describe(dev.error()));
      devs.push_back(std::move(*dev));
    }
  }
  if (opened[vendor].empty())
    out.skipped.push_back(std::string{vendor} + ": no device");
  for (auto& d : opened[vendor])
    out.run.push_back({std::string{vendor} + " " + d->info().name + " (" +
                           d->info().model + ")",
                       d});
}

fleet make_fleet() {
  fleet out;
  out.run.push_back({"cpu", cpu::make_cpu_device(0, -1, "test CPU")});
  sim::sim_params p;
  p.name = "simC";
  p.memory_bytes = uint64_t{1} << 30;
  p.launch_latency = std::chrono::nanoseconds{0};
  p.gflops = 1e6;
  p.gbytes_per_s = 1e6;
  auto sim = sim::make_sim_device(p);
  REQUIRE(sim);
  out.run.push_back({"sim (simulated GPU)", *sim});
  static auto fake = std::make_shared<testing::fake_gpu_api>();
  auto dev = gpu::gpu_device::open(fake, 0, device_kind::cuda_gpu, "fake0", {});
  REQUIRE(dev);
  out.run.push_back({"gpu host logic over a fake runtime", *dev});
  add_real(out, "CUDA", gpu::cuda_runtime(), device_kind::cuda_gpu, "cuda");
  add_real(out, "HIP", gpu::hip_runtime(), device_kind::hip_gpu, "hip");
  for (auto& s : out.skipped)
    WARN("SKIPPED " << s);
  return out;
}

struct golden_case {
  kernel_id id;
  kernels::kernel_args args;
  std::vector<std::vector<float>> inputs;
};

std::vector<float> data(uint64_t seed, size_t n) {
  return kernels::random_floats(seed, n);
}

std::vector<golden_case> golden_cases() {
  std::vector<golden_case> out;
  uint64_t seed = 1;
  for (size_t n : {size_t{1}, size_t{1000}, size_t{65537}}) {
    kernels::kernel_args a;
    a.alpha = 0.75f;
    out.push_back({kernel_id::axpy, a, {data(seed, n), data(seed + 1, n)}});
    seed += 2;
  }
  for (size_t n : {size_t{1}, size_t{4097}, size_t{1} << 20}) {
    out.push_back({kernel_id::dot, {}, {data(seed, n), data(seed + 1, n)}});
    out.push_back({kernel_id::nrm2, {}, {data(seed + 2, n)}});
    out.push_back({kernel_id::reduce_sum, {}, {data(seed + 3, n)}});
    out.push_back({kernel_id::inclusive_scan, {}, {data(seed + 4, n)}});
    seed += 5;
  }
  out.push_back({kernel_id::nrm2, {}, {std::vector<float>(513, 0.0f)}});
  for (auto [m, n] :
       {std::pair<uint64_t, uint64_t>{1, 1}, {37, 1000}, {513, 257}}) {
    kernels::kernel_args a;
    a.m = m;
    a.n = n;
    out.push_back({kernel_id::gemv, a, {data(seed, m * n), data(seed + 1, n)}});
    seed += 2;
  }
  for (auto [m, n, k] : {std::tuple<uint64_t, uint64_t, uint64_t>{1, 1, 1},
                         {33, 65, 17},
                         {128, 96, 200}}) {
    kernels::kernel_args a;
    a.m = m;
    a.n = n;
    a.k = k;
    out.push_back(
        {kernel_id::gemm, a, {data(seed, m * k), data(seed + 1, k * n)}});
    seed += 2;
  }
  {
    // 1,000 rows of dimension 64, 3 queries, top 10.
    kernels::kernel_args a;
    a.m = 1000;
    a.n = 64;
    a.top_k = 10;
    out.push_back({kernel_id::topk_cosine,
                   a,
                   {data(seed, 1000 * 64), data(seed + 1, 3 * 64)}});
    seed += 2;
  }
  {
    // Ties: every row appears twice; top_k == m returns the whole ranking.
    kernels::kernel_args a;
    a.m = 40;
    a.n = 7;
    a.top_k = 40;
    auto half = data(seed, 20 * 7);
    std::vector<float> rows = half;
    rows.insert(rows.end(), half.begin(), half.end());
    out.push_back({kernel_id::topk_cosine, a, {rows, data(seed + 1, 2 * 7)}});
  }
  return out;
}

} // namespace

TEST_CASE("every backend computes every kernel like the reference",
          "[devices][conformance]") {
  auto f = make_fleet();
  auto cases = golden_cases();
  for (auto& b : f.run) {
    test::completions done{*b.dev};
    uint64_t ticket = 0;
    for (auto& c : cases) {
      std::vector<std::span<const float>> views(c.inputs.begin(),
                                                c.inputs.end());
      REQUIRE(kernels::validate(c.id, c.args, views).empty());
      INFO(b.label << ": " << kernels::name(c.id) << " with input of "
                   << views[0].size() << " elements");
      auto res = done.run(++ticket, c.id, c.args, views);
      REQUIRE(res);
      auto want = kernels::run_reference(c.id, c.args, views);
      CHECK(kernels::compare(c.id, c.args, views, res->output, want) == "");
      CHECK(res->device_time.count() >= 0);
    }
  }
}

TEST_CASE("every backend refuses memory it does not have and stays usable",
          "[devices][conformance]") {
  auto f = make_fleet();
  for (auto& b : f.run) {
    INFO(b.label);
    auto* mem = b.dev->memory();
    if (b.dev->info().kind == device_kind::cpu) {
      // CPU workers use host memory: no pool, nothing to refuse.
      CHECK(mem == nullptr);
      continue;
    }
    REQUIRE(mem != nullptr);
    memory::owner_tag who{"test", 1, "probe"};
    auto big = mem->allocate(b.dev->info().memory_bytes + 1,
                             memory::stream_ref{0}, who);
    REQUIRE_FALSE(big);
    CHECK(code_of(big.error()) == errc::out_of_memory);
    CHECK_THAT(describe(big.error()), Catch::Contains("bytes requested"));
    CHECK_FALSE(b.dev->health());
    auto small = mem->allocate(1024, memory::stream_ref{0}, who);
    REQUIRE(small);
    REQUIRE_FALSE(mem->deallocate(*small, 1024, memory::stream_ref{0}));
    CHECK(mem->snapshot().refused["out_of_memory"] >= 1);
    test::completions done{*b.dev};
    auto x = data(7, 100);
    std::vector<std::span<const float>> in{x};
    auto res = done.run(1, kernel_id::reduce_sum, {}, in);
    REQUIRE(res);
    CHECK(res->output.values.size() == 1);
  }
}

TEST_CASE("every backend completes many launches in flight exactly once",
          "[devices][conformance]") {
  auto f = make_fleet();
  constexpr int n = 64;
  std::vector<std::vector<float>> xs;
  for (int i = 0; i < n; ++i)
    xs.push_back(data(100 + i, 1000 + 37 * i));
  for (auto& b : f.run) {
    INFO(b.label);
    test::completions done{*b.dev};
    std::map<uint64_t, kernels::kernel_output> outputs;
    std::vector<uint64_t> pending;
    for (int i = 0; i < n; ++i) {
      std::vector<std::span<const float>> in{xs[i]};
      auto id = i % 2 == 0 ? kernel_id::reduce_sum : kernel_id::inclusive_scan;
      auto res = b.dev->launch(b.dev->pick_stream(0), i, id, {}, in,
                               {"test", uint64_t(i), "sum"});
      REQUIRE(res);
      if (res->pending)
        pending.push_back(i);
      else
        outputs[i] = std::move(res->output);
    }
    // Synchronous devices held every launch's memory until now.
    if (auto* mem = b.dev->memory(); mem && !b.dev->asynchronous())
      CHECK(mem->snapshot().live_allocations == uint64_t{n});
    for (int i = 0; i < n; ++i)
      b.dev->finish(uint64_t(i));
    for (auto t : pending) {
      REQUIRE(done.wait(t));
      auto res = b.dev->collect(t);
      REQUIRE(res);
      outputs[t] = std::move(res->output);
    }
    REQUIRE(outputs.size() == size_t{n});
    for (int i = 0; i < n; ++i) {
      std::vector<std::span<const float>> in{xs[i]};
      auto id = i % 2 == 0 ? kernel_id::reduce_sum : kernel_id::inclusive_scan;
      auto want = kernels::run_reference(id, {}, in);
      CHECK(kernels::compare(id, {}, in, outputs[i], want) == "");
      CHECK(done.count(i) == (b.dev->asynchronous() ? 1 : 0));
    }
    if (auto* g = dynamic_cast<gpu::gpu_device*>(b.dev.get()))
      CHECK(g->inflight() == 0);
    if (auto* mem = b.dev->memory()) {
      // Every block went back to the pool.
      CHECK(mem->snapshot().live_allocations == 0);
      CHECK(mem->snapshot().leak_report == "");
    }
  }
}

TEST_CASE("every backend's device actor reports each launch once",
          "[devices][conformance]") {
  auto f = make_fleet();
  caf::actor_system_config base;
  system_config cfg;
  caf::actor_system sys{cfg};
  for (auto& b : f.run) {
    INFO(b.label);
    caf::scoped_actor self{sys};
    auto listener = caf::actor_cast<actors::device_listener>(self);
    actors::device_actor_config dcfg;
    dcfg.index = 3;
    auto act = b.dev->asynchronous()
                   ? self->spawn<caf::detached>(actors::device_impl, b.dev,
                                                listener, dcfg)
                   : self->spawn(actors::device_impl, b.dev, listener, dcfg);
    std::vector<run_request> batch;
    constexpr uint64_t n = 20;
    for (uint64_t t = 1; t <= n; ++t) {
      run_request req;
      req.ticket = t;
      req.item.id = t;
      req.item.kernel = kernel_id::dot;
      req.item.inputs.emplace_back(data(t, 500 + t));
      req.item.inputs.emplace_back(data(t + 99, 500 + t));
      batch.push_back(std::move(req));
    }
    auto items = batch;
    self->send(act, run_atom::value, std::move(batch));
    std::map<uint64_t, int> seen;
    size_t got = 0;
    bool timed_out = false;
    while (got < n && !timed_out)
      self->receive(
          [&](done_atom, uint32_t index, std::vector<work_done>& done) {
            CHECK(index == 3);
            for (auto& d : done) {
              ++seen[d.id];
              ++got;
              auto& item = items.at(d.id - 1).item;
              auto views = item.views();
              auto want = kernels::run_reference(item.kernel, {}, views);
              CHECK(kernels::compare(item.kernel, {}, views, d.output, want) ==
                    "");
            }
          },
          [&](failed_atom, uint32_t, uint64_t ticket, caf::error& err) {
            FAIL("launch " << ticket << " failed: " << describe(err));
          },
          caf::after(std::chrono::seconds(20)) >> [&] { timed_out = true; });
    CHECK_FALSE(timed_out);
    CHECK(seen.size() == n);
    for (auto& [t, c] : seen)
      CHECK(c == 1);
    self->send_exit(act, caf::exit_reason::user_shutdown);
    self->wait_for(act);
  }
}

namespace {

// A chain as the device actor builds it from a work item.
std::vector<stage_view> chain_of(const work_item& item) {
  std::vector<stage_view> chain;
  auto views = item.views();
  chain.push_back({item.kernel, item.args, {views.begin(), views.end()}, -1});
  for (auto& st : item.then)
    chain.push_back(
        {st.kernel, st.args, stage_views(st, {}), int32_t(st.input_slot)});
  return chain;
}

std::vector<work_item> chain_items() {
  std::vector<work_item> out;
  {
    // axpy -> inclusive_scan -> reduce_sum
    work_item item;
    item.kernel = kernel_id::axpy;
    item.args.alpha = 1.5f;
    item.inputs.emplace_back(data(501, 70000));
    item.inputs.emplace_back(data(502, 70000));
    item.then.push_back({kernel_id::inclusive_scan, {}, {}, 0});
    item.then.push_back({kernel_id::reduce_sum, {}, {}, 0});
    out.push_back(std::move(item));
  }
  {
    // gemm (64x32 * 32x48) -> gemv with the product as A -> nrm2
    work_item item;
    item.kernel = kernel_id::gemm;
    item.args.m = 64;
    item.args.n = 48;
    item.args.k = 32;
    item.inputs.emplace_back(data(503, 64 * 32));
    item.inputs.emplace_back(data(504, 32 * 48));
    kernels::kernel_args gemv;
    gemv.m = 64;
    gemv.n = 48;
    item.then.push_back(
        {kernel_id::gemv, gemv, {host_buffer{data(505, 48)}}, 0});
    item.then.push_back({kernel_id::nrm2, {}, {}, 0});
    out.push_back(std::move(item));
  }
  {
    // gemv -> dot with the result as y (slot 1)
    work_item item;
    item.kernel = kernel_id::gemv;
    item.args.m = 300;
    item.args.n = 20;
    item.inputs.emplace_back(data(506, 300 * 20));
    item.inputs.emplace_back(data(507, 20));
    item.then.push_back({kernel_id::dot, {}, {host_buffer{data(508, 300)}}, 1});
    out.push_back(std::move(item));
  }
  {
    // gemm -> topk_cosine with the product as the rows
    work_item item;
    item.kernel = kernel_id::gemm;
    item.args.m = 200;
    item.args.n = 16;
    item.args.k = 8;
    item.inputs.emplace_back(data(509, 200 * 8));
    item.inputs.emplace_back(data(510, 8 * 16));
    kernels::kernel_args topk;
    topk.m = 200;
    topk.n = 16;
    topk.top_k = 5;
    item.then.push_back(
        {kernel_id::topk_cosine, topk, {host_buffer{data(511, 2 * 16)}}, 0});
    out.push_back(std::move(item));
  }
  return out;
}

} // namespace

TEST_CASE("every backend runs chains whose stages feed each other",
          "[devices][conformance]") {
  auto f = make_fleet();
  auto items = chain_items();
  for (auto& item : items)
    REQUIRE(validate_item(item) == "");
  for (auto& b : f.run) {
    test::completions done{*b.dev};
    uint64_t ticket = 1000;
    for (auto& item : items) {
      INFO(b.label << ": chain starting with " << kernels::name(item.kernel));
      auto chain = chain_of(item);
      auto res = b.dev->launch_chain(b.dev->pick_stream(0), ++ticket, chain,
                                     {"test", ticket, "chain"});
      REQUIRE(res);
      if (res->pending) {
        REQUIRE(done.wait(ticket));
        res = b.dev->collect(ticket);
        REQUIRE(res);
      } else {
        b.dev->finish(ticket);
      }
      CHECK(check_result(item, res->output) == "");
    }
  }
}

TEST_CASE("every backend with memory keeps objects and reads them in place",
          "[devices][conformance][objects]") {
  auto f = make_fleet();
  auto x = data(71, 65537);
  auto y = data(72, 65537);
  kernels::kernel_args args;
  args.alpha = 0.5f;
  for (auto& b : f.run) {
    INFO(b.label);
    auto& dev = *b.dev;
    memory::owner_tag owner{"tenant-a", 0, "object 1"};
    if (dev.memory() == nullptr) {
      // CPU workers read objects from their host copies.
      auto err = dev.store_object(1, kernels::typed_view{x}, owner);
      CHECK(code_of(err) == errc::invalid_arguments);
      CHECK(dev.object_count() == 0);
      continue;
    }
    auto used_before = dev.memory()->snapshot().used;
    REQUIRE(!dev.store_object(1, kernels::typed_view{x}, owner));
    CHECK(dev.object_count() == 1);
    CHECK(dev.object_bytes() ==
          memory::align_up(x.size() * sizeof(float), memory::block_alignment));
    CHECK(dev.memory()->snapshot().used_by_tenant["tenant-a"] >=
          x.size() * sizeof(float));
    // The same id twice is refused; the first copy stays.
    CHECK(code_of(dev.store_object(1, kernels::typed_view{y}, owner)) ==
          errc::invalid_arguments);
    auto* obj = dev.find_object(1);
    REQUIRE(obj != nullptr);
    CHECK(obj->data.size == x.size());
    CHECK(obj->tenant == "tenant-a");
    auto back = dev.read_object(1);
    REQUIRE(back);
    CHECK(back->values == x);
    // A launch reading the object in place agrees with one given the same
    // values from the host.
    test::completions done{dev};
    auto run = [&](uint64_t ticket, stage_view st) {
      auto res = dev.launch_chain(dev.pick_stream(0), ticket, {&st, 1},
                                  {"tenant-a", ticket, "axpy"});
      REQUIRE(res);
      if (res->pending) {
        REQUIRE(done.wait(ticket));
        res = dev.collect(ticket);
        REQUIRE(res);
      } else {
        dev.finish(ticket);
      }
      return res->output;
    };
    auto in_place =
        run(501, stage_view{kernel_id::axpy, args, {obj->data, y}, -1, 1});
    auto from_host =
        run(502, stage_view{kernel_id::axpy,
                            args,
                            {kernels::typed_view{x}, kernels::typed_view{y}},
                            -1});
    CHECK(in_place.values == from_host.values);
    // The object is unchanged by the launches that read it.
    CHECK(dev.read_object(1)->values == x);
    CHECK(dev.drop_object(1));
    CHECK_FALSE(dev.drop_object(1));
    CHECK(dev.find_object(1) == nullptr);
    CHECK(code_of(dev.read_object(1).error()) == errc::invalid_arguments);
    CHECK(dev.object_count() == 0);
    CHECK(dev.object_bytes() == 0);
    CHECK(dev.memory()->snapshot().used == used_before);
  }
}
