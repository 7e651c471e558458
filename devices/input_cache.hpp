// A model of inputs a device keeps between launches: immutable host buffers
// (weights, a shared operand) by identity, least recently used first out,
// within a byte budget. The simulated GPU skips the transfer of an input it
// holds; the balancer keeps the same model per device to prefer the device
// that already holds an item's inputs.
#pragma once

#include <cstdint>
#include <list>
#include <unordered_map>
#include <utility>

namespace cohort::devices {

class input_cache {
public:
  input_cache() = default;
  explicit input_cache(uint64_t budget) : budget_(budget) {}

  /// Bytes it may hold; 0 holds nothing.
  uint64_t budget() const { return budget_; }

  /// Bytes it holds.
  uint64_t held() const { return held_; }

  /// Bytes of what it would push out to take in `bytes` more.
  uint64_t evicts(uint64_t bytes) const {
    uint64_t out = 0;
    auto held = held_;
    for (auto i = lru_.rbegin(); i != lru_.rend() && held + bytes > budget_;
         ++i) {
      held -= i->second;
      out += i->second;
    }
    return out;
  }

  /// True if `id` is held (it does not count as a use).
  bool holds(const void* id) const {
    return id != nullptr && index_.count(id) > 0;
  }

  /// Uses `id` of `bytes`: true if it was held already; otherwise it is held
  /// from now on (if it fits), pushing out the least recently used.
  bool use(const void* id, uint64_t bytes) {
    return use(id, bytes, [](const void*) {});
  }

  /// As `use(id, bytes)`, telling `evicted` each id it pushes out.
  template <class F> bool use(const void* id, uint64_t bytes, F&& evicted) {
    if (id == nullptr || bytes == 0 || bytes > budget_)
      return false;
    if (auto i = index_.find(id); i != index_.end()) {
      lru_.splice(lru_.begin(), lru_, i->second);
      return true;
    }
    while (held_ + bytes > budget_ && !lru_.empty()) {
      held_ -= lru_.back().second;
      evicted(lru_.back().first);
      index_.erase(lru_.back().first);
      lru_.pop_back();
    }
    lru_.emplace_front(id, bytes);
    index_[id] = lru_.begin();
    held_ += bytes;
    return false;
  }

  /// Forgets everything (the device was reset).
  void clear() {
    lru_.clear();
    index_.clear();
    held_ = 0;
  }

private:
  uint64_t budget_ = 0;
  uint64_t held_ = 0;
  std::list<std::pair<const void*, uint64_t>> lru_;
  std::unordered_map<const void*,
                     std::list<std::pair<const void*, uint64_t>>::iterator>
      index_;
};

} // namespace cohort::devices
