// Writes one byte past a block of a simulated GPU's pool: under
// AddressSanitizer the process must die with a report (the pool poisons what it
// has not handed out); without it the write goes unnoticed and the program says
// so.
#include <cstdio>

#include "devices/memory/host_slab_resource.hpp"
#include "devices/memory/pool_resource.hpp"

using namespace cohort::devices::memory;

int main() {
  host_slab_resource upstream{"sim-overflow", uint64_t{64} << 20};
  host_stream_ordering streams{1, true};
  pool_resource pool{upstream, streams, pool_options{}};
  auto a = pool.allocate(1000, stream_ref{0}, owner_tag{"t", 1, "overflow"});
  auto b = pool.allocate(1000, stream_ref{0}, owner_tag{"t", 2, "overflow"});
  if (!a || !b) {
    std::puts("allocation failed");
    return 3;
  }
  auto* bytes = static_cast<volatile unsigned char*>(*a);
  bytes[1000] = 42; // one past the end
  std::puts("overflow not caught");
  return 0;
}
