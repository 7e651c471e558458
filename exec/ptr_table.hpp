#pragma once

// The sizes of the allocations a process holds, by address: what cohort
// exec's shim looks up on every allocation and free (exec/exec_shim.cpp).
// Open addressing in one array (linear probing, deletion by shifting back
// what follows, so no tombstones), so that neither allocating nor freeing
// allocates: the table grows (doubling) only when 70 % of it is taken.
// Not thread-safe: the shim holds its lock around each call.

#include <cstddef>
#include <cstdint>
#include <cstdlib>

namespace cohort::exec {

class ptr_table {
public:
  ptr_table() = default;
  ~ptr_table() { std::free(slots_); }
  ptr_table(const ptr_table&) = delete;
  ptr_table& operator=(const ptr_table&) = delete;

  /// Records `n` bytes at `key`; returns what a record it replaces held
  /// (0 when none). False in `ok` when the table could not grow (out of
  /// host memory): nothing recorded.
  uint64_t put(uint64_t key, uint64_t n, bool& ok) {
    ok = true;
    if (key == empty) {
      auto stale = zero_;
      zero_ = n;
      return stale;
    }
    if (cap_ != 0)
      for (auto i = home(key); slots_[i].key != empty; i = next(i))
        if (slots_[i].key == key) {
          auto stale = slots_[i].bytes;
          slots_[i].bytes = n;
          return stale;
        }
    // A new record: the array grows first when it would be over 70 %.
    if ((live_ + 1) * 10 > cap_ * 7 && !grow()) {
      ok = false;
      return 0;
    }
    auto i = home(key);
    while (slots_[i].key != empty)
      i = next(i);
    slots_[i] = {key, n};
    ++live_;
    return 0;
  }

  /// The bytes recorded at `key`, forgotten; 0 when there is no record.
  uint64_t take(uint64_t key) {
    if (key == empty) {
      auto n = zero_;
      zero_ = 0;
      return n;
    }
    if (cap_ == 0)
      return 0;
    auto i = home(key);
    while (slots_[i].key != key) {
      if (slots_[i].key == empty)
        return 0;
      i = next(i);
    }
    auto n = slots_[i].bytes;
    --live_;
    // What follows in the run moves back into the hole when its home is
    // not between the hole and where it sits.
    for (auto j = next(i);; j = next(j)) {
      if (slots_[j].key == empty)
        break;
      auto h = home(slots_[j].key);
      bool stays = i <= j ? (i < h && h <= j) : (i < h || h <= j);
      if (stays)
        continue;
      slots_[i] = slots_[j];
      i = j;
    }
    slots_[i] = {empty, 0};
    return n;
  }

  /// Records held now.
  size_t size() const { return live_ + (zero_ != 0 ? 1 : 0); }
  /// Slots in the array (a power of two, or 0 before the first record).
  size_t capacity() const { return cap_; }

private:
  struct slot {
    uint64_t key;
    uint64_t bytes;
  };
  // The key of a free slot: a record at address 0 is kept outside.
  static constexpr uint64_t empty = 0;

  size_t next(size_t i) const { return (i + 1) & (cap_ - 1); }

  size_t home(uint64_t key) const {
    // Fibonacci hashing: allocations are aligned, their low bits alike.
    return size_t((key * 0x9E3779B97F4A7C15ull) >> (64 - bits_));
  }

  /// Rehashes into an array twice as large.
  bool grow() {
    size_t cap = cap_ == 0 ? 1024 : cap_ * 2;
    auto* fresh = static_cast<slot*>(std::calloc(cap, sizeof(slot)));
    if (fresh == nullptr)
      return false;
    auto* old = slots_;
    auto old_cap = cap_;
    slots_ = fresh;
    cap_ = cap;
    bits_ = 0;
    while ((size_t{1} << bits_) < cap)
      ++bits_;
    for (size_t j = 0; j < old_cap; ++j) {
      auto& s = old[j];
      if (s.key == empty)
        continue;
      auto i = home(s.key);
      while (slots_[i].key != empty)
        i = next(i);
      slots_[i] = s;
    }
    std::free(old);
    return true;
  }

  slot* slots_ = nullptr;
  size_t cap_ = 0;
  unsigned bits_ = 0;
  /// Slots with a record.
  size_t live_ = 0;
  /// The record at address 0.
  uint64_t zero_ = 0;
};

} // namespace cohort::exec
