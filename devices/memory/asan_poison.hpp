// AddressSanitizer's view of a simulated GPU's memory. Under ASan the pool
// keeps every byte of its host slabs that is not handed out poisoned, so that
// a kernel or a copy that runs past its block into a neighbour, a free block
// or a slab's tail is reported like an overflow of a heap block. Without ASan
// every call here is a no-op.
#pragma once

#include <cstddef>

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define COHORT_ASAN 1
#endif
#endif
#if !defined(COHORT_ASAN) && defined(__SANITIZE_ADDRESS__)
#define COHORT_ASAN 1
#endif

#ifdef COHORT_ASAN
#include <sanitizer/asan_interface.h>
#endif

namespace cohort::devices::memory {

/// True in a build with AddressSanitizer.
#ifdef COHORT_ASAN
inline constexpr bool asan_enabled = true;
#else
inline constexpr bool asan_enabled = false;
#endif

/// Marks `bytes` at `p` as not to be touched.
inline void asan_poison(const void* p, size_t bytes) {
#ifdef COHORT_ASAN
  ASAN_POISON_MEMORY_REGION(p, bytes);
#else
  (void)p;
  (void)bytes;
#endif
}

/// Marks `bytes` at `p` as usable again.
inline void asan_unpoison(const void* p, size_t bytes) {
#ifdef COHORT_ASAN
  ASAN_UNPOISON_MEMORY_REGION(p, bytes);
#else
  (void)p;
  (void)bytes;
#endif
}

/// True when the byte at `p` is poisoned (always false without ASan).
inline bool asan_is_poisoned(const void* p) {
#ifdef COHORT_ASAN
  return __asan_address_is_poisoned(p) != 0;
#else
  (void)p;
  return false;
#endif
}

} // namespace cohort::devices::memory
