// The arena (pool_options::arena): requests above small_max_bytes are served from address
// space the upstream reserved up front and maps in pages (upstream::extend). The pool grows
// the arena where it ends, so a request that fits nowhere extends the free block at the end
// instead of starting a segment of its own, and blocks freed anywhere merge with their
// neighbours whichever growth mapped them. Segments are never reshaped: the cuMemFree of an
// ordinary segment waits until the whole device is idle (docs/interpose.md), which a pool
// that follows changing request sizes paid about 14 times per training step.
//
// An arena segment is a maximal run of mapped pages. Pages go back to the upstream only when
// the pool trims (trim(), the limit, max_cached_bytes, out-of-memory recovery): the whole
// pages inside free blocks are unmapped, cutting a segment in two where they were interior.
// The hole stays unmapped; the arena grows at its tip (the segment it last grew).
#include "pool/pool_impl.h"

#include <algorithm>

namespace gmem {

std::size_t pool_impl::arena_growth_locked(std::size_t size, std::uintptr_t& at) const {
  std::size_t tail = 0; // the free block at the tip's end, which the new pages extend
  at = 0;
  if (const segment* tip = arena_tip_) {
    at = tip->base + tip->size;
    if (tip->last->state == block_state::free) tail = tip->last->size;
  }
  return round_up(size - std::min(tail, size), page_);
}

void pool_impl::add_arena_locked(std::uintptr_t base, std::size_t bytes, deferred& d) {
  segment* seg = segment_of_locked(base - 1);
  if (seg != nullptr && seg->arena && seg->base + seg->size == base) { // extends seg
    d.segment_events.push_back({false, seg->base, seg->size});
    seg->size += bytes;
    seg->starts.grow(seg->size / k_block_granule);
    st_.reserved_bytes += bytes;
    ++st_.segment_maps;
    st_.peak_reserved_bytes = std::max(st_.peak_reserved_bytes, st_.reserved_bytes);
    block* last = seg->last;
    if (last->state == block_state::free) { // grows in place (its bin changes)
      free_[k_large].remove(last);
      last->size += bytes;
      free_[k_large].insert(last);
    } else {
      block* b = blocks_.get();
      b->address = base;
      b->size = bytes;
      b->seg = seg;
      b->prev = last;
      last->next = b;
      seg->last = b;
      seg->starts.set(seg->granule(base));
      insert_free_locked(b);
    }
  } else {
    seg = add_segment_locked(base, bytes, segment_kind::large, true);
  }
  d.segment_events.push_back({true, seg->base, seg->size});
  // Two threads grew at once and the upstream placed the second growth right after the
  // first, which the pool saw later: one segment.
  if (segment* next = segment_of_locked(seg->base + seg->size);
      next != nullptr && next->arena && next->base == seg->base + seg->size) {
    join_locked(seg, next, d);
  }
  arena_tip_ = seg;
}

void pool_impl::join_locked(segment* left, segment* right, deferred& d) {
  d.segment_events.pop_back(); // left's map at its size before the join
  d.segment_events.push_back({false, right->base, right->size});
  d.segment_events.push_back({true, left->base, left->size + right->size});
  left->starts.grow((left->size + right->size) / k_block_granule);
  for (block* b = right->first; b != nullptr; b = b->next) {
    b->seg = left;
    left->starts.set(left->granule(b->address));
  }
  block* a = left->last;
  block* b = right->first;
  a->next = b;
  b->prev = a;
  left->last = right->last;
  left->size += right->size;
  right->first = right->last = nullptr;
  drop_segment_locked(right);
  if (a->state == block_state::free && b->state == block_state::free) {
    free_[k_large].remove(a);
    free_[k_large].remove(b);
    merge_into_locked(a, b);
    free_[k_large].insert(a);
  }
}

std::size_t pool_impl::trim_arena_locked(std::size_t keep_free_bytes, deferred& d) {
  std::vector<segment*> arena;
  for (const auto& [base, seg] : segments_)
    if (seg->arena) arena.push_back(seg.get());
  std::size_t released = 0;
  for (segment* seg : arena) {
    for (block* b = seg->first; b != nullptr;) {
      if (b->state != block_state::free) {
        b = b->next;
        continue;
      }
      const std::size_t free = free_bytes_locked();
      if (free <= keep_free_bytes) return released;
      std::uintptr_t p0 = round_up(b->address, page_);
      const std::uintptr_t p1 = round_down(b->address + b->size, page_);
      if (p1 <= p0) {
        b = b->next;
        continue;
      }
      // No more than the excess (rounded up to pages), from the block's end.
      p0 = std::max(p0, p1 - std::min(p1 - p0, round_up(free - keep_free_bytes, page_)));
      released += p1 - p0;
      // The rest of seg (after the hole) is a segment of its own now: go on there.
      seg = cut_locked(seg, b, p0, p1, d);
      if (seg == nullptr) break;
      b = seg->first;
    }
  }
  return released;
}

segment* pool_impl::cut_locked(segment* seg, block* b, std::uintptr_t p0, std::uintptr_t p1,
                               deferred& d) {
  const std::uintptr_t end = seg->base + seg->size;
  const std::uintptr_t b_end = b->address + b->size;
  release_kept_touching_locked(p0, p1); // no range may map a page the arena gives back
  free_[k_large].remove(b);
  d.segment_events.push_back({false, seg->base, seg->size});
  if (p0 > seg->base) d.segment_events.push_back({true, seg->base, p0 - seg->base});
  if (p1 < end) d.segment_events.push_back({true, p1, end - p1});
  segment* right = nullptr;
  if (p1 < end) { // [p1, end): the rest of b (if any) and the blocks after it
    right = new_segment_locked(p1, end - p1, segment_kind::large);
    right->arena = true;
    block* head = b->next;
    if (p1 < b_end) {
      block* r = blocks_.get();
      r->address = p1;
      r->size = b_end - p1;
      r->next = b->next;
      if (r->next != nullptr) r->next->prev = r;
      r->state = block_state::free;
      head = r;
    } else {
      head->prev = nullptr;
    }
    right->first = head;
    for (block* x = head; x != nullptr; x = x->next) {
      if (x->seg == seg) seg->starts.clear(seg->granule(x->address));
      x->seg = right;
      right->starts.set(right->granule(x->address));
      right->last = x;
    }
    if (head != b->next) free_[k_large].insert(head);
    if (arena_tip_ == seg) arena_tip_ = right;
  }
  // [seg->base, p0): b keeps what lies before the hole, or goes.
  b->next = nullptr;
  if (p0 > b->address) {
    b->size = p0 - b->address;
    seg->last = b;
    free_[k_large].insert(b);
  } else {
    seg->starts.clear(seg->granule(b->address));
    seg->last = b->prev;
    if (b->prev != nullptr) b->prev->next = nullptr;
    blocks_.put(b);
  }
  seg->size = p0 - seg->base;
  if (seg->last == nullptr) {
    seg->first = nullptr;
    drop_segment_locked(seg);
  }
  st_.reserved_bytes -= p1 - p0;
  ++st_.segment_unmaps;
  ++st_.trims;
  st_.trimmed_bytes += p1 - p0;
  in_flight_unmap_bytes_ += p1 - p0;
  d.unmaps.emplace_back(p0, p1 - p0);
  d.trimmed_bytes += p1 - p0;
  return right;
}

} // namespace gmem
