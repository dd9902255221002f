// Stitched ranges (pool_options::stitch). The arena grows where it ends, so a large request
// that no free block fits maps new pages even while the arena's free pages, scattered between
// live blocks, add up to it. Stitching serves it from those pages instead: the upstream maps
// their physical memory, in order, into a fresh range of address space (upstream::stitch),
// and the request gets that range. Nothing is copied and no memory is created.
//
// While the range lives, the arena memory it maps is "lent": live blocks of the arena that
// are not the program's (block::lent, not in live_), so nothing else is carved from them.
// Every lent block starts on a page; all but the last are whole pages, and the last only
// covers what the request needs of its page: the rest of that page stays free in the arena
// (two addresses for one physical page, used by two owners at disjoint offsets). A stitched
// range is a segment of one live block (segment::stitched) that counts nothing in
// reserved_bytes. Its free dissolves it: the lent blocks go back to the arena with the free's
// safety, as the block itself would have (pending until a fence, or stream-free on the
// freeing stream), and merge with their neighbours as any freed block; the range is queued for
// upstream::unstitch, which the upstream performs once device work issued before it is done.
//
// Trade of the page: only whole free pages are stitched, so free space inside pages that a
// live block touches stays unused, and the lent pages are pinned while the range lives.
#include "pool/pool_impl.h"

#include <algorithm>
#include <mutex>

namespace gmem {

bool pool_impl::lend_pages_locked(std::size_t size, std::vector<block*>& lent) {
  struct run {
    block* b;
    std::uintptr_t p0; // first whole page inside b
    std::size_t pages; // whole pages inside b
  };
  std::vector<run> runs;
  std::size_t total = 0;
  free_[k_large].for_each([&](block* b) {
    if (!b->seg->arena) return;
    const std::uintptr_t p0 = round_up(b->address, page_);
    const std::uintptr_t p1 = round_down(b->address + b->size, page_);
    if (p1 <= p0) return;
    runs.push_back({b, p0, (p1 - p0) / page_});
    total += (p1 - p0) / page_;
  });
  const std::size_t need = (size + page_ - 1) / page_;
  if (total < need) return false;
  // The shortest runs first: long runs stay whole for the requests they can serve contiguously.
  std::sort(runs.begin(), runs.end(), [](const run& x, const run& y) {
    return x.pages != y.pages ? x.pages < y.pages : x.p0 < y.p0;
  });
  std::size_t left = size;
  for (const run& r : runs) {
    if (left == 0) break;
    const std::size_t bytes = std::min(left, r.pages * page_);
    block* b = r.b;
    free_[k_large].remove(b);
    if (r.p0 > b->address) { // the part before the first whole page stays free
      block* piece = split_locked(b, r.p0 - b->address);
      free_[k_large].insert(b);
      b = piece;
    }
    if (bytes < b->size) free_[k_large].insert(split_locked(b, bytes)); // the rest stays free
    b->state = block_state::live;
    b->lent = true;
    lent.push_back(b);
    left -= bytes;
  }
  lending_blocks_ += lent.size();
  return true;
}

void pool_impl::return_pages_locked(segment* range, stream_handle s,
                                    std::vector<event_handle>& events) {
  stream_cache* sc = nullptr;
  std::uint64_t freed_seq = 0;
  if (opt_.reuse_safety && s != k_no_stream) {
    sc = get_stream_locked(s);
    sc->retiring = false; // a free on s: the program uses the handle (again)
    freed_seq = ++free_seq_;
  }
  for (block* x : range->lent) {
    x->lent = false;
    if (!opt_.reuse_safety) {
      insert_free_locked(x);
    } else if (sc == nullptr) {
      make_pending_locked(x, seq_);
    } else {
      x->ev = nullptr;
      x->stream = s;
      x->stamp = seq_;
      x->freed_seq = freed_seq;
      event_handle released[2] = {};
      insert_stream_free_locked(x, *sc, released);
      for (event_handle e : released)
        if (e != 0) events.push_back(e);
    }
  }
  range->lent.clear();
}

void pool_impl::dissolve_locked(block* b, stream_handle s) {
  segment* range = b->seg;
  return_pages_locked(range, s, unstitch_events_);
  --st_.stitched_ranges;
  st_.stitched_bytes -= b->size;
  unstitches_.push_back({range->base, range->size, range->stitched_pages});
  unstitch_queued_.store(true, std::memory_order_relaxed);
  range->first = range->last = nullptr;
  blocks_.put(b);
  drop_segment_locked(range);
}

void pool_impl::drain_unstitches() {
  if (!unstitch_queued_.load(std::memory_order_relaxed)) return;
  std::vector<unstitch_call> calls;
  std::vector<event_handle> events;
  {
    std::lock_guard lock(mu_);
    calls.swap(unstitches_);
    events.swap(unstitch_events_);
    unstitch_queued_.store(false, std::memory_order_relaxed);
  }
  for (const unstitch_call& c : calls) {
    up_.unstitch(c.base, c.pages);
    if (obs_ != nullptr) obs_->on_unstitch(c.base, c.bytes);
  }
  for (event_handle e : events)
    fe_.release(e);
}

std::size_t pool_impl::free_whole_pages_locked() const {
  std::size_t pages = 0;
  free_[k_large].for_each([&](const block* b) {
    if (!b->seg->arena) return;
    const std::uintptr_t p0 = round_up(b->address, page_);
    const std::uintptr_t p1 = round_down(b->address + b->size, page_);
    if (p1 > p0) pages += (p1 - p0) / page_;
  });
  return pages;
}

std::size_t pool_impl::stitch_top_up_locked(std::size_t size, std::size_t bytes) const {
  if (!opt_.stitch || page_ == 0 || size <= page_ || !up_.can_stitch()) return 0;
  const std::size_t need = (size + page_ - 1) / page_;
  const std::size_t have = free_whole_pages_locked();
  if (have >= need) return 0; // stitching failed for another reason: grow as usual
  const std::size_t lack = (need - have) * page_;
  return lack < bytes ? lack : 0;
}

// 3c, before growing: the arena's wholly free pages add up to the request. The lent pages
// are out of every index while the upstream stitches them without the lock; if it cannot,
// they are free again and the arena grows.
pool_impl::step pool_impl::stitch(slow_walk& w, std::unique_lock<spin_mutex>& lock,
                                  alloc_result& out) {
  if (w.taken(rung::stitch) || !opt_.stitch || page_ == 0 || w.cls != k_large || w.size <= page_ ||
      !up_.can_stitch())
    return step::down;
  w.take(rung::stitch);
  std::vector<block*> lent;
  if (!lend_pages_locked(w.size, lent)) {
    // Pending pages would count once fenced: a fence (about a microsecond) before growing,
    // which then maps only what they lack (grow, stitch_top_up_locked).
    if (w.taken(rung::fence) || pending_or_stream_bytes_locked(k_large, w.s) == 0)
      return step::down;
    w.take(rung::fence);
    w.taken_steps &= ~(1u << static_cast<unsigned>(rung::stitch));
    lock.unlock();
    fence_now();
    return step::again;
  }
  std::vector<std::uintptr_t> pages;
  for (const block* x : lent)
    for (std::uintptr_t p = x->address; p < x->address + x->size; p += page_)
      pages.push_back(p);
  check_locked();
  lock.unlock();
  const std::uintptr_t base = up_.stitch(pages.data(), pages.size());
  lock.lock();
  lending_blocks_ -= lent.size();
  if (base == 0) { // the arena grows instead
    for (block* x : lent) {
      x->lent = false;
      insert_free_locked(x);
    }
    check_locked();
    return step::down;
  }
  segment* range = new_segment_locked(base, w.size, segment_kind::large);
  range->stitched = true;
  range->stitched_pages = pages.size();
  range->lent = std::move(lent);
  range->starts.set(0);
  block* b = blocks_.get();
  b->address = base;
  b->size = w.size;
  b->seg = range;
  range->first = range->last = b;
  ++st_.stitches;
  ++st_.stitched_ranges;
  st_.stitched_bytes += w.size;
  ++st_.cache_hits; // served from memory the pool holds
  event_handle release = 0;
  out = make_live_locked(b, w.requested, w.s, release, w.tag);
  check_locked();
  lock.unlock();
  if (obs_ != nullptr) obs_->on_stitch(base, w.size);
  if (release != 0) fe_.release(release);
  return step::done;
}

} // namespace gmem
