// An immutable, shared host array of one element type (f32 for the built-in
// kernels): the input of a work item, held by Cohort or wrapping the
// caller's memory.
#pragma once

#include <memory>
#include <span>
#include <type_traits>
#include <vector>

#include "kernels/dtype.hpp"
#include "kernels/registry.hpp"

#include <caf/error.hpp>
#include <caf/meta/load_callback.hpp>
#include <caf/sec.hpp>

namespace cohort {

/// Immutable array with shared ownership. Copies are cheap (a reference
/// count), so the balancer can keep an item for failover while a device runs
/// it. Thread-safe for concurrent readers; nobody writes after construction.
class host_buffer {
public:
  host_buffer() = default;

  template <class T>
  explicit host_buffer(std::vector<T> values)
      : type_(kernels::dtype_of<T>::value) {
    auto held = std::make_shared<const std::vector<T>>(std::move(values));
    data_ = held->data();
    size_ = held->size();
    owner_ = std::move(held);
  }

  /// Wraps `size` elements at `data` without copying them: `owner` keeps
  /// them alive as long as any copy of the buffer (null when the caller
  /// keeps them alive itself until the item ends).
  template <class T>
  host_buffer(std::shared_ptr<const void> owner, const T* data, size_t size)
      : owner_(std::move(owner)), data_(data), size_(data ? size : 0),
        type_(kernels::dtype_of<T>::value) {
    // nop
  }

  /// Wraps `size` elements of type `type` at `data` (as above).
  host_buffer(std::shared_ptr<const void> owner, const void* data, size_t size,
              kernels::dtype type)
      : owner_(std::move(owner)), data_(data), size_(data ? size : 0),
        type_(type) {
    // nop
  }

  /// An input that names device-resident object `id` (docs/objects.md) of
  /// `size` elements of `type`, with no host data: the balancer resolves it
  /// to a copy on the device the item runs on, or to the object's host
  /// copy, before any device reads it. `handle`, the client's handle of
  /// the object, is held by every copy (the item holds the object).
  static host_buffer object(uint64_t id, size_t size, kernels::dtype type,
                            std::shared_ptr<const void> handle = {}) {
    host_buffer b;
    b.owner_ = std::move(handle);
    b.size_ = size;
    b.type_ = type;
    b.object_ = id;
    return b;
  }

  /// The object it names; 0 for a buffer of host data.
  uint64_t object() const { return object_; }

  /// The values of an f32 buffer (what the built-in kernels take); empty
  /// for a default-constructed buffer or one of another type.
  std::span<const float> span() const {
    if (type_ != kernels::dtype::f32)
      return {};
    return {static_cast<const float*>(data_), size_};
  }

  /// The elements with their type.
  kernels::typed_view view() const { return {data_, size_, type_}; }

  kernels::dtype type() const { return type_; }

  size_t size() const { return size_; }

  /// Bytes the values take.
  size_t bytes() const { return size_ * kernels::element_size(type_); }

  /// Where the values are: copies of one buffer share an identity, and
  /// two live buffers with one identity and one size hold the same values
  /// (null for a default buffer and an object's name).
  const void* identity() const { return data_; }

private:
  std::shared_ptr<const void> owner_;
  const void* data_ = nullptr;
  size_t size_ = 0;
  kernels::dtype type_ = kernels::dtype::f32;
  uint64_t object_ = 0;
};

/// Serializes a buffer as its element type and bytes (only for remote
/// messages and printing).
template <class Inspector>
typename std::enable_if<Inspector::reads_state,
                        typename Inspector::result_type>::type
inspect(Inspector& f, host_buffer& x) {
  auto type = static_cast<uint8_t>(x.type());
  auto object = x.object();
  uint64_t size = x.size();
  std::vector<uint8_t> tmp;
  if (object == 0) {
    auto* p = static_cast<const uint8_t*>(x.view().data);
    tmp.assign(p, p + x.bytes());
  }
  return f(type, tmp, object, size);
}

/// Deserializes a buffer from its element type and bytes.
template <class Inspector>
typename std::enable_if<Inspector::writes_state,
                        typename Inspector::result_type>::type
inspect(Inspector& f, host_buffer& x) {
  uint8_t type = 0;
  std::vector<uint8_t> tmp;
  uint64_t object = 0;
  uint64_t size = 0;
  auto load = caf::meta::load_callback([&]() -> caf::error {
    if (type >= kernels::dtype_limit)
      return caf::sec::invalid_argument;
    auto t = static_cast<kernels::dtype>(type);
    if (object != 0) {
      if (!tmp.empty())
        return caf::sec::invalid_argument;
      x = host_buffer::object(object, size, t);
      return caf::none;
    }
    if (tmp.size() % kernels::element_size(t) != 0)
      return caf::sec::invalid_argument;
    auto held = std::make_shared<const std::vector<uint8_t>>(std::move(tmp));
    x = host_buffer{held, held->data(), held->size() / kernels::element_size(t),
                    t};
    return caf::none;
  });
  return f(type, tmp, object, size, load);
}

} // namespace cohort
