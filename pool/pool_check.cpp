// The invariant walker: is_valid(), called after each mutation in debug builds and by the
// tests. Queries and stats are in pool_query.cpp.
#include "pool/pool_impl.h"

#include <algorithm>
#include <mutex>

namespace gmem {

bool pool_impl::is_valid() const {
  std::lock_guard lock(mu_);
  return is_valid_locked();
}

// Invariants:
//  - the blocks of each segment tile it (first at base, each ends where the next starts, the
//    last at base + size), point back to it, and exactly their starts are set in `starts`
//    (each block's start is the last set bit at or before its end);
//  - no two touching blocks are both free for all, or both stream-free on the same event;
//  - free blocks are in free_[class], stream-free ones in their stream's index, live ones
//    (except one claimed by a thread waiting on an event) in live_, pending ones in the FIFO
//    with non-decreasing stamps; each index's own invariants hold;
//  - idle segments are exactly those made of one free block, arena segments excepted (they
//    are trimmed by page); arena segments are whole pages and never touch each other;
//  - a stitched range is one live block on its lent arena blocks, in page order: each starts
//    on a page, all but the last are whole pages, and their sizes add up to the range's; every
//    lent block belongs to one range (or to one being stitched); ranges count nothing in
//    reserved_bytes. A range's page j maps the arena page pages[j] (two addresses, one
//    physical page): while the range serves, the arena block there is lent to it, so a page is
//    free only when free through every address;
//  - kept ranges serve nothing and own no block: their pages are the arena's (mapped), free or
//    used through the arena's addresses; they lie apart from every segment, within the budget;
//  - the stats equal the sums over the blocks, and the slabs hold no other blocks.
bool pool_impl::is_valid_locked() const {
  std::size_t live = 0, live_requested = 0, live_blocks = 0, free_bytes = 0, free_blocks = 0;
  std::size_t pending = 0, pending_blocks = 0, stream_bytes = 0, stream_blocks = 0;
  std::size_t reserved = 0, blocks = 0, idle = 0, claimed = 0;
  std::size_t lent_blocks = 0, range_lent = 0, ranges = 0, range_bytes = 0;
  std::size_t pending_class[k_classes] = {};
  for (const auto& [base, seg] : segments_) {
    if (seg->base != base || seg->first == nullptr || seg->first->address != base ||
        seg->first->prev != nullptr)
      return false;
    if (seg->stitched) {
      const block* b = seg->first;
      if (b != seg->last || b->state != block_state::live || b->lent || page_ == 0 ||
          seg->lent.empty())
        return false;
      // Page j of the range maps arena page pages[j]; the block covers the first pages, and the
      // arena block at each of those is lent to this range: live through one address only.
      std::size_t lent_bytes = 0, pages = 0;
      for (std::size_t i = 0; i < seg->lent.size(); ++i) {
        const block* x = seg->lent[i];
        if (!x->lent || x->state != block_state::live || !x->seg->arena ||
            x->address % page_ != 0 || (i + 1 < seg->lent.size() && x->size % page_ != 0))
          return false;
        for (std::uintptr_t p = x->address; p < x->address + x->size; p += page_, ++pages)
          if (pages >= seg->pages.size() || seg->pages[pages] != p) return false;
        lent_bytes += x->size;
      }
      if (lent_bytes != seg->size || pages != seg->pages.size()) return false;
      range_lent += seg->lent.size();
      ++ranges;
      range_bytes += seg->size;
    } else {
      reserved += seg->size;
    }
    std::size_t count = 0;
    std::uintptr_t at = base;
    for (const block* b = seg->first; b != nullptr; b = b->next) {
      if (b->seg != seg.get() || b->address != at || b->size == 0 ||
          b->size % k_block_granule != 0 || (b->next != nullptr && b->next->prev != b) ||
          !seg->starts.test(seg->granule(b->address)) ||
          (seg->kind == segment_kind::oversize && b != seg->first))
        return false;
      // No other start inside b: the last start at or before b's last granule is b's own.
      // (This also exercises the summary levels; start_bitmap_test checks them directly.)
      if (seg->starts.find_prev(seg->granule(b->address + b->size - 1)) != seg->granule(b->address))
        return false;
      at += b->size;
      ++count;
      const block* n = b->next;
      switch (b->state) {
      case block_state::live:
        if (b->lent) {
          ++lent_blocks;
          break;
        }
        if (b->claimed) {
          ++claimed;
          break;
        }
        if (live_.find(b->address) != b) return false;
        live += b->size;
        live_requested += b->requested;
        ++live_blocks;
        break;
      case block_state::free:
        if (n != nullptr && n->state == block_state::free) return false;
        if (b->ev != nullptr) return false;
        free_bytes += b->size;
        ++free_blocks;
        break;
      case block_state::pending:
        pending += b->size;
        ++pending_blocks;
        pending_class[class_of(seg.get())] += b->size;
        break;
      case block_state::stream_free:
        if (b->ev != nullptr && b->ev->refs == 0) return false;
        // Same event, or both unsealed, on one stream: they would have merged.
        if (n != nullptr && n->state == block_state::stream_free && n->ev == b->ev &&
            n->stream == b->stream)
          return false;
        stream_bytes += b->size;
        ++stream_blocks;
        break;
      }
    }
    if (at != base + seg->size || seg->last == nullptr || seg->last->next != nullptr ||
        seg->last->seg != seg.get())
      return false;
    blocks += count;
    bool whole_free = seg->first->state == block_state::free && seg->first->size == seg->size;
    if (whole_free && !seg->arena) {
      if (!seg->idle) return false;
    } else if (seg->idle) {
      return false;
    }
    if (seg->arena) { // whole pages, of a large class, never touching another arena segment
      if (page_ == 0 || seg->kind != segment_kind::large || base % page_ != 0 ||
          seg->size % page_ != 0)
        return false;
      segment* after = segment_of_locked(base + seg->size);
      if (after != nullptr && after->arena) return false;
    }
  }
  if (arena_tip_ != nullptr && segment_of_locked(arena_tip_->base) != arena_tip_) return false;
  for (const segment* s = idle_head_; s != nullptr; s = s->idle_next) {
    if (!s->idle || (s->idle_next != nullptr && s->idle_next->idle_prev != s)) return false;
    ++idle;
  }
  std::size_t idle_expected = 0;
  for (const auto& [base, seg] : segments_)
    idle_expected += seg->idle ? 1 : 0;
  if (idle != idle_expected) return false;
  // Indexes hold exactly the blocks of their kind.
  std::size_t listed_free = 0, listed_free_bytes = 0;
  for (unsigned cls = 0; cls < k_classes; ++cls) {
    if (!free_[cls].is_valid()) return false;
    bool ok = true;
    free_[cls].for_each(
        [&](block* b) { ok &= b->state == block_state::free && class_of(b->seg) == cls; });
    if (!ok) return false;
    listed_free += free_[cls].count();
    listed_free_bytes += free_[cls].bytes();
  }
  if (listed_free != free_blocks || listed_free_bytes != free_bytes) return false;
  std::size_t listed_stream = 0, listed_stream_bytes = 0;
  for (const auto& sc : streams_) {
    std::size_t fifo_bytes = 0, fifo_bytes_expected = 0, unsealed = 0;
    std::uint64_t stamp = 0;
    for (const block* b = sc->fifo_head; b != nullptr; b = b->fifo_next) {
      if (b->state != block_state::stream_free || b->stream != sc->stream || b->stamp < stamp ||
          (b->fifo_next == nullptr ? sc->fifo_tail != b : b->fifo_next->fifo_prev != b) ||
          b->freed_seq > free_seq_)
        return false;
      stamp = b->stamp;
      fifo_bytes += b->size;
      unsealed += b->ev == nullptr ? 1 : 0;
    }
    if (unsealed != sc->unsealed) return false;
    for (unsigned cls = 0; cls < k_classes; ++cls) {
      if (!sc->index[cls].is_valid()) return false;
      bool ok = true;
      sc->index[cls].for_each([&](block* b) {
        ok &= b->state == block_state::stream_free && b->stream == sc->stream &&
              class_of(b->seg) == cls;
      });
      if (!ok) return false;
      listed_stream += sc->index[cls].count();
      fifo_bytes_expected += sc->index[cls].bytes();
      listed_stream_bytes += sc->index[cls].bytes();
    }
    if (fifo_bytes != fifo_bytes_expected) return false;
  }
  if (listed_stream != stream_blocks || listed_stream_bytes != stream_bytes) return false;
  std::size_t fifo = 0;
  std::uint64_t last_stamp = 0;
  for (const block* b = pending_head_; b != nullptr; b = b->fifo_next) {
    if (b->state != block_state::pending || b->stamp < last_stamp || b->stamp > seq_) return false;
    last_stamp = b->stamp;
    if (b->fifo_next == nullptr && b != pending_tail_) return false;
    ++fifo;
  }
  if (fifo != pending_blocks) return false;
  if (!live_.is_valid() || live_.size() != live_blocks) return false;
  if (blocks_.in_use() != blocks) return false;
  if (claimed > 0 && st_.live_blocks != live_blocks) return false;
  if (lent_blocks != range_lent + lending_blocks_ || st_.stitched_ranges != ranges ||
      st_.stitched_bytes != range_bytes)
    return false;
  // Kept ranges: apart from every segment and each other, within the budget, and mapping
  // distinct pages the arena still maps (it gives a page back only with the ranges on it).
  std::size_t kept_bytes = 0;
  std::uintptr_t kept_end = 0;
  for (const auto& [base, k] : kept_) {
    const std::size_t bytes = k.pages.size() * page_;
    if (k.pages.empty() || base < kept_end || base % page_ != 0 ||
        segment_of_locked(base) != nullptr || segment_of_locked(base + bytes - 1) != nullptr ||
        k.last_use > kept_uses_)
      return false;
    std::vector<std::uintptr_t> sorted = k.pages;
    std::sort(sorted.begin(), sorted.end());
    if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) return false;
    for (std::uintptr_t p : k.pages) {
      const segment* a = segment_of_locked(p);
      if (p % page_ != 0 || a == nullptr || !a->arena) return false;
    }
    kept_bytes += bytes;
    kept_end = base + bytes;
  }
  if (st_.kept_ranges != kept_.size() || st_.kept_range_bytes != kept_bytes ||
      kept_.size() > opt_.stitch_keep_ranges || kept_bytes > opt_.stitch_keep_bytes)
    return false;
  return st_.live_bytes == live && st_.live_requested_bytes == live_requested &&
         st_.live_blocks == live_blocks && st_.reserved_bytes == reserved &&
         st_.segments == segments_.size() && st_.pending_bytes == pending &&
         st_.pending_blocks == pending_blocks && st_.stream_free_bytes == stream_bytes &&
         pending_class_bytes_[0] == pending_class[0] && pending_class_bytes_[1] == pending_class[1];
}

} // namespace gmem
