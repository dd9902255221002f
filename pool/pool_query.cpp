// Looking at the pool without changing its blocks: range queries (owns, find), stats,
// segment reports. The invariant walker is in pool_check.cpp.
#include "pool/pool_impl.h"

#include <algorithm>
#include <mutex>

namespace gmem {

segment* pool_impl::segment_of_locked(std::uintptr_t address) const {
  auto it = segments_.upper_bound(address);
  if (it == segments_.begin()) return nullptr;
  --it;
  segment* seg = it->second.get();
  return address - seg->base < seg->size ? seg : nullptr;
}

bool pool_impl::kept_of_locked(std::uintptr_t address) const {
  auto it = kept_.upper_bound(address);
  if (it == kept_.begin()) return false;
  --it;
  return address - it->first < it->second.pages.size() * page_;
}

bool pool_impl::owns(std::uintptr_t address) const {
  std::lock_guard lock(mu_);
  return segment_of_locked(address) != nullptr || kept_of_locked(address);
}

std::optional<block_info> pool_impl::find(std::uintptr_t address) const {
  std::lock_guard lock(mu_);
  segment* seg = segment_of_locked(address);
  if (seg == nullptr) return std::nullopt;
  std::size_t i = seg->starts.find_prev(seg->granule(address));
  block* b = live_.find(seg->base + i * k_block_granule);
  if (b == nullptr || address - b->address >= b->size || cached_free_locked(b)) return std::nullopt;
  return block_info{b->address, b->size, b->requested, seg->base, seg->size, b->stream};
}

pool_stats pool_impl::stats() const {
  pool_stats s;
  {
    std::lock_guard lock(mu_);
    s = st_;
    s.free_bytes = 0;
    for (const auto& index : free_)
      s.free_bytes += index.bytes();
    std::size_t largest = 0;
    for (const auto& index : free_)
      if (block* b = index.largest(); b != nullptr && b->size > largest) largest = b->size;
    s.largest_free_block = largest;
    s.limit_bytes = opt_.limit_bytes;
  }
  s.stitch_ns = stitch_ns_.load(std::memory_order_relaxed);
  // The pool counts the blocks of the threads' caches live; free ones are stream-free for the
  // program. Read after the pool's counters: a block moving meanwhile may be off by one
  // block until the next read (never below zero).
  const cache_totals c = cache_totals_now();
  auto minus = [](std::size_t a, std::size_t b) { return a > b ? a - b : 0; };
  s.live_bytes = minus(s.live_bytes, c.free_bytes);
  s.live_blocks = minus(s.live_blocks, c.free_blocks);
  s.live_requested_bytes =
      c.requested_excess >= 0
          ? minus(s.live_requested_bytes, static_cast<std::size_t>(c.requested_excess))
          : s.live_requested_bytes + static_cast<std::size_t>(-c.requested_excess);
  s.stream_free_bytes += c.free_bytes;
  s.total_allocs += c.hits;
  s.cache_hits += c.hits;
  s.total_alloc_bytes += c.hit_bytes;
  s.total_frees += c.frees;
  s.invalid_frees += c.invalid;
  return s;
}

void pool_impl::reset_peaks() {
  std::lock_guard lock(mu_);
  st_.peak_live_bytes = st_.live_bytes;
  st_.peak_reserved_bytes = st_.reserved_bytes;
}

void pool_impl::for_each_segment(const std::function<void(const segment_view&)>& f) const {
  std::vector<segment_view> views;
  {
    std::lock_guard lock(mu_);
    views.reserve(segments_.size());
    for (const auto& [base, seg] : segments_) {
      segment_view v;
      v.base = base;
      v.size = seg->size;
      v.kind = seg->kind;
      v.stitched = seg->stitched;
      for (const block* b = seg->first; b != nullptr; b = b->next) {
        if (stream_handle freed_on; cached_free_locked(b, &freed_on)) { // in a thread's cache
          v.blocks.push_back(
              block_view{b->address, b->size, 0, block_state::stream_free, freed_on});
          continue;
        }
        v.blocks.push_back(block_view{b->address, b->size, b->requested, b->state,
                                      b->state == block_state::pending ? k_no_stream : b->stream,
                                      b->lent});
      }
      views.push_back(std::move(v));
    }
    for (const auto& [base, k] : kept_) { // kept ranges: no block, pages the arena's
      segment_view v;
      v.base = base;
      v.size = k.pages.size() * page_;
      v.kind = segment_kind::large;
      v.stitched = v.kept = true;
      views.push_back(std::move(v));
    }
  }
  std::sort(views.begin(), views.end(),
            [](const segment_view& x, const segment_view& y) { return x.base < y.base; });
  for (const auto& v : views)
    f(v);
}

} // namespace gmem
