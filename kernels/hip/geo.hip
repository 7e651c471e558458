// The geo kernels for HIP: built into a code object (gfx90a, gfx908) that
// the core carries (kernels/geo.cpp).
#include "kernels/gpu/geo_entry.hpp"
