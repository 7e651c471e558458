// An immutable, shared host array of floats: the input of a work item,
// held by Cohort or wrapping the caller's memory.
#pragma once

#include <memory>
#include <span>
#include <type_traits>
#include <vector>

#include <caf/error.hpp>
#include <caf/meta/load_callback.hpp>

namespace cohort {

/// Immutable float array with shared ownership. Copies are cheap (a reference
/// count), so the balancer can keep an item for failover while a device runs
/// it. Thread-safe for concurrent readers; nobody writes after construction.
class host_buffer {
public:
  host_buffer() = default;

  explicit host_buffer(std::vector<float> values) {
    auto held = std::make_shared<const std::vector<float>>(std::move(values));
    data_ = held->data();
    size_ = held->size();
    owner_ = std::move(held);
  }

  /// Wraps `size` floats at `data` without copying them: `owner` keeps them
  /// alive as long as any copy of the buffer (null when the caller keeps
  /// them alive itself until the item ends).
  host_buffer(std::shared_ptr<const void> owner, const float* data,
              size_t size)
      : owner_(std::move(owner)), data_(data), size_(data ? size : 0) {
    // nop
  }

  /// The values; empty for a default-constructed buffer.
  std::span<const float> span() const { return {data_, size_}; }

  size_t size() const { return size_; }

  /// Bytes the values take.
  size_t bytes() const { return size_ * sizeof(float); }

  /// Where the values are: copies of one buffer share an identity, and
  /// two live buffers with one identity and one size hold the same values
  /// (null for a default buffer).
  const void* identity() const { return data_; }

private:
  std::shared_ptr<const void> owner_;
  const float* data_ = nullptr;
  size_t size_ = 0;
};

/// Serializes a buffer as its values (only for remote messages and printing).
template <class Inspector>
typename std::enable_if<Inspector::reads_state,
                        typename Inspector::result_type>::type
inspect(Inspector& f, host_buffer& x) {
  auto s = x.span();
  std::vector<float> tmp(s.begin(), s.end());
  return f(tmp);
}

/// Deserializes a buffer from its values.
template <class Inspector>
typename std::enable_if<Inspector::writes_state,
                        typename Inspector::result_type>::type
inspect(Inspector& f, host_buffer& x) {
  std::vector<float> tmp;
  auto load = caf::meta::load_callback([&]() -> caf::error {
    x = host_buffer{std::move(tmp)};
    return caf::none;
  });
  return f(tmp, load);
}

} // namespace cohort
