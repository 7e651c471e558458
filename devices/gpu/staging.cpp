#include "devices/gpu/staging.hpp"

#include <bit>

#include "devices/topology.hpp"

namespace cohort::devices::gpu {

namespace {

constexpr size_t min_block = size_t{64} << 10;

size_t size_class(size_t bytes) {
  return std::bit_width(std::bit_ceil(std::max(bytes, min_block))) - 1;
}

} // namespace

staging_pool::staging_pool(api& rt, int32_t numa_node, uint64_t cache_bytes)
    : rt_(rt), numa_node_(numa_node), cache_limit_(cache_bytes), free_(64) {
  // nop
}

staging_pool::~staging_pool() {
  clear(true);
}

staging_block staging_pool::acquire(size_t bytes, result& rc) {
  rc = {};
  auto cls = size_class(bytes);
  if (auto& bucket = free_[cls]; !bucket.empty()) {
    auto block = bucket.back();
    bucket.pop_back();
    cached_ -= block.capacity;
    return block;
  }
  staging_block block{nullptr, size_t{1} << cls};
  block.data = alloc_on_numa(block.capacity, numa_node_);
  if (block.data == nullptr) {
    rc = {status::out_of_memory, 0};
    return {};
  }
  if (rc = rt_.host_register(block.data, block.capacity); rc.failed()) {
    free_on_numa(block.data, block.capacity);
    return {};
  }
  ++allocations_;
  return block;
}

void staging_pool::release(staging_block block) {
  if (block.data == nullptr)
    return;
  if (cached_ + block.capacity > cache_limit_) {
    free_block(block, true);
    return;
  }
  cached_ += block.capacity;
  free_[size_class(block.capacity)].push_back(block);
}

void staging_pool::clear(bool registered) {
  for (auto& bucket : free_) {
    for (auto& block : bucket)
      free_block(block, registered);
    bucket.clear();
  }
  cached_ = 0;
}

void staging_pool::free_block(staging_block block, bool registered) {
  if (registered)
    rt_.host_unregister(block.data);
  free_on_numa(block.data, block.capacity);
}

} // namespace cohort::devices::gpu
