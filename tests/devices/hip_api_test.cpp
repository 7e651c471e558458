// The real HIP runtime on this machine: its errors sorted for the host
// logic, and what it says without a GPU. Built only with the HIP backend
// (its header cannot share a translation unit with the other vendor's).
#include <catch2/catch.hpp>

#include "devices/gpu/discover.hpp"
#include "devices/gpu/plugin.hpp"
#include "devices/hip/hip_api.hpp"

using namespace cohort;
using namespace cohort::devices;
using gpu::status;

TEST_CASE("HIP errors are sorted into what the host logic acts on",
          "[devices][gpu][hip]") {
  CHECK(hip::classify(hipSuccess) == status::ok);
  CHECK(hip::classify(hipErrorOutOfMemory) == status::out_of_memory);
  CHECK(hip::classify(hipErrorIllegalAddress) == status::illegal_address);
  CHECK(hip::classify(hipErrorLaunchFailure) == status::launch_failure);
  CHECK(hip::classify(hipErrorNoDevice) == status::no_device);
  auto rt = gpu::hip_runtime();
  if (!rt) {
    // The plugin was built with this test, but this machine may lack the
    // vendor's runtime library it links (a bundle carried to a GPU machine
    // of the other vendor, say).
    WARN("SKIPPED HIP: " << gpu::plugin("HIP").note);
    return;
  }
  CHECK_THAT(rt->describe(hipErrorOutOfMemory),
             Catch::Contains("hipErrorOutOfMemory"));
  int n = -1;
  auto rc = rt->device_count(n);
  if (rc.failed()) {
    WARN("no HIP device here: " << rt->describe(rc.raw));
    CHECK((rc.code == status::no_device || rc.code == status::driver_missing));
  }
}
