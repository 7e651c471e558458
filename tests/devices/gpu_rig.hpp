// A GPU device over the fake GPU runtime (tests/devices/fake_gpu.hpp), with
// the fake health monitor: the GPU backends' host side without a GPU.
#pragma once

#include <catch2/catch.hpp>

#include <memory>

#include "devices/gpu/gpu_device.hpp"
#include "tests/devices/fake_gpu.hpp"

namespace cohort::testing {

/// fake0: a gpu_device opened at ordinal 0 of a fresh fake runtime.
struct gpu_rig {
  std::shared_ptr<fake_gpu_api> fake = std::make_shared<fake_gpu_api>();
  std::shared_ptr<fake_monitor> monitor = std::make_shared<fake_monitor>();
  std::shared_ptr<devices::gpu::gpu_device> dev;

  explicit gpu_rig(
      uint32_t streams = 4,
      uint32_t gpu_instance = devices::health::gpu_event::whole_gpu) {
    devices::gpu::gpu_options opts;
    opts.streams = streams;
    opts.monitor = monitor;
    opts.gpu_instance = gpu_instance;
    auto d = devices::gpu::gpu_device::open(fake, 0, device_kind::cuda_gpu,
                                            "fake0", opts);
    REQUIRE(d);
    dev = std::move(*d);
  }

  // A test that stopped half-way may leave a launch hung: let it finish, or
  // the device would wait for it forever as it goes.
  ~gpu_rig() { fake->release_hung(); }
};

} // namespace cohort::testing
