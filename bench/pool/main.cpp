// bench/pool: host time of allocate + free in Cohort's device-memory pool
// against the system allocator and the CUDA allocators (RMM's
// random_allocations workload), and the pool's fragmentation at 80%
// occupancy.
//
//   latency        one seeded trace of allocations (sizes log-uniform in
//                  [256 B, 16 MiB]) and frees of random live blocks, live
//                  bytes under a cap, replayed by every competitor.
//   fragmentation  a 1 GiB pool over address space filled to 80%, then
//                  churned; its fragmentation, overhead and refusals.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/pool/pool.hpp"
#include "bench/pool/replay.hpp"
#include "devices/gpu/api.hpp"
#include "devices/gpu/discover.hpp"
#include "devices/memory/pool_resource.hpp"

using namespace cohort;
using namespace cohort::bench;

namespace {

constexpr uint64_t mib = uint64_t{1} << 20;

const char* usage =
    "usage: bench_pool [--small] [--ops N] [--slow-ops N] [--repeat N]\n"
    "                  [--seed S]"
    " [--min BYTES] [--max BYTES] [--uniform] [--cap-mib N]\n"
    "                  [--capacity-mib N] [--occupancy F] [--steps N]\n"
    "                  [--slab-mib N,N,...] [--maintain-every N] [--help]\n"
    "  BYTES takes a K, M or G suffix (powers of 1024)\n";

/// A count or size: digits, optionally followed by K, M or G. False when
/// `s` is not one.
bool parse_count(const char* s, uint64_t& out, bool suffixes = false) {
  if (s == nullptr || *s < '0' || *s > '9')
    return false;
  errno = 0;
  char* end = nullptr;
  auto x = std::strtoull(s, &end, 10);
  if (errno != 0)
    return false;
  uint64_t scale = 1;
  if (suffixes && *end != '\0' && end[1] == '\0') {
    switch (*end) {
    case 'K':
    case 'k':
      scale = uint64_t{1} << 10;
      break;
    case 'M':
    case 'm':
      scale = uint64_t{1} << 20;
      break;
    case 'G':
    case 'g':
      scale = uint64_t{1} << 30;
      break;
    default:
      return false;
    }
    ++end;
  }
  if (*end != '\0' || x > UINT64_MAX / scale)
    return false;
  out = x * scale;
  return true;
}

bool parse_list(const std::string& list, std::vector<uint64_t>& out) {
  out.clear();
  for (size_t pos = 0; pos < list.size();) {
    auto comma = list.find(',', pos);
    auto item = list.substr(pos, comma - pos);
    uint64_t x = 0;
    if (!parse_count(item.c_str(), x) || x == 0)
      return false;
    out.push_back(x);
    pos = comma == std::string::npos ? list.size() : comma + 1;
  }
  return true;
}

std::string bytes_text(uint64_t b) {
  char buf[32];
  if (b >= mib && b % mib == 0)
    std::snprintf(buf, sizeof(buf), "%llu MiB", (unsigned long long)(b / mib));
  else if (b >= 1024 && b % 1024 == 0)
    std::snprintf(buf, sizeof(buf), "%llu KiB", (unsigned long long)(b / 1024));
  else
    std::snprintf(buf, sizeof(buf), "%llu B", (unsigned long long)b);
  return buf;
}

std::string mib_text(uint64_t b) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f MiB", double(b) / double(mib));
  return buf;
}

const char* this_allocator() {
#ifdef COHORT_JEMALLOC
  return "jemalloc";
#else
  return "glibc malloc";
#endif
}

constexpr const char* row_format = "%-42s %7llu %9.1f %7.2fx %9.1f %9.1f "
                                   "%9.1f %9.1f\n";

/// Prints a group of rows; the first row that ran is the peer the others
/// are set against. Returns the number of rows with errors.
int print_group(const std::vector<latency_figures>& rows) {
  int bad = 0;
  double peer = 0;
  for (auto& r : rows) {
    if (!r.skipped.empty()) {
      std::printf("%-42s skipped: %s\n", r.system.c_str(), r.skipped.c_str());
      continue;
    }
    if (!r.error.empty()) {
      std::printf("%-42s failed: %s\n", r.system.c_str(), r.error.c_str());
      ++bad;
      continue;
    }
    if (peer == 0)
      peer = r.mean_ns;
    std::printf(row_format, r.system.c_str(), (unsigned long long)r.pairs,
                r.mean_ns, r.mean_ns / peer, r.p50_ns, r.p99_ns, r.allocate_ns,
                r.deallocate_ns);
  }
  std::fflush(stdout);
  return bad;
}

/// Runs rows in the order given and moves the peer (`peer_index`) first.
std::vector<latency_figures> peer_first(std::vector<latency_figures> rows,
                                        size_t peer_index) {
  auto peer = std::move(rows[peer_index]);
  rows.erase(rows.begin() + ptrdiff_t(peer_index));
  rows.insert(rows.begin(), std::move(peer));
  return rows;
}

/// Why there is no CUDA GPU to measure, or empty when GPU 0 is there.
std::string cuda_absent(const std::shared_ptr<devices::gpu::api>& rt) {
  if (!rt)
    return "CUDA backend not built (toolchain missing)";
  int n = 0;
  if (auto rc = rt->device_count(n); rc.failed())
    return "no CUDA device: " + rt->describe(rc.raw);
  if (n == 0)
    return "no CUDA device";
  return {};
}

std::string pct(double x) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f%%", 100 * x);
  return buf;
}

} // namespace

int main(int argc, char** argv) {
  bool small = false;
  for (int i = 1; i < argc; ++i)
    small |= std::string{argv[i]} == "--small";
  uint64_t ops = small ? 20000 : 200000;
  uint64_t slow_ops = 0; // 0: ops / 100
  uint64_t repeat = small ? 2 : 5;
  uint64_t seed = 42;
  size_distribution sizes;
  uint64_t cap_mib = 1024;
  uint64_t capacity_mib = 1024;
  double occupancy = 0.8;
  uint64_t steps = small ? 10000 : 100000;
  std::vector<uint64_t> slab_mib{2, 64, 256, 1024};
  uint64_t maintain_every = 1000;
  for (int i = 1; i < argc; ++i) {
    auto arg = std::string{argv[i]};
    auto next = [&]() -> const char* { return i + 1 < argc ? argv[++i] : ""; };
    bool ok = true;
    if (arg == "--small")
      continue;
    if (arg == "--help" || arg == "-h") {
      std::printf("%s", usage);
      return 0;
    }
    if (arg == "--ops")
      ok = parse_count(next(), ops) && ops > 0;
    else if (arg == "--slow-ops")
      ok = parse_count(next(), slow_ops) && slow_ops > 0;
    else if (arg == "--repeat")
      ok = parse_count(next(), repeat) && repeat > 0 && repeat < 1000;
    else if (arg == "--seed")
      ok = parse_count(next(), seed);
    else if (arg == "--min")
      ok = parse_count(next(), sizes.min_bytes, true) && sizes.min_bytes > 0;
    else if (arg == "--max")
      ok = parse_count(next(), sizes.max_bytes, true);
    else if (arg == "--uniform")
      sizes.uniform = true;
    else if (arg == "--cap-mib")
      ok = parse_count(next(), cap_mib) && cap_mib > 0 && cap_mib < (1u << 20);
    else if (arg == "--capacity-mib")
      ok = parse_count(next(), capacity_mib) && capacity_mib > 0 &&
           capacity_mib < (1u << 20);
    else if (arg == "--occupancy") {
      char* end = nullptr;
      auto s = next();
      occupancy = std::strtod(s, &end);
      ok = end != s && *end == '\0' && occupancy > 0 && occupancy < 1;
    } else if (arg == "--steps")
      ok = parse_count(next(), steps);
    else if (arg == "--slab-mib")
      ok = parse_list(next(), slab_mib);
    else if (arg == "--maintain-every")
      ok = parse_count(next(), maintain_every);
    else
      ok = false;
    if (!ok) {
      std::fprintf(stderr, "bench_pool: bad flag or value: %s\n%s", arg.c_str(),
                   usage);
      return 2;
    }
  }
  auto cap = cap_mib * mib;
  auto capacity = capacity_mib * mib;
  if (sizes.min_bytes > sizes.max_bytes || sizes.max_bytes > cap ||
      sizes.max_bytes > capacity) {
    std::fprintf(stderr,
                 "bench_pool: need --min <= --max <= --cap-mib and "
                 "--capacity-mib\n%s",
                 usage);
    return 2;
  }
  if (slow_ops == 0)
    slow_ops = std::max<uint64_t>(ops / 100, 100);

  // Latency: the device the pools sit on holds 4x the cap, so that every
  // allocation of the trace fits whatever the pool's rounding and
  // fragmentation.
  auto device_capacity = 4 * cap;
  auto full = make_workload({ops, sizes, cap, seed, uint32_t(repeat)});
  auto slow = make_workload({slow_ops, sizes, cap, seed, uint32_t(repeat)});
  auto pool_opts = devices::memory::sized_pool_options(device_capacity);
  std::printf(
      "pool: allocate + free, host time (RMM random_allocations workload)\n"
      "  trace: sizes %s in [%s, %s], live <= %s (reached %s in at most %u "
      "blocks), seed %llu\n"
      "  cohort pools: sized_pool_options(%s): slabs of %s, class caches "
      "%s; one stream\n"
      "  system malloc/free is %s (this binary's allocator)\n"
      "  each row: a checking pass (warm-up), then %llu passes of each "
      "kind, the best kept:\n"
      "  ns/pair: mean of allocate + free over a pass without per-call "
      "clock reads (fastest);\n"
      "  p50/p99 per pair (a block's allocate plus its free), alloc and "
      "free means: the pass\n"
      "  timing every call with the lowest p50 (each timing carries ~%.0f ns "
      "of clock reads);\n"
      "  x peer: ns/pair against the first row of its group (below 1 is "
      "faster)\n\n",
      sizes.uniform ? "uniform" : "log-uniform",
      bytes_text(sizes.min_bytes).c_str(), bytes_text(sizes.max_bytes).c_str(),
      bytes_text(cap).c_str(), mib_text(full.peak_live_bytes).c_str(),
      full.slots, (unsigned long long)seed, bytes_text(device_capacity).c_str(),
      bytes_text(pool_opts.slab_bytes).c_str(),
      bytes_text(pool_opts.class_cache_bytes).c_str(), this_allocator(),
      (unsigned long long)repeat, clock_read_ns());
  std::printf("%-42s %7s %9s %8s %9s %9s %9s %9s\n", "system", "pairs",
              "ns/pair", "x peer", "p50 ns", "p99 ns", "alloc ns", "free ns");
  int bad = 0;
  // Host bookkeeping: the whole trace.
  {
    std::vector<latency_figures> rows;
    rows.push_back(run_pool_virtual(full, device_capacity));
    rows.push_back(run_device_stack_virtual(full, device_capacity));
    rows.push_back(run_system_malloc(full));
    bad += print_group(peer_first(std::move(rows), 2));
  }
  // Memory written: a shorter trace of the same distribution.
  {
    std::printf("\n");
    std::vector<latency_figures> rows;
    rows.push_back(run_pool_host(slow, device_capacity));
    rows.push_back(run_system_malloc(slow));
    bad += print_group(peer_first(std::move(rows), 1));
  }
  // GPU: the shorter trace, cudaMalloc the peer.
  {
    std::printf("\n");
    auto rt = devices::gpu::cuda_runtime();
    auto why = cuda_absent(rt);
    std::vector<latency_figures> rows;
    auto skipped = [&](const char* system) {
      latency_figures r;
      r.system = system;
      r.skipped = why;
      return r;
    };
#ifdef COHORT_WITH_CUDA
    if (why.empty()) {
      rows.push_back(run_cuda_malloc(slow));
      rows.push_back(run_cuda_malloc_async(slow));
    }
#endif
    if (why.empty()) {
      rows.push_back(run_pool_gpu(slow, rt, false));
      rows.push_back(run_pool_gpu(slow, rt, true));
    } else {
      rows.push_back(skipped("cudaMalloc/cudaFree"));
      rows.push_back(skipped("cudaMallocAsync/cudaFreeAsync"));
      rows.push_back(skipped("cohort pool (CUDA)"));
      rows.push_back(skipped("cohort pool (CUDA, zero-on-free)"));
    }
    bad += print_group(rows);
  }

  // Fragmentation at the occupancy.
  if (steps == 0) {
    std::printf("\nfragmentation: skipped (--steps 0)\n");
    return bad == 0 ? 0 : 1;
  }
  auto sized = devices::memory::sized_pool_options(capacity);
  std::printf(
      "\nfragmentation at %.0f%% occupancy: a pool of %s over address "
      "space,\n"
      "  sized_pool_options(%s) (slabs of %s, class caches %s, release "
      "threshold %s),\n"
      "  maintain() every %llu steps (0: never); filled to %.0f%% with the "
      "sizes above,\n"
      "  then %llu churn steps (free a random block, allocate until live is "
      "back at %.0f%%),\n"
      "  sampled after every step. frag: 1 - largest free / free; largest: "
      "the largest free\n"
      "  block (mean); overhead: 1 - live / held; "
      "rounding: 1 - requested / live;\n"
      "  slabs: most held; with room: refused although capacity - live >= "
      "the rounded request\n\n",
      100 * occupancy, bytes_text(capacity).c_str(),
      bytes_text(capacity).c_str(), bytes_text(sized.slab_bytes).c_str(),
      bytes_text(sized.class_cache_bytes).c_str(),
      bytes_text(sized.release_threshold).c_str(),
      (unsigned long long)maintain_every, 100 * occupancy,
      (unsigned long long)steps, 100 * occupancy);
  std::vector<fragmentation_figures> frags;
  {
    fragmentation_options fo;
    fo.capacity = capacity;
    fo.occupancy = occupancy;
    fo.steps = steps;
    fo.sizes = sizes;
    fo.seed = seed;
    fo.maintain_every = maintain_every;
    frags.push_back(run_fragmentation(fo));
    frags.back().config = "sized defaults";
    for (auto s : slab_mib) {
      fo.slab_bytes = s * mib;
      frags.push_back(run_fragmentation(fo));
      frags.back().config = "--slab-mib " + std::to_string(s);
    }
  }
  std::printf("%-16s %8s %5s %8s %9s %8s %9s %8s %7s %8s %8s %7s %7s\n",
              "config", "slab MiB", "slabs", "live/cap", "frag mean",
              "frag max", "largest", "ovh mean", "ovh max", "rounding", "tries",
              "refused", "w/ room");
  for (auto& f : frags) {
    if (!f.error.empty()) {
      std::printf("%-16s failed: %s\n", f.config.c_str(), f.error.c_str());
      ++bad;
      continue;
    }
    std::printf(
        "%-16s %8llu %5llu %8s %9s %8s %9s %8s %7s %8s %8llu %7llu "
        "%7llu\n",
        f.config.c_str(), (unsigned long long)(f.slab_bytes / mib),
        (unsigned long long)f.slabs_max, pct(f.occupancy_mean).c_str(),
        pct(f.fragmentation_mean).c_str(), pct(f.fragmentation_max).c_str(),
        mib_text(uint64_t(f.largest_free_mean)).c_str(),
        pct(f.overhead_mean).c_str(), pct(f.overhead_max).c_str(),
        pct(f.rounding_mean).c_str(), (unsigned long long)f.attempts,
        (unsigned long long)f.refused, (unsigned long long)f.refused_with_room);
  }
  // The target, "fragmentation under 10% at 80% occupancy", read three ways.
  auto verdict = [&](const char* metric, auto value) {
    std::string met, missed;
    for (auto& f : frags) {
      if (!f.error.empty())
        continue;
      auto& to = value(f) ? met : missed;
      to += (to.empty() ? "" : ", ") + f.config;
    }
    std::printf("  %-42s met by: %s\n  %-42s not by: %s\n", metric,
                met.empty() ? "none" : met.c_str(), "",
                missed.empty() ? "none" : missed.c_str());
  };
  std::printf("\ntarget \"fragmentation under 10%% at %.0f%% occupancy\":\n",
              100 * occupancy);
  verdict("frag (1 - largest free / free), mean < 10%",
          [](auto& f) { return f.fragmentation_mean < 0.10; });
  verdict("overhead (1 - live / held), mean < 10%",
          [](auto& f) { return f.overhead_mean < 0.10; });
  verdict("refused with room / tries < 10%",
          [](auto& f) { return f.refused_with_room * 10 < f.attempts; });
  return bad == 0 ? 0 : 1;
}
