// Cohort's side of the latency run: the pool alone over address space (its
// bookkeeping), the device's whole stack over address space (what the
// adaptors add), the pool over host memory with zero-on-free, and the pool
// over a GPU's memory through gpu::api (no vendor header here).
#include <vector>

#include "bench/pool/pool.hpp"
#include "bench/pool/replay.hpp"
#include "devices/gpu/api.hpp"
#include "devices/gpu/gpu_memory_resource.hpp"
#include "devices/gpu/gpu_stream_ordering.hpp"
#include "devices/memory/device_memory.hpp"
#include "devices/memory/host_slab_resource.hpp"
#include "devices/memory/pool_resource.hpp"
#include "devices/memory/stream_ordering.hpp"
#include "devices/memory/virtual_resource.hpp"
#include "messages/errc.hpp"

namespace cohort::bench {

namespace {

using namespace devices::memory;

const owner_tag bench_owner{"bench", 1, "bench/pool"};

/// Replays `w` on `res` (a pool or the device stack), stream 0, and keeps
/// the first error's description.
template <class Resource>
bool replay_on(const workload& w, const replay_checks& checks, Resource& res,
               latency_figures& out) {
  std::string why;
  auto ok = replay(
      w, checks,
      [&](size_t bytes) -> void* {
        auto p = res.allocate(bytes, stream_ref{0}, bench_owner);
        if (!p) {
          why = describe(p.error());
          return nullptr;
        }
        return *p;
      },
      [&](void* p, size_t bytes) {
        if (auto err = res.deallocate(p, bytes, stream_ref{0})) {
          why = describe(err);
          return false;
        }
        return true;
      },
      out);
  if (!ok && !why.empty())
    out.error += ": " + why;
  return ok;
}

/// The pool must be empty and whole after a replay.
void check_pool(const pool_resource& pool, latency_figures& out) {
  if (!out.error.empty())
    return;
  if (auto bad = pool.check_invariants(); !bad.empty())
    out.error = "pool invariants: " + bad;
  else if (auto s = pool.stats(); s.live_bytes != 0 || s.live_blocks != 0)
    out.error = "pool: " + std::to_string(s.live_blocks) +
                " blocks still live after the trace";
}

constexpr replay_checks address_space{block_alignment, false, false};

} // namespace

latency_figures run_pool_virtual(const workload& w, uint64_t capacity) {
  latency_figures out;
  out.system = "cohort pool (virtual memory)";
  virtual_resource upstream{"bench-virtual", capacity};
  // Zero fills of address space are no-ops: the pool still calls them.
  host_stream_ordering streams{1, false};
  pool_resource pool{upstream, streams, sized_pool_options(capacity)};
  if (replay_on(w, address_space, pool, out))
    check_pool(pool, out);
  return out;
}

latency_figures run_device_stack_virtual(const workload& w, uint64_t capacity) {
  latency_figures out;
  out.system = "cohort device stack (virtual)";
  memory_options opts;
  opts.pool = sized_pool_options(capacity);
  auto mem = device_memory::make(
      "bench-stack", true, capacity,
      std::make_unique<virtual_resource>("bench-stack", capacity),
      std::make_unique<host_stream_ordering>(1, false), std::move(opts));
  if (!mem) {
    out.error = describe(mem.error());
    return out;
  }
  auto& m = **mem;
  if (!replay_on(w, address_space, m, out))
    return out;
  check_pool(m.pool(), out);
  auto c = m.statistics().counts();
  auto passes = (1 + 2 * uint64_t(w.repeat)) * w.pairs;
  if (out.error.empty() &&
      (m.tracking().live_count() != 0 || c.current_bytes != 0 ||
       c.allocations != passes || c.deallocations != passes))
    out.error = "device stack: counters do not match the trace (" +
                std::to_string(c.allocations) + " allocations, " +
                std::to_string(c.deallocations) + " deallocations, " +
                std::to_string(m.tracking().live_count()) + " tracked live)";
  return out;
}

latency_figures run_pool_host(const workload& w, uint64_t capacity) {
  latency_figures out;
  out.system = "cohort pool (host memory, zero-on-free)";
  host_slab_resource upstream{"bench-host", capacity};
  host_stream_ordering streams{1, true};
  auto opts = sized_pool_options(capacity);
  opts.zero_on_free = true;
  pool_resource pool{upstream, streams, opts};
  if (replay_on(w, {block_alignment, true, true}, pool, out))
    check_pool(pool, out);
  if (out.error.empty() && streams.zeroed_bytes() == 0)
    out.error = "zero-on-free zeroed nothing";
  return out;
}

latency_figures run_pool_gpu(const workload& w,
                             std::shared_ptr<devices::gpu::api> rt,
                             bool zero_on_free) {
  namespace gpu = devices::gpu;
  latency_figures out;
  out.system = std::string{"cohort pool ("} + rt->vendor() +
               (zero_on_free ? ", zero-on-free)" : ")");
  auto fail = [&](gpu::result rc, const char* what) {
    out.error = std::string{what} + ": " + rt->describe(rc.raw);
    return out;
  };
  gpu::properties props;
  if (auto rc = rt->set_device(0); rc.failed())
    return fail(rc, "selecting GPU 0");
  if (auto rc = rt->get_properties(0, props); rc.failed())
    return fail(rc, "reading GPU 0's properties");
  std::vector<gpu::stream_t> streams(1);
  if (auto rc = rt->stream_create(streams[0]); rc.failed())
    return fail(rc, "creating a stream");
  {
    gpu::gpu_memory_resource upstream{rt, 0, "gpu0"};
    gpu::gpu_stream_ordering ordering{rt, 0, "gpu0", &streams, 1};
    auto opts = sized_pool_options(props.memory_bytes);
    opts.zero_on_free = zero_on_free;
    {
      pool_resource pool{upstream, ordering, opts};
      if (replay_on(w, address_space, pool, out))
        check_pool(pool, out);
      // The zero fills ran on the device: their errors show here.
      if (auto rc = rt->stream_synchronize(streams[0]);
          rc.failed() && out.error.empty())
        fail(rc, "synchronizing the stream");
    }
    ordering.destroy_events();
    if (out.error.empty() && upstream.used() != 0)
      out.error = "the pool kept " + std::to_string(upstream.used()) +
                  " bytes of slabs after it was destroyed";
  }
  rt->stream_destroy(streams[0]);
  return out;
}

} // namespace cohort::bench
