// libFuzzer target: the device-memory pool. The input is decoded into
// operations (allocate, free, resize, reserve, trim, defragment, maintain,
// reset) on a pool over real host slabs, as a simulated GPU has; after each
// one the pool's invariants must hold, every block must keep what was
// written into it and every new block must read zero. Under ASan the pool
// poisons what it has not handed out, so a block that overlaps another or
// runs past its slab is caught as well.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "devices/memory/asan_poison.hpp"
#include "devices/memory/host_slab_resource.hpp"
#include "devices/memory/pool_resource.hpp"
#include "messages/errc.hpp"

using namespace cohort::devices::memory;

namespace {

class reader {
public:
  reader(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool done() const { return at_ >= size_; }
  uint8_t byte() { return at_ < size_ ? data_[at_++] : 0; }
  uint32_t bytes(int n) {
    uint32_t x = 0;
    for (int i = 0; i < n; ++i)
      x = (x << 8) | byte();
    return x;
  }

private:
  const uint8_t* data_;
  size_t size_;
  size_t at_ = 0;
};

struct block {
  unsigned char* p;
  size_t bytes;
  unsigned char fill;
};

[[noreturn]] void fail(const char* what, const std::string& detail = "") {
  std::fprintf(stderr, "pool fuzzer: %s %s\n", what, detail.c_str());
  __builtin_trap();
}

// memcmp against zeros, not a loop: the fuzzer instruments every comparison
// the target makes, and blocks are megabytes.
bool all_zero(const unsigned char* p, size_t n) {
  static const std::vector<unsigned char> zeros(64 * 1024, 0);
  for (size_t at = 0; at < n; at += zeros.size())
    if (std::memcmp(p + at, zeros.data(), std::min(zeros.size(), n - at)) != 0)
      return false;
  return true;
}

// A block keeps its fill at its ends and middle.
void check_fill(const block& b) {
  if (b.p[0] != b.fill || b.p[b.bytes - 1] != b.fill ||
      b.p[b.bytes / 2] != b.fill)
    fail("a block lost what was written into it");
}

size_t size_of(reader& in) {
  switch (in.byte() % 4) {
  case 0:
    return 1 + in.bytes(1) * 4; // tiny: the 256 B classes
  case 1:
    return 1 + in.bytes(2); // up to 64 KiB
  case 2:
    return 1 + (in.bytes(3) & 0x3ffff); // up to 256 KiB: classes and heap
  default:
    return 1 + (in.bytes(3) & 0x1fffff); // up to 2 MiB: whole slabs
  }
}

// Under ASan: some byte of the range is poisoned (a block handed out must be
// wholly usable). Without ASan: never.
bool asan_region_poisoned(const void* p, size_t n) {
#ifdef COHORT_ASAN
  return __asan_region_is_poisoned(const_cast<void*>(p), n) != nullptr;
#else
  (void)p;
  (void)n;
  return false;
#endif
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  reader in{data, size};
  constexpr uint64_t MiB = uint64_t{1} << 20;
  host_slab_resource upstream{"fuzz", 16 * MiB};
  host_stream_ordering streams{4, true};
  pool_options opts;
  opts.slab_bytes = (1 + in.byte() % 4) * MiB;
  opts.class_cache_bytes = (in.byte() % 4) * MiB / 2;
  opts.release_threshold = (in.byte() % 4) * 2 * MiB;
  opts.small_limit = in.byte() % 2 == 0 ? 256 * 1024 : 64 * 1024;
  if (validate(opts))
    fail("options rejected");
  pool_resource pool{upstream, streams, opts};
  std::vector<block> live;
  uint64_t requested = 0;
  const char* tenants[] = {"a", "b", "c"};
  auto allocate = [&](size_t bytes, uint32_t stream,
                      const char* tenant) -> block* {
    auto p = pool.allocate(bytes, stream_ref{stream}, owner_tag{tenant, 0, ""});
    if (!p) {
      if (cohort::code_of(p.error()) != cohort::errc::out_of_memory)
        fail("an allocation failed with", cohort::describe(p.error()));
      return nullptr;
    }
    auto* b = static_cast<unsigned char*>(*p);
    if (reinterpret_cast<uintptr_t>(b) % block_alignment != 0)
      fail("a block is not aligned");
    if (!all_zero(b, bytes))
      fail("a new block does not read zero");
    if (asan_region_poisoned(b, bytes))
      fail("a new block is poisoned");
    // Its ends and middle (what check_fill reads): writing megabytes per
    // operation would starve the search.
    auto fill = static_cast<unsigned char>(1 + live.size() % 250);
    std::memset(b, fill, std::min<size_t>(bytes, 64));
    std::memset(b + bytes - std::min<size_t>(bytes, 64), fill,
                std::min<size_t>(bytes, 64));
    b[bytes / 2] = fill;
    live.push_back({b, bytes, fill});
    requested += bytes;
    return &live.back();
  };
  auto release = [&](size_t i, uint32_t stream) {
    auto b = live[i];
    check_fill(b);
    if (auto err = pool.deallocate(b.p, b.bytes, stream_ref{stream}))
      fail("a free failed with", cohort::describe(err));
    live[i] = live.back();
    live.pop_back();
    requested -= b.bytes;
  };
  for (int ops = 0; !in.done() && ops < 128; ++ops) {
    auto op = in.byte();
    auto stream = uint32_t(in.byte() % 4);
    switch (op % 10) {
    case 0:
    case 1:
    case 2:
      allocate(size_of(in), stream, tenants[op / 10 % 3]);
      break;
    case 3:
    case 4:
      if (!live.empty())
        release(in.bytes(2) % live.size(), stream);
      break;
    case 5: {
      // Resize: a new block, the old contents copied over, the old freed.
      if (live.empty())
        break;
      auto i = in.bytes(2) % live.size();
      auto old = live[i];
      auto want = size_of(in);
      if (auto* b = allocate(want, stream, "a")) {
        std::memcpy(b->p, old.p, std::min(want, old.bytes));
        auto ends = std::min<size_t>(want, 64);
        std::memset(b->p, b->fill, ends);
        std::memset(b->p + want - ends, b->fill, ends);
        b->p[want / 2] = b->fill;
        release(i, stream);
      }
      break;
    }
    case 6:
      (void)pool.reserve(tenants[in.byte() % 3], uint64_t(in.bytes(2)) << 10);
      break;
    case 7:
      pool.trim();
      break;
    case 8:
      if (op & 0x80)
        pool.defragment();
      else
        pool.maintain();
      break;
    case 9:
      if ((op & 0xf0) == 0x90) {
        // Everything forgotten and given back.
        if (pool.reset(false) != live.size())
          fail("a reset miscounted the live blocks");
        live.clear();
        requested = 0;
      }
      break;
    }
    if (auto bad = pool.check_invariants(); !bad.empty())
      fail("invariant broken:", bad);
    auto st = pool.stats();
    if (st.live_blocks != live.size() || st.requested_bytes != requested ||
        st.held_bytes != upstream.used())
      fail("the pool's counters disagree with what it handed out");
  }
  for (auto& b : live)
    check_fill(b);
  while (!live.empty())
    release(live.size() - 1, 0);
  pool.defragment();
  auto st = pool.stats();
  if (st.live_bytes != 0 || st.cached_bytes != 0)
    fail("memory left over after every block was freed");
  return 0;
}
