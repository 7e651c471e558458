// The geo kernels for CUDA: built into a module image (a fatbin: sm_90
// code and compute_90 PTX) that the core carries (kernels/geo.cpp).
#include "kernels/gpu/geo_entry.hpp"
