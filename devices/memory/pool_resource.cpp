#include "devices/memory/pool_resource.hpp"

#include <algorithm>
#include <cstdio>
#include <optional>

#include "devices/memory/asan_poison.hpp"
#include "messages/errc.hpp"

namespace cohort::devices::memory {

namespace {

// New slabs for requests beyond the growth step are rounded to this (the
// allocation granularity of CUDA and HIP).
constexpr uint64_t slab_granularity = uint64_t{2} << 20;

std::string mib(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f MiB", double(bytes) / double(1 << 20));
  return buf;
}

} // namespace

double pool_stats::fragmentation() const {
  if (free_bytes == 0)
    return 0;
  return 1.0 - double(largest_free) / double(free_bytes);
}

caf::error validate(const pool_options& opts) {
  auto bad = [](std::string what) {
    return make_error(errc::invalid_arguments, "pool: " + std::move(what));
  };
  if (opts.slab_bytes == 0)
    return bad("slab_bytes must be positive");
  if (!(opts.defrag_threshold >= 0 && opts.defrag_threshold <= 1))
    return bad("defrag_threshold must lie in [0, 1]");
  if (opts.small_limit < block_alignment || opts.small_limit > (1u << 30))
    return bad("small_limit must lie in [256 B, 1 GiB]");
  return caf::none;
}

pool_options sized_pool_options(uint64_t capacity) {
  pool_options p;
  p.slab_bytes = align_up(
      std::clamp<uint64_t>(capacity / 64, slab_granularity, uint64_t{1} << 30),
      slab_granularity);
  p.release_threshold = capacity / 4;
  p.class_cache_bytes = std::min<uint64_t>(uint64_t{32} << 20, capacity / 32);
  return p;
}

pool_resource::pool_resource(memory_resource& upstream,
                             stream_ordering& streams, pool_options opts)
    : upstream_(upstream), streams_(streams),
      poison_(asan_enabled && upstream.host_memory()), opts_(opts),
      free_by_addr_(&nodes_), free_by_size_(&nodes_), live_(&nodes_) {
  // Classes: 256 B steps up to 1 KiB, then four per power of two (at most
  // 25% of a small block is rounding).
  for (uint64_t s = block_alignment; s <= 1024 && s <= opts_.small_limit;
       s += block_alignment)
    class_sizes_.push_back(s);
  for (uint64_t base = 1024; base < opts_.small_limit; base *= 2)
    for (uint64_t q = 1; q <= 4; ++q) {
      auto s = base + q * base / 4;
      if (s > opts_.small_limit)
        break;
      class_sizes_.push_back(align_up(s, block_alignment));
    }
  caches_.resize(class_sizes_.size());
  live_.reserve(1024);
  // Fences are numbered by the ordering; a pool made on a used device starts
  // where it stands.
  sync_fences();
  if (opts_.initial_bytes > 0)
    grow(opts_.initial_bytes);
}

pool_resource::~pool_resource() {
  reset(false);
}

void pool_resource::sync_fences() {
  for (uint32_t s = 0; s < max_streams && s < streams_.streams(); ++s)
    recorded_[s] = reached_[s] = streams_.recorded(stream_ref{s});
}

uint16_t pool_resource::class_of(uint64_t bytes) const {
  auto i = std::lower_bound(class_sizes_.begin(), class_sizes_.end(), bytes);
  return uint16_t(i - class_sizes_.begin());
}

uint16_t pool_resource::class_index(uint64_t bytes) const {
  if (class_sizes_.empty() || bytes > opts_.small_limit ||
      bytes > class_sizes_.back())
    return 0;
  return uint16_t(class_of(bytes) + 1);
}

uint64_t pool_resource::rounded_size(uint64_t bytes) const {
  auto cls = class_index(bytes);
  return cls != 0 ? class_size(uint16_t(cls - 1))
                  : align_up(bytes, block_alignment);
}

caf::error pool_resource::out_of_memory(uint64_t bytes,
                                        const std::string& why) const {
  auto s = stats();
  return make_error(errc::out_of_memory,
                    "pool: " + std::to_string(bytes) + " bytes requested (" +
                        mib(bytes) + "): " + why + "; the pool holds " +
                        mib(s.held_bytes) + ", " + mib(s.free_bytes) +
                        " free, largest free block " + mib(s.largest_free));
}

uint64_t pool_resource::unclaimed_reservations() const {
  uint64_t total = 0;
  for (auto& [tenant, r] : reservations_)
    total += r.bytes - std::min(r.bytes, r.drawn);
  return total;
}

uint64_t pool_resource::reserved_for_others(const std::string& tenant) const {
  if (reservations_.empty())
    return 0;
  auto total = unclaimed_reservations();
  if (auto i = reservations_.find(tenant); i != reservations_.end())
    total -= i->second.bytes - std::min(i->second.bytes, i->second.drawn);
  return total;
}

uint64_t pool_resource::reservation(const std::string& tenant) const {
  auto i = reservations_.find(tenant);
  return i == reservations_.end() ? 0 : i->second.bytes;
}

uint64_t pool_resource::largest_free() const {
  uint64_t best = free_by_size_.empty() ? 0 : free_by_size_.rbegin()->first;
  for (size_t c = caches_.size(); c-- > 0;)
    if (!caches_[c].empty()) {
      best = std::max(best, class_sizes_[c]);
      break;
    }
  return best;
}

pool_resource::fence_set pool_resource::fences_after(stream_ref stream) const {
  fence_set f{};
  f[stream.index] = recorded_[stream.index] + 1;
  return f;
}

caf::error pool_resource::order_for(stream_ref stream, const fence_set& f) {
  for (uint32_t s = 0; s < max_streams; ++s) {
    if (s == stream.index || f[s] == 0 || f[s] <= reached_[s])
      continue;
    stream_ref other{s};
    if (f[s] > recorded_[s]) {
      auto seq = streams_.record(other);
      if (!seq)
        return seq.error();
      recorded_[s] = *seq;
    }
    if (streams_.reached(other, f[s])) {
      reached_[s] = std::max(reached_[s], f[s]);
      continue;
    }
    if (auto err = streams_.wait(stream, other, f[s]))
      return err;
    ++counters_.cross_stream_waits;
  }
  return caf::none;
}

bool pool_resource::settled(const fence_set& f) {
  bool all = true;
  for (uint32_t k = 0; k < max_streams; ++k) {
    if (f[k] <= reached_[k])
      continue;
    if (f[k] > recorded_[k]) {
      if (auto seq = streams_.record(stream_ref{k}))
        recorded_[k] = *seq;
      all = false;
    } else if (streams_.reached(stream_ref{k}, f[k])) {
      reached_[k] = f[k];
    } else {
      all = false;
    }
  }
  return all;
}

void pool_resource::erase_free(free_map::iterator i) {
  free_by_size_.erase({i->second.size, i->first});
  free_by_addr_.erase(i);
}

bool pool_resource::take_from_heap(uint64_t size, uintptr_t& addr,
                                   uint32_t& slab, fence_set& fences) {
  auto fit = free_by_size_.lower_bound(std::pair<uint64_t, uintptr_t>{size, 0});
  if (fit == free_by_size_.end())
    return false;
  auto [block_size, at] = *fit;
  free_by_size_.erase(fit);
  auto node = free_by_addr_.extract(at);
  auto fb = node.mapped();
  addr = at;
  slab = fb.slab;
  fences = fb.fences;
  slabs_[slab].busy += size;
  if (block_size > size) {
    // The remainder keeps the block's fences; its right neighbour is not free
    // (the heap is coalesced), so it needs no merge.
    node.key() = at + size;
    node.mapped().size = block_size - size;
    free_by_size_.emplace(block_size - size, at + size);
    free_by_addr_.insert(std::move(node));
  }
  return true;
}

void pool_resource::give_to_heap(uintptr_t addr, uint64_t size, uint32_t slab,
                                 const fence_set& fences) {
  free_block fb{size, slab, fences};
  auto merge = [&](const free_block& other) {
    fb.size += other.size;
    for (uint32_t s = 0; s < max_streams; ++s)
      fb.fences[s] = std::max(fb.fences[s], other.fences[s]);
  };
  if (auto next = free_by_addr_.find(addr + size);
      next != free_by_addr_.end() && next->second.slab == slab) {
    merge(next->second);
    erase_free(next);
  }
  if (auto prev = free_by_addr_.lower_bound(addr);
      prev != free_by_addr_.begin()) {
    --prev;
    if (prev->second.slab == slab && prev->first + prev->second.size == addr) {
      addr = prev->first;
      merge(prev->second);
      erase_free(prev);
    }
  }
  free_by_size_.emplace(fb.size, addr);
  free_by_addr_.emplace(addr, fb);
}

void pool_resource::flush_caches() {
  for (size_t c = 0; c < caches_.size(); ++c) {
    for (auto& cb : caches_[c]) {
      slabs_[cb.slab].busy -= class_sizes_[c];
      give_to_heap(cb.addr, class_sizes_[c], cb.slab, cb.fences);
    }
    caches_[c].clear();
  }
  cached_bytes_ = 0;
}

caf::error pool_resource::grow(uint64_t size) {
  auto want = std::max(opts_.slab_bytes, align_up(size, slab_granularity));
  owner_tag tag{"", 0, "pool slab"};
  // Only a refusal is worth asking again; anything else (a lost device)
  // goes back as it is.
  auto refused = [](const caf::expected<void*>& x) {
    return !x && code_of(x.error()) == errc::out_of_memory;
  };
  auto p = upstream_.allocate(want, stream_ref{0}, tag);
  if (refused(p) && want > size) {
    want = align_up(size, block_alignment);
    p = upstream_.allocate(want, stream_ref{0}, tag);
  }
  if (refused(p) && (free_bytes() > cached_bytes_)) {
    // Wholly free slabs may be what keeps the device from handing out one
    // larger one: give them back and ask again.
    auto keep = opts_.release_threshold;
    opts_.release_threshold = 0;
    flush_caches();
    trim();
    opts_.release_threshold = keep;
    p = upstream_.allocate(want, stream_ref{0}, tag);
  }
  if (!p && !refused(p))
    return p.error();
  if (!p)
    return out_of_memory(size, "the device refused a new slab (" +
                                   describe(p.error()) + ")");
  uint32_t index = 0;
  while (index < slabs_.size() && slabs_[index].in_use)
    ++index;
  if (index == slabs_.size())
    slabs_.emplace_back();
  auto base = reinterpret_cast<uintptr_t>(*p);
  fence_set fences{};
  if (opts_.zero_new_slabs) {
    // Fresh device memory is not cleared: whatever it held must not reach a
    // tenant either.
    auto fill = streams_.fill_stream();
    if (auto err = streams_.zero(*p, want, fill)) {
      upstream_.deallocate(*p, want, stream_ref{0});
      return err;
    }
    fences = fences_after(fill);
  }
  if (poison_)
    asan_poison(*p, want);
  slabs_[index] = slab{base, want, 0, true};
  held_bytes_ += want;
  ++counters_.slab_allocations;
  counters_.peak_held_bytes = std::max(counters_.peak_held_bytes, held_bytes_);
  give_to_heap(base, want, index, fences);
  return caf::none;
}

void pool_resource::release_slab(uint32_t index) {
  auto& s = slabs_[index];
  auto i = free_by_addr_.find(s.base);
  if (i != free_by_addr_.end())
    erase_free(i);
  if (poison_)
    asan_unpoison(reinterpret_cast<void*>(s.base), s.size);
  upstream_.deallocate(reinterpret_cast<void*>(s.base), s.size, stream_ref{0});
  held_bytes_ -= s.size;
  s = slab{};
  ++counters_.slab_releases;
}

uint64_t pool_resource::trim() {
  uint64_t idle = 0;
  for (auto& s : slabs_)
    if (s.in_use && s.busy == 0)
      idle += s.size;
  uint64_t released = 0;
  auto needed = unclaimed_reservations();
  for (uint32_t i = 0; i < slabs_.size() && idle > opts_.release_threshold;
       ++i) {
    auto& s = slabs_[i];
    if (!s.in_use || s.busy != 0 ||
        free_bytes() - cached_bytes_ - s.size < needed)
      continue;
    // Work freed into it may still be running (a zero fill, say).
    auto fb = free_by_addr_.find(s.base);
    if (fb == free_by_addr_.end() || !settled(fb->second.fences))
      continue;
    idle -= s.size;
    released += s.size;
    release_slab(i);
  }
  return released;
}

double pool_resource::defragment() {
  flush_caches();
  trim();
  ++counters_.defragmentations;
  return stats().fragmentation();
}

void pool_resource::maintain() {
  // Flushing the class caches helps only when they hold a good part of the
  // free memory; otherwise it would just throw the caches away.
  if (cached_bytes_ * 8 >= free_bytes() && cached_bytes_ > 0 &&
      stats().fragmentation() > opts_.defrag_threshold)
    defragment();
  else
    trim();
}

uint64_t pool_resource::reset(bool upstream_gone) {
  auto dropped = uint64_t(live_.size());
  if (!upstream_gone)
    for (auto& s : slabs_)
      if (s.in_use) {
        if (poison_)
          asan_unpoison(reinterpret_cast<void*>(s.base), s.size);
        upstream_.deallocate(reinterpret_cast<void*>(s.base), s.size,
                             stream_ref{0});
      }
  slabs_.clear();
  free_by_addr_.clear();
  free_by_size_.clear();
  live_.clear();
  quarantined_.clear();
  quarantined_bytes_ = 0;
  for (auto& c : caches_)
    c.clear();
  for (auto& [tenant, r] : reservations_)
    r.drawn = 0;
  held_bytes_ = live_bytes_ = requested_bytes_ = cached_bytes_ = 0;
  sync_fences();
  return dropped;
}

caf::error pool_resource::reserve(const std::string& tenant, uint64_t bytes) {
  auto old = reservations_.find(tenant);
  std::optional<reservation_entry> before;
  if (old != reservations_.end())
    before = old->second;
  if (bytes == 0) {
    if (old != reservations_.end())
      reservations_.erase(old);
    return caf::none;
  }
  auto& r = reservations_[tenant];
  r.bytes = bytes;
  r.drawn = std::min(r.drawn, bytes);
  auto needed = unclaimed_reservations();
  if (free_bytes() < needed) {
    if (auto err = grow(needed - free_bytes())) {
      if (before)
        r = *before;
      else
        reservations_.erase(tenant);
      return err;
    }
  }
  return caf::none;
}

caf::expected<void*> pool_resource::do_allocate(size_t bytes, stream_ref stream,
                                                const owner_tag& owner) {
  if (bytes == 0)
    return make_error(errc::invalid_arguments,
                      "pool: an allocation of 0 bytes (the owner is '" +
                          owner.tenant + "')");
  if (stream.index >= streams_.streams() || stream.index >= max_streams)
    return make_error(errc::invalid_arguments,
                      "pool: stream " + std::to_string(stream.index) +
                          " does not exist (the device has " +
                          std::to_string(streams_.streams()) + ")");
  auto cls = class_index(bytes);
  auto size = cls != 0 ? class_size(uint16_t(cls - 1))
                       : align_up(bytes, block_alignment);
  reservation_entry* mine = nullptr;
  uint64_t others = 0;
  if (!reservations_.empty()) {
    if (auto i = reservations_.find(owner.tenant); i != reservations_.end())
      mine = &i->second;
    others = reserved_for_others(owner.tenant);
  }
  uintptr_t addr = 0;
  uint32_t slab = 0;
  fence_set fences{};
  auto room = [&] {
    return free_bytes() >= size && free_bytes() - size >= others;
  };
  bool got = false;
  if (cls != 0 && !caches_[cls - 1].empty() && room()) {
    // Prefer a cached block this stream may use without waiting.
    auto& cache = caches_[cls - 1];
    size_t pick = cache.size() - 1;
    for (size_t k = 0; k < std::min<size_t>(cache.size(), 4); ++k) {
      auto& cand = cache[cache.size() - 1 - k];
      bool ready = true;
      for (uint32_t s = 0; s < max_streams && ready; ++s)
        ready = s == stream.index || cand.fences[s] <= reached_[s];
      if (ready) {
        pick = cache.size() - 1 - k;
        break;
      }
    }
    addr = cache[pick].addr;
    slab = cache[pick].slab;
    fences = cache[pick].fences;
    cache[pick] = cache.back();
    cache.pop_back();
    cached_bytes_ -= size;
    ++counters_.cache_hits;
    got = true;
  }
  for (int attempt = 0; !got; ++attempt) {
    if (room() && take_from_heap(size, addr, slab, fences))
      break;
    if (cached_bytes_ > 0) {
      flush_caches();
      if (room() && take_from_heap(size, addr, slab, fences))
        break;
    }
    if (attempt > 0)
      return out_of_memory(bytes, "no free block fits after growing");
    uint64_t need = size;
    if (free_bytes() < size + others)
      need = std::max(size, size + others - free_bytes());
    if (auto err = grow(need)) {
      if (others > 0 && code_of(err) == errc::out_of_memory)
        return make_error(code_of(err), describe(err) + "; " + mib(others) +
                                            " are reserved for other tenants");
      return err;
    }
  }
  if (auto err = order_for(stream, fences)) {
    // The block is unusable on this stream; put it back where it was.
    slabs_[slab].busy -= size;
    give_to_heap(addr, size, slab, fences);
    return err;
  }
  live_block lb{size, bytes, slab, cls, 0, owner.tenant};
  if (mine != nullptr) {
    lb.from_reservation =
        std::min(size, mine->bytes - std::min(mine->bytes, mine->drawn));
    mine->drawn += lb.from_reservation;
  }
  live_.emplace(addr, std::move(lb));
  live_bytes_ += size;
  requested_bytes_ += bytes;
  ++counters_.allocations;
  counters_.peak_live_bytes = std::max(counters_.peak_live_bytes, live_bytes_);
  // Only the bytes asked for: the rounding up to the block's size stays
  // poisoned too.
  if (poison_)
    asan_unpoison(reinterpret_cast<void*>(addr), bytes);
  return reinterpret_cast<void*>(addr);
}

caf::error pool_resource::do_deallocate(void* p, size_t bytes,
                                        stream_ref stream) {
  auto addr = reinterpret_cast<uintptr_t>(p);
  auto i = live_.find(addr);
  if (i == live_.end())
    return make_error(errc::invalid_free,
                      "pool: " + std::to_string(bytes) +
                          " bytes returned at an address this pool did not "
                          "hand out, or already took back (a foreign pointer "
                          "or a double free)");
  if (i->second.requested != bytes)
    return make_error(
        errc::invalid_free,
        "pool: a block of " + std::to_string(i->second.requested) +
            " bytes returned as " + std::to_string(bytes) + " bytes");
  if (stream.index >= streams_.streams() || stream.index >= max_streams)
    return make_error(errc::invalid_arguments,
                      "pool: stream " + std::to_string(stream.index) +
                          " does not exist");
  auto lb = std::move(i->second);
  live_.erase(i);
  caf::error err;
  if (poison_)
    asan_unpoison(p, lb.size); // the zero fill writes the rounding too
  if (opts_.zero_on_free)
    err = streams_.zero(p, lb.size, stream);
  if (poison_)
    asan_poison(p, lb.size);
  if (lb.from_reservation > 0)
    if (auto r = reservations_.find(lb.tenant); r != reservations_.end())
      r->second.drawn -= std::min(r->second.drawn, lb.from_reservation);
  live_bytes_ -= lb.size;
  requested_bytes_ -= lb.requested;
  ++counters_.deallocations;
  if (err) {
    // Not zeroed: it may not go to anyone. It stays out of the free lists
    // (quarantined) until the device is reset.
    quarantined_bytes_ += lb.size;
    quarantined_.push_back({addr, lb.size, lb.slab});
    return err;
  }
  auto fences = fences_after(stream);
  if (lb.cls != 0 && cached_bytes_ + lb.size <= opts_.class_cache_bytes) {
    caches_[lb.cls - 1].push_back({addr, lb.slab, fences});
    cached_bytes_ += lb.size;
  } else {
    slabs_[lb.slab].busy -= lb.size;
    give_to_heap(addr, lb.size, lb.slab, fences);
  }
  return caf::none;
}

pool_stats pool_resource::stats() const {
  auto s = counters_;
  s.held_bytes = held_bytes_;
  s.live_bytes = live_bytes_;
  s.requested_bytes = requested_bytes_;
  s.free_bytes = free_bytes();
  s.cached_bytes = cached_bytes_;
  s.quarantined_bytes = quarantined_bytes_;
  s.largest_free = largest_free();
  s.reserved_bytes = unclaimed_reservations();
  s.live_blocks = live_.size();
  s.free_blocks = free_by_addr_.size();
  for (auto& c : caches_)
    s.free_blocks += c.size();
  s.slabs = uint64_t(std::count_if(slabs_.begin(), slabs_.end(),
                                   [](auto& x) { return x.in_use; }));
  return s;
}

std::string pool_resource::check_invariants() const {
  struct range {
    uintptr_t addr;
    uint64_t size;
    uint32_t slab;
    char kind; // 'L'ive, 'F'ree, 'C'ached, 'Q'uarantined
  };
  std::vector<range> all;
  uint64_t live = 0, requested = 0, cached = 0, free = 0;
  for (auto& [addr, b] : live_) {
    all.push_back({addr, b.size, b.slab, 'L'});
    live += b.size;
    requested += b.requested;
    if (b.size != rounded_size(b.requested))
      return "a live block's size is not its request's rounded size";
  }
  for (size_t c = 0; c < caches_.size(); ++c)
    for (auto& cb : caches_[c]) {
      all.push_back({cb.addr, class_sizes_[c], cb.slab, 'C'});
      cached += class_sizes_[c];
    }
  if (free_by_addr_.size() != free_by_size_.size())
    return "the heap's two indexes differ in size";
  uint64_t quarantined = 0;
  for (auto& q : quarantined_) {
    all.push_back({q.addr, q.size, q.slab, 'Q'});
    quarantined += q.size;
  }
  for (auto& [addr, fb] : free_by_addr_) {
    if (free_by_size_.count({fb.size, addr}) == 0)
      return "a free block is missing from the size index";
    all.push_back({addr, fb.size, fb.slab, 'F'});
    free += fb.size;
  }
  if (live != live_bytes_ || requested != requested_bytes_ ||
      cached != cached_bytes_)
    return "live, requested or cached byte counters are off";
  uint64_t held = 0;
  for (auto& s : slabs_)
    if (s.in_use)
      held += s.size;
  if (held != held_bytes_)
    return "held bytes differ from the slabs";
  if (quarantined != quarantined_bytes_)
    return "quarantined bytes are off";
  if (live + cached + free + quarantined != held)
    return "live + cached + free + quarantined bytes differ from the held "
           "bytes";
  std::sort(all.begin(), all.end(),
            [](auto& a, auto& b) { return a.addr < b.addr; });
  for (uint32_t k = 0; k < slabs_.size(); ++k) {
    auto& s = slabs_[k];
    if (!s.in_use)
      continue;
    auto first =
        std::lower_bound(all.begin(), all.end(), s.base,
                         [](auto& r, uintptr_t a) { return r.addr < a; });
    uintptr_t at = s.base;
    uint64_t busy = 0;
    char prev = 0;
    for (auto i = first; i != all.end() && i->addr < s.base + s.size; ++i) {
      if (i->slab != k)
        return "a block claims another slab";
      if (i->addr != at)
        return i->addr < at ? "two blocks overlap" : "a slab has a gap";
      if (prev == 'F' && i->kind == 'F')
        return "two free heap blocks touch (not coalesced)";
      if (i->kind != 'F')
        busy += i->size;
      prev = i->kind;
      at += i->size;
    }
    if (at != s.base + s.size)
      return "the blocks of a slab do not end at its end";
    if (busy != s.busy)
      return "a slab's busy bytes are off";
  }
  for (auto& r : all)
    if (r.addr % block_alignment != 0)
      return "a block is not aligned";
  return {};
}

} // namespace cohort::devices::memory
