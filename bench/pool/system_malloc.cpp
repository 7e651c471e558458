// The host peer of the latency run: std::malloc / std::free of this binary
// (jemalloc when meson found it, else glibc's), on the same trace.
#include <cstddef>
#include <cstdlib>

#include "bench/pool/pool.hpp"
#include "bench/pool/replay.hpp"

namespace cohort::bench {

latency_figures run_system_malloc(const workload& w) {
  latency_figures out;
  out.system = "system malloc/free";
  // malloc promises alignment for any object type, no more. No stamps: the
  // pages would have to be touched (two page faults per block), which is
  // not the allocator's bookkeeping, and the pool rows over address space
  // touch nothing either.
  replay_checks checks{alignof(std::max_align_t), false, false};
  if (!replay(
          w, checks, [](size_t bytes) { return std::malloc(bytes); },
          [](void* p, size_t) {
            std::free(p);
            return true;
          },
          out))
    out.error += ": std::malloc returned null";
  return out;
}

} // namespace cohort::bench
