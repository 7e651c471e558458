// An immutable, shared host array of floats: the input of a work item.
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

  explicit host_buffer(std::vector<float> values)
      : data_(std::make_shared<const std::vector<float>>(std::move(values))) {
    // nop
  }

  /// The values; empty for a default-constructed buffer.
  std::span<const float> span() const {
    return data_ ? std::span<const float>{*data_} : std::span<const float>{};
  }

  size_t size() const { return data_ ? data_->size() : 0; }

  /// Bytes the values take.
  size_t bytes() const { return size() * sizeof(float); }

  /// Who holds the values: copies of one buffer share an identity, so the
  /// same identity means the same values (null for a default buffer).
  const void* identity() const { return data_.get(); }

private:
  std::shared_ptr<const std::vector<float>> data_;
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
