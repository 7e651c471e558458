// A vector of trivially copyable values that keeps up to N of them inline:
// input lengths and input views of one kernel call are built for every item,
// and a heap allocation for two or three numbers each time added up.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <initializer_list>
#include <ranges>
#include <type_traits>
#include <vector>

namespace cohort::kernels {

/// Up to `N` values inline, more on the heap. Contiguous: converts to a
/// std::span like a std::vector does. Not thread-safe.
template <class T, size_t N> class small_vector {
public:
  static_assert(std::is_trivially_copyable_v<T>);

  small_vector() = default;

  template <class It> small_vector(It first, It last) {
    for (; first != last; ++first)
      push_back(*first);
  }

  small_vector(std::initializer_list<T> xs)
      : small_vector(xs.begin(), xs.end()) {
    // nop
  }

  /// The values of another range (a std::vector, a std::span).
  template <std::ranges::input_range R>
  requires(!std::is_same_v<std::remove_cvref_t<R>, small_vector>)
      small_vector(const R& r)
      : small_vector(std::ranges::begin(r), std::ranges::end(r)) {
    // nop
  }

  void push_back(const T& x) {
    if (heap_.empty() && n_ < N) {
      inline_[n_++] = x;
      return;
    }
    spill();
    heap_.push_back(x);
    ++n_;
  }

  /// Inserts `x` before position `pos` (at most size()).
  void insert(size_t pos, const T& x) {
    pos = std::min(pos, n_);
    push_back(x);
    std::rotate(data() + pos, data() + n_ - 1, data() + n_);
  }

  void clear() {
    n_ = 0;
    heap_.clear();
  }

  size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }

  T* data() { return heap_.empty() ? inline_.data() : heap_.data(); }
  const T* data() const {
    return heap_.empty() ? inline_.data() : heap_.data();
  }

  T* begin() { return data(); }
  T* end() { return data() + n_; }
  const T* begin() const { return data(); }
  const T* end() const { return data() + n_; }

  T& operator[](size_t i) { return data()[i]; }
  const T& operator[](size_t i) const { return data()[i]; }

private:
  // Moves the inline values to the heap once they no longer fit.
  void spill() {
    if (heap_.empty())
      heap_.assign(inline_.begin(), inline_.begin() + std::ptrdiff_t(n_));
  }

  std::array<T, N> inline_{};
  size_t n_ = 0;
  std::vector<T> heap_;
};

} // namespace cohort::kernels
