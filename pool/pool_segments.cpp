// Segments: how big a new one is, adding and detaching them, the list of idle (wholly free)
// segments, trim, the growth rule that releases idle segments before mapping, and the limit.
#include "pool/pool_impl.h"

#include <algorithm>
#include <mutex>

namespace gmem {

void pool_impl::update_oversize_locked() {
  if (page_ != 0) { // the arena serves them all: never a segment of their own
    oversize_now_.store(SIZE_MAX, std::memory_order_relaxed);
    return;
  }
  const auto grown =
      static_cast<std::size_t>(static_cast<double>(st_.reserved_bytes) * opt_.oversize_fraction);
  oversize_now_.store(std::max(opt_.oversize_bytes, grown / k_block_granule * k_block_granule),
                      std::memory_order_relaxed);
}

std::size_t pool_impl::segment_bytes_for(std::size_t size) const {
  if (size <= opt_.small_max_bytes) return std::max(opt_.small_segment_bytes, size);
  if (size > oversize_now_.load(std::memory_order_relaxed))
    return round_up(size, opt_.segment_granule_bytes);
  // Large segments grow with the pool (geometric growth): an eighth of what is reserved,
  // within [large_segment_bytes, large_segment_max_bytes], and at least the request.
  std::size_t grown = round_up(st_.reserved_bytes / 8, opt_.segment_granule_bytes);
  std::size_t bytes =
      std::max(opt_.large_segment_bytes, std::min(grown, opt_.large_segment_max_bytes));
  return std::max(bytes, round_up(size, opt_.segment_granule_bytes));
}

segment* pool_impl::new_segment_locked(std::uintptr_t base, std::size_t bytes, segment_kind kind) {
  std::unique_ptr<segment> owned;
  if (spare_segments_.empty()) {
    owned = std::make_unique<segment>();
  } else { // recycled: its bitmap keeps its capacity
    owned = std::move(spare_segments_.back());
    spare_segments_.pop_back();
    owned->first = owned->last = nullptr;
    owned->idle_prev = owned->idle_next = nullptr;
    owned->idle = false;
    owned->arena = false;
    owned->stitched = false;
    owned->pages.clear();
    owned->lent.clear();
  }
  segment* seg = owned.get();
  seg->base = base;
  seg->size = bytes;
  seg->kind = kind;
  // An oversize segment holds one block: a one-bit map (no 1/4096-sized memset per map).
  seg->starts.reset(kind == segment_kind::oversize ? 1 : bytes / k_block_granule);
  segments_.emplace(base, std::move(owned));
  ++st_.segments;
  return seg;
}

void pool_impl::drop_segment_locked(segment* seg) {
  if (seg == arena_tip_) arena_tip_ = nullptr;
  --st_.segments;
  auto it = segments_.find(seg->base);
  if (spare_segments_.size() < k_spare_segments) spare_segments_.push_back(std::move(it->second));
  segments_.erase(it);
}

segment* pool_impl::add_segment_locked(std::uintptr_t base, std::size_t bytes, segment_kind kind,
                                       bool arena) {
  segment* seg = new_segment_locked(base, bytes, kind);
  seg->arena = arena;
  seg->starts.set(0);
  block* b = blocks_.get();
  b->address = base;
  b->size = bytes;
  b->seg = seg;
  seg->first = seg->last = b;
  st_.reserved_bytes += bytes;
  ++st_.segment_maps;
  if (st_.reserved_bytes > st_.peak_reserved_bytes) st_.peak_reserved_bytes = st_.reserved_bytes;
  update_oversize_locked();
  insert_free_locked(b);
  return seg;
}

void pool_impl::detach_segment_locked(segment* seg, deferred& d) {
  block* b = seg->first;
  free_[class_of(seg)].remove(b);
  idle_remove_locked(seg);
  blocks_.put(b);
  st_.reserved_bytes -= seg->size;
  update_oversize_locked();
  ++st_.segment_unmaps;
  ++st_.trims;
  st_.trimmed_bytes += seg->size;
  in_flight_unmap_bytes_ += seg->size;
  d.unmaps.emplace_back(seg->base, seg->size);
  d.segment_events.push_back({false, seg->base, seg->size});
  d.trimmed_bytes += seg->size;
  drop_segment_locked(seg);
}

bool pool_impl::trimmable_locked() const {
  if (idle_head_ != nullptr) return true;
  if (page_ == 0) return false;
  for (const auto& [base, seg] : segments_)
    if (seg->arena)
      for (const block* b = seg->first; b != nullptr; b = b->next)
        if (b->state == block_state::free &&
            round_up(b->address, page_) + page_ <= b->address + b->size)
          return true;
  return false;
}

std::size_t pool_impl::trim_locked(std::size_t keep_free_bytes, deferred& d) {
  std::size_t released = page_ != 0 ? trim_arena_locked(keep_free_bytes, d) : 0;
  for (segment* seg = idle_head_; seg != nullptr;) {
    segment* next = seg->idle_next;
    if (free_bytes_locked() >= keep_free_bytes + seg->size) {
      released += seg->size;
      detach_segment_locked(seg, d);
    }
    seg = next;
  }
  return released;
}

// Growth policy: release idle segments (largest first) while the reservation after growing
// would exceed (1 + grow_slack) x demand, demand being live + pending + stream-free + request,
// but at least the peak live bytes of the current and the previous allocation window
// (hysteresis: a repeating phase keeps the segments of its peak through its low point).
void pool_impl::release_for_growth_locked(std::size_t new_bytes, std::size_t size, deferred& d) {
  if (opt_.grow_slack < 0) return;
  std::size_t now = st_.live_bytes + st_.pending_bytes + st_.stream_free_bytes + size;
  if (opt_.grow_window_allocs != 0)
    now = std::max({now, window_peak_live_, prev_window_peak_live_});
  double demand = static_cast<double>(now);
  while (idle_head_ != nullptr &&
         static_cast<double>(st_.reserved_bytes + in_flight_map_bytes_ + new_bytes) >
             (1.0 + opt_.grow_slack) * demand) {
    segment* largest = idle_head_;
    for (segment* seg = idle_head_; seg != nullptr; seg = seg->idle_next)
      if (seg->size > largest->size) largest = seg;
    detach_segment_locked(largest, d);
  }
}

void pool_impl::idle_push_locked(segment* seg) {
  seg->idle = true;
  seg->idle_prev = nullptr;
  seg->idle_next = idle_head_;
  if (idle_head_ != nullptr) idle_head_->idle_prev = seg;
  idle_head_ = seg;
}

void pool_impl::idle_remove_locked(segment* seg) {
  if (!seg->idle) return;
  seg->idle = false;
  if (seg->idle_prev != nullptr)
    seg->idle_prev->idle_next = seg->idle_next;
  else
    idle_head_ = seg->idle_next;
  if (seg->idle_next != nullptr) seg->idle_next->idle_prev = seg->idle_prev;
  seg->idle_prev = seg->idle_next = nullptr;
}

std::size_t pool_impl::trim(std::size_t keep_free_bytes) {
  flush_caches(k_no_stream); // what the threads' caches hold is free memory too
  deferred d;
  std::size_t released;
  {
    std::lock_guard lock(mu_);
    released = trim_locked(keep_free_bytes, d);
    check_locked();
  }
  run_deferred(d);
  drain_unstitches();
  return released;
}

void pool_impl::set_limit(std::size_t bytes) {
  if (bytes != 0) flush_caches(k_no_stream);
  deferred d;
  {
    std::lock_guard lock(mu_);
    opt_.limit_bytes = bytes;
    st_.limit_bytes = bytes;
    if (bytes != 0 && st_.reserved_bytes > bytes) trim_locked(0, d);
    check_locked();
  }
  run_deferred(d);
}

} // namespace gmem
