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
// reserved_bytes. At its free the lent blocks go back to the arena with the free's safety, as
// the block itself would have (pending until a fence, or stream-free on the freeing stream),
// and merge with their neighbours as any freed block.
//
// Kept ranges: the freed range keeps its mapping (kept_), so one physical page may stay mapped
// at two addresses, the arena's and the range's. Its pages serve arena blocks meanwhile; a
// later request of as many pages reuses it, with no driver call, when the pages it needs
// are free for all in the arena (then lent again). A kept range is thus simply unavailable
// while any of those pages is in use through another address. Kept ranges are given back
// (upstream::unstitch, which the upstream performs once device work issued before it is done)
// least recently used first beyond stitch_keep_ranges / stitch_keep_bytes, and before the
// arena unmaps one of their pages; with stitch_keep_ranges 0, at the free.
//
// The time budget: new ranges only while the host time in stitch and unstitch calls is below
// stitch_time_share of the pool's age (at least stitch_time_floor_ns); past it the arena grows
// instead.
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

void pool_impl::release_range_locked(block* b, stream_handle s) {
  segment* range = b->seg;
  return_pages_locked(range, s, unstitch_events_);
  --st_.stitched_ranges;
  st_.stitched_bytes -= b->size;
  const std::size_t pages = range->pages.size();
  if (opt_.stitch_keep_ranges == 0) {
    unstitches_.push_back({range->base, b->size, pages});
  } else { // the observer hears that it serves nothing now; the mapping stays
    unstitches_.push_back({range->base, b->size, 0});
    kept_range& k = kept_[range->base];
    k.pages = std::move(range->pages);
    k.last_use = ++kept_uses_;
    ++st_.kept_ranges;
    st_.kept_range_bytes += pages * page_;
  }
  unstitch_queued_.store(true, std::memory_order_relaxed);
  range->first = range->last = nullptr;
  blocks_.put(b);
  drop_segment_locked(range);
  enforce_keep_budget_locked();
}

void pool_impl::release_kept_locked(std::map<std::uintptr_t, kept_range>::iterator it) {
  const std::size_t pages = it->second.pages.size();
  unstitches_.push_back({it->first, pages * page_, pages, true});
  unstitch_queued_.store(true, std::memory_order_relaxed);
  --st_.kept_ranges;
  st_.kept_range_bytes -= pages * page_;
  kept_.erase(it);
}

void pool_impl::enforce_keep_budget_locked() {
  while (!kept_.empty() && (st_.kept_ranges > opt_.stitch_keep_ranges ||
                            st_.kept_range_bytes > opt_.stitch_keep_bytes)) {
    auto lru = kept_.begin();
    for (auto it = kept_.begin(); it != kept_.end(); ++it)
      if (it->second.last_use < lru->second.last_use) lru = it;
    release_kept_locked(lru);
  }
}

void pool_impl::release_kept_touching_locked(std::uintptr_t p0, std::uintptr_t p1) {
  auto touches = [&](const std::vector<std::uintptr_t>& pages) {
    return std::any_of(pages.begin(), pages.end(),
                       [&](std::uintptr_t p) { return p >= p0 && p < p1; });
  };
  for (auto it = kept_.begin(); it != kept_.end();) {
    if (touches(it->second.pages))
      release_kept_locked(it++);
    else
      ++it;
  }
}

bool pool_impl::stitch_budget_spent() const {
  if (opt_.stitch_time_share >= 1.0) return false;
  const double spent = static_cast<double>(stitch_ns_.load(std::memory_order_relaxed));
  const std::uint64_t age = std::max(now_ns() - start_ns_, opt_.stitch_time_floor_ns);
  return spent > opt_.stitch_time_share * static_cast<double>(age);
}

// Which kept ranges could serve `size`: those of its page count (so that a serving range's
// pages are all lent: none is the arena's to give back meanwhile), the most recently used
// first. The request needs each of the first `need` pages whole but the last,
// of which it needs the rest of `size`; all must lie in blocks free for all (free_[k_large]):
// a page in use through the arena's address, or through another range, is not.
bool pool_impl::reuse_kept_locked(std::size_t size, std::vector<block*>& lent,
                                  std::vector<std::uintptr_t>& pages, std::uintptr_t& base,
                                  bool* waiting) {
  const std::size_t need = (size + page_ - 1) / page_;
  std::vector<std::map<std::uintptr_t, kept_range>::iterator> fits;
  for (auto it = kept_.begin(); it != kept_.end(); ++it)
    if (it->second.pages.size() == need) fits.push_back(it);
  if (fits.empty()) return false;
  std::sort(fits.begin(), fits.end(),
            [](const auto& x, const auto& y) { return x->second.last_use > y->second.last_use; });
  struct span { // a free arena block as it was before any lending here
    std::uintptr_t address, end;
    block* b;
  };
  std::vector<span> spans;
  free_[k_large].for_each([&](block* b) {
    if (b->seg->arena) spans.push_back({b->address, b->address + b->size, b});
  });
  std::sort(spans.begin(), spans.end(),
            [](const span& x, const span& y) { return x.address < y.address; });
  const std::size_t none = spans.size();
  auto span_of = [&](std::uintptr_t p, std::size_t bytes) { // index, or none
    auto at = std::upper_bound(spans.begin(), spans.end(), p,
                               [](std::uintptr_t v, const span& x) { return v < x.address; });
    if (at == spans.begin() || p + bytes > (at - 1)->end) return none;
    return static_cast<std::size_t>(at - 1 - spans.begin());
  };
  auto bytes_of = [&](std::size_t i) { return i + 1 < need ? page_ : size - (need - 1) * page_; };
  // Free once fenced: free, pending and stream-free arena memory, touching runs joined.
  std::vector<std::pair<std::uintptr_t, std::uintptr_t>> fenced;
  auto add = [&](const block* b) {
    if (b->seg->arena) fenced.emplace_back(b->address, b->address + b->size);
  };
  for (const span& x : spans)
    fenced.emplace_back(x.address, x.end);
  for (const block* b = pending_head_; b != nullptr; b = b->fifo_next)
    add(b);
  for (const auto& sc : streams_)
    sc->index[k_large].for_each(add);
  std::sort(fenced.begin(), fenced.end());
  std::vector<std::pair<std::uintptr_t, std::uintptr_t>> joined;
  for (const auto& r : fenced) {
    if (!joined.empty() && joined.back().second == r.first)
      joined.back().second = r.second;
    else
      joined.push_back(r);
  }
  auto free_once_fenced = [&](std::uintptr_t p, std::size_t bytes) {
    auto at = std::upper_bound(joined.begin(), joined.end(), std::make_pair(p, ~std::uintptr_t{0}));
    return at != joined.begin() && p + bytes <= (at - 1)->second;
  };
  for (auto it : fits) {
    const std::vector<std::uintptr_t>& kp = it->second.pages;
    bool all = true, fenceable = true;
    for (std::size_t i = 0; i < need; ++i) {
      if (span_of(kp[i], bytes_of(i)) != none) continue;
      all = false;
      fenceable = fenceable && free_once_fenced(kp[i], bytes_of(i));
    }
    if (!all) {
      *waiting = *waiting || fenceable;
      continue;
    }
    // Lent page by page in address order: a block holding several of them is split at the
    // first, and what is left of it above (`rest`) holds the next.
    std::vector<std::size_t> order(need);
    for (std::size_t i = 0; i < need; ++i)
      order[i] = i;
    std::sort(order.begin(), order.end(),
              [&](std::size_t x, std::size_t y) { return kp[x] < kp[y]; });
    lent.assign(need, nullptr);
    std::size_t split = none; // the span last split
    block* rest = nullptr;
    for (std::size_t i : order) {
      const std::size_t at = span_of(kp[i], bytes_of(i));
      block* b = at == split ? rest : spans[at].b;
      split = at;
      free_[k_large].remove(b);
      if (kp[i] > b->address) {
        block* piece = split_locked(b, kp[i] - b->address);
        free_[k_large].insert(b);
        b = piece;
      }
      rest = nullptr;
      if (bytes_of(i) < b->size) {
        rest = split_locked(b, bytes_of(i));
        free_[k_large].insert(rest);
      }
      b->state = block_state::live;
      b->lent = true;
      lent[i] = b;
    }
    base = it->first;
    pages = std::move(it->second.pages);
    --st_.kept_ranges;
    st_.kept_range_bytes -= pages.size() * page_;
    kept_.erase(it);
    return true;
  }
  return false;
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
    if (c.pages != 0) {
      const std::uint64_t start = now_ns();
      up_.unstitch(c.base, c.pages);
      stitch_ns_.fetch_add(now_ns() - start, std::memory_order_relaxed);
    }
    if (obs_ != nullptr && !c.observed) obs_->on_unstitch(c.base, c.bytes);
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
  if (!opt_.stitch || page_ == 0 || size <= page_ || !up_.can_stitch() || stitch_budget_spent())
    return 0;
  const std::size_t need = (size + page_ - 1) / page_;
  const std::size_t have = free_whole_pages_locked();
  if (have >= need) return 0; // stitching failed for another reason: grow as usual
  const std::size_t lack = (need - have) * page_;
  return lack < bytes ? lack : 0;
}

// 3c, before growing: a kept range whose pages are free serves the request with no driver
// call; else, within the time budget, the arena's wholly free pages add up to the request. The
// lent pages are out of every index while the upstream stitches them without the lock; if it
// cannot, they are free again and the arena grows.
pool_impl::step pool_impl::stitch(slow_walk& w, std::unique_lock<spin_mutex>& lock,
                                  alloc_result& out) {
  if (w.taken(rung::stitch) || !opt_.stitch || page_ == 0 || w.cls != k_large || w.size <= page_ ||
      !up_.can_stitch())
    return step::down;
  w.take(rung::stitch);
  // Pending pages would count once fenced: a fence (about a microsecond) first, then this step
  // again (and growing maps only what the free pages lack: grow, stitch_top_up_locked).
  auto fence_first = [&] {
    if (w.taken(rung::fence) || pending_or_stream_bytes_locked(k_large, w.s) == 0) return false;
    w.take(rung::fence);
    w.taken_steps &= ~(1u << static_cast<unsigned>(rung::stitch));
    lock.unlock();
    fence_now();
    return true;
  };
  std::vector<block*> lent;
  std::vector<std::uintptr_t> pages;
  std::uintptr_t base = 0;
  bool waiting = false;
  const bool reused = reuse_kept_locked(w.size, lent, pages, base, &waiting);
  if (!reused) {
    if (waiting && fence_first()) return step::again; // a kept range may fit once fenced
    if (stitch_budget_spent()) {
      if (free_whole_pages_locked() >= (w.size + page_ - 1) / page_) ++st_.stitch_budget_grows;
      return step::down;
    }
    if (!lend_pages_locked(w.size, lent)) return fence_first() ? step::again : step::down;
    for (const block* x : lent)
      for (std::uintptr_t p = x->address; p < x->address + x->size; p += page_)
        pages.push_back(p);
    check_locked();
    lock.unlock();
    const std::uint64_t start = now_ns();
    base = up_.stitch(pages.data(), pages.size());
    stitch_ns_.fetch_add(now_ns() - start, std::memory_order_relaxed);
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
  }
  segment* range = new_segment_locked(base, w.size, segment_kind::large);
  range->stitched = true;
  range->pages = std::move(pages);
  range->lent = std::move(lent);
  range->starts.set(0);
  block* b = blocks_.get();
  b->address = base;
  b->size = w.size;
  b->seg = range;
  range->first = range->last = b;
  ++(reused ? st_.kept_reuses : st_.stitches);
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
