#include "devices/gpu/staging.hpp"

#include <algorithm>
#include <bit>

#include "devices/topology.hpp"

namespace cohort::devices::gpu {

namespace {

constexpr size_t min_block = size_t{64} << 10;
/// How many classes larger a cached block may be and still serve a request.
constexpr size_t max_upsize = 2;

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
  if (bytes > (size_t{1} << 62)) { // no such host block
    rc = {status::out_of_memory, 0};
    return {};
  }
  auto cls = size_class(bytes);
  for (size_t c = cls; c < std::min(cls + max_upsize + 1, free_.size()); ++c)
    if (auto& bucket = free_[c]; !bucket.empty()) {
      auto block = bucket.back().block; // the most recent: warmest in cache
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
  if (block.capacity > cache_limit_) {
    free_block(block, true);
    return;
  }
  while (cached_ + block.capacity > cache_limit_ && evict_oldest()) {
  }
  cached_ += block.capacity;
  free_[size_class(block.capacity)].push_back({block, ++releases_});
}

bool staging_pool::evict_oldest() {
  std::vector<cached_block>* oldest = nullptr;
  for (auto& bucket : free_)
    if (!bucket.empty() &&
        (oldest == nullptr || bucket.front().released < oldest->front().released))
      oldest = &bucket;
  if (oldest == nullptr)
    return false;
  auto block = oldest->front().block;
  oldest->erase(oldest->begin());
  cached_ -= block.capacity;
  free_block(block, true);
  return true;
}

void staging_pool::clear(bool registered) {
  for (auto& bucket : free_) {
    for (auto& cached : bucket)
      free_block(cached.block, registered);
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
