// The real CUDA runtime on this machine: its errors sorted for the host
// logic, and what it says without a GPU. Built only with the CUDA backend
// (its header cannot share a translation unit with the other vendor's).
#include <catch2/catch.hpp>

#include "devices/cuda/cuda_api.hpp"
#include "devices/gpu/discover.hpp"
#include "devices/gpu/plugin.hpp"

using namespace cohort;
using namespace cohort::devices;
using gpu::status;

TEST_CASE("CUDA errors are sorted into what the host logic acts on",
          "[devices][gpu][cuda]") {
  CHECK(cuda::classify(cudaSuccess) == status::ok);
  CHECK(cuda::classify(cudaErrorMemoryAllocation) == status::out_of_memory);
  CHECK(cuda::classify(cudaErrorIllegalAddress) == status::illegal_address);
  CHECK(cuda::classify(cudaErrorLaunchFailure) == status::launch_failure);
  CHECK(cuda::classify(cudaErrorECCUncorrectable) == status::ecc_uncorrectable);
  CHECK(cuda::classify(cudaErrorInsufficientDriver) == status::driver_missing);
  CHECK(cuda::classify(cudaErrorNoDevice) == status::no_device);
  CHECK(cuda::classify(cudaErrorInvalidValue) == status::invalid_value);
  auto rt = gpu::cuda_runtime();
  if (!rt) {
    // The plugin was built with this test, but this machine may lack the
    // vendor's runtime library it links (a bundle carried to a GPU machine
    // of the other vendor, say).
    WARN("SKIPPED CUDA: " << gpu::plugin("CUDA").note);
    return;
  }
  CHECK_THAT(rt->describe(cudaErrorIllegalAddress),
             Catch::Contains("cudaErrorIllegalAddress"));
  int n = -1;
  auto rc = rt->device_count(n);
  if (rc.failed()) {
    WARN("no CUDA device here: " << rt->describe(rc.raw));
    CHECK(n == 0);
    CHECK((rc.code == status::driver_missing || rc.code == status::no_device));
  }
}
