// The pool's fast paths (allocate from a free block, deallocate into a free list), the block
// bookkeeping they share with the slow paths, construction, teardown and abandon(), and the
// public wrappers.
#include "pool/pool_impl.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace gmem {

namespace {
std::uint64_t next_pool_id() {
  static std::atomic<std::uint64_t> last{0};
  return last.fetch_add(1, std::memory_order_relaxed) + 1;
}
} // namespace

pool_impl::pool_impl(upstream& up, fences& fe, const pool_options& options, pool_observer* observer)
    : up_(up), fe_(fe), id_(next_pool_id()), opt_(options), obs_(observer), start_ns_(now_ns()) {
  opt_.small_segment_bytes =
      round_up(std::max(opt_.small_segment_bytes, k_block_granule), k_block_granule);
  opt_.large_segment_bytes =
      round_up(std::max(opt_.large_segment_bytes, k_block_granule), k_block_granule);
  opt_.segment_granule_bytes =
      round_up(std::max(opt_.segment_granule_bytes, k_block_granule), k_block_granule);
  opt_.small_max_bytes = std::min(opt_.small_max_bytes, opt_.small_segment_bytes);
  opt_.fence_batch = std::max<std::size_t>(opt_.fence_batch, 1);
  opt_.marks = opt_.marks && opt_.barriers; // marks stand in for barriers (device memory)
  if (opt_.arena) page_ = up_.arena_page();
  if (!opt_.reuse_safety) opt_.thread_caches = false; // every free serves any stream at once
  update_oversize_locked();                           // nothing shared yet: no lock needed
  st_.limit_bytes = opt_.limit_bytes;
  // Warm-up: one small segment (when the warm-up is big enough to spare it) and the rest as
  // one segment that serves any large request.
  std::size_t warm = round_up(opt_.warmup_bytes, k_block_granule);
  if (opt_.limit_bytes != 0)
    warm = std::min(warm, opt_.limit_bytes / k_block_granule * k_block_granule);
  if (warm >= 2 * opt_.small_segment_bytes) {
    if (std::uintptr_t base = up_.map(opt_.small_segment_bytes)) {
      std::lock_guard lock(mu_);
      add_segment_locked(base, opt_.small_segment_bytes, segment_kind::small);
      warm -= opt_.small_segment_bytes;
    }
  }
  if (warm > 0 && page_ != 0) { // the arena's pages, within the limit
    const std::size_t whole = round_up(warm, page_);
    warm = opt_.limit_bytes == 0 || whole <= opt_.limit_bytes ? whole : warm / page_ * page_;
    if (std::uintptr_t base = warm != 0 ? up_.extend(0, warm) : 0) {
      deferred d;
      {
        std::lock_guard lock(mu_);
        add_arena_locked(base, warm, d);
      }
      run_deferred(d);
    }
  } else if (warm > 0) {
    if (std::uintptr_t base = up_.map(warm)) {
      std::lock_guard lock(mu_);
      add_segment_locked(base, warm, segment_kind::large);
    }
  }
}

pool_impl::~pool_impl() {
  {
    std::lock_guard guard(caches_mutex());
    std::lock_guard lock(mu_);
    detach_caches_locked();
  }
  std::vector<event_ref*> refs; // each shared event released once
  for (auto& sc : streams_)
    for (auto& index : sc->index)
      index.for_each([&](block* b) {
        if (b->ev != nullptr) refs.push_back(b->ev);
      });
  std::sort(refs.begin(), refs.end());
  refs.erase(std::unique(refs.begin(), refs.end()), refs.end());
  for (event_ref* r : refs)
    fe_.release(r->event);
  for (const unstitch_call& c : unstitches_)
    up_.unstitch(c.base, c.pages);
  for (event_handle e : unstitch_events_)
    fe_.release(e);
  if (mark_.ev != 0) fe_.release(mark_.ev);
  for (const auto& [base, k] : kept_) // stitched ranges first: they map arena pages
    up_.unstitch(base, k.pages.size());
  for (auto& [base, seg] : segments_)
    if (seg->stitched) up_.unstitch(base, seg->pages.size());
  for (auto& [base, seg] : segments_)
    if (!seg->stitched) up_.unmap(base, seg->size);
}

// Forgets every segment and block without unmapping or releasing events (the context is gone,
// or the process exits).
void pool_impl::abandon() {
  std::lock_guard mark_lock(mark_mu_);
  mark_.ev = 0; // it dies with the context
  std::lock_guard guard(caches_mutex());
  std::lock_guard lock(mu_);
  detach_caches_locked();
  segments_.clear();
  for (auto& index : free_)
    index = free_index{};
  streams_.clear();
  last_stream_ = nullptr;
  live_.clear();
  pending_head_ = pending_tail_ = nullptr;
  for (auto& n : pending_class_bytes_)
    n = 0;
  idle_head_ = nullptr;
  unstitches_.clear();
  unstitch_events_.clear();
  unstitch_queued_.store(false, std::memory_order_relaxed);
  lending_blocks_ = 0;
  kept_.clear();
  blocks_ = slab<block>{};
  events_ = slab<event_ref>{}; // their events die with the context
  st_.live_bytes = st_.live_requested_bytes = st_.live_blocks = 0;
  st_.reserved_bytes = st_.segments = 0;
  st_.pending_bytes = st_.pending_blocks = st_.stream_free_bytes = 0;
  st_.stitched_ranges = st_.stitched_bytes = 0;
  st_.kept_ranges = st_.kept_range_bytes = 0;
}

stream_cache* pool_impl::find_stream_locked(stream_handle s) const {
  if (last_stream_ != nullptr && last_stream_->stream == s) return last_stream_;
  for (const auto& sc : streams_)
    if (sc->stream == s) return last_stream_ = sc.get();
  return nullptr;
}

stream_cache* pool_impl::get_stream_locked(stream_handle s) {
  if (stream_cache* sc = find_stream_locked(s)) return sc;
  streams_.push_back(std::make_unique<stream_cache>());
  streams_.back()->stream = s;
  return last_stream_ = streams_.back().get();
}

// Oversize requests take an oversize segment only when it wastes little (it is never split),
// else space in a large segment (the warm-up segment, say), else they get a new segment.
block* pool_impl::find_fit_locked(std::size_t size, unsigned cls, stream_handle s) const {
  if (cls != k_oversize) return find_fit_in_locked(size, cls, s);
  block* b = find_fit_in_locked(size, k_oversize, s);
  auto waste_ok = [&](const block* x) {
    return static_cast<double>(x->size - size) <=
           opt_.oversize_max_waste * static_cast<double>(size) +
               static_cast<double>(opt_.segment_granule_bytes);
  };
  if (b != nullptr && waste_ok(b)) return b;
  return find_fit_in_locked(size, k_large, s);
}

block* pool_impl::find_fit_in_locked(std::size_t size, unsigned cls, stream_handle s) const {
  // The stream's own freed blocks first: an exact fit there (the common alloc/free/alloc
  // cycle on one stream) needs no second search.
  block* t = nullptr;
  if (s != k_no_stream && !streams_.empty()) {
    if (stream_cache* sc = find_stream_locked(s)) {
      t = sc->index[cls].find_fit(size);
      if (t != nullptr && t->size == size) return t;
    }
  }
  block* b = free_[cls].find_fit(size);
  return t != nullptr && (b == nullptr || t->size <= b->size) ? t : b;
}

void pool_impl::unlist_locked(block* b) {
  unsigned cls = class_of(b->seg);
  if (b->state == block_state::free) {
    free_[cls].remove(b);
    if (b->size == b->seg->size) idle_remove_locked(b->seg);
  } else { // stream_free
    stream_cache* sc = find_stream_locked(b->stream);
    sc->index[cls].remove(b);
    sc->fifo_remove(b);
    if (b->ev == nullptr) --sc->unsealed;
    st_.stream_free_bytes -= b->size;
  }
}

block* pool_impl::split_locked(block* b, std::size_t offset) {
  block* r = blocks_.get();
  r->address = b->address + offset;
  r->size = b->size - offset;
  r->seg = b->seg;
  r->state = b->state;
  r->prev = b;
  r->next = b->next;
  if (b->next != nullptr)
    b->next->prev = r;
  else
    b->seg->last = r;
  b->next = r;
  b->size = offset;
  b->seg->starts.set(b->seg->granule(r->address));
  return r;
}

void pool_impl::carve_locked(block* b, std::size_t size) {
  std::size_t rest = b->size - size;
  if (b->seg->kind == segment_kind::oversize) return; // one block per oversize segment
  std::size_t min_rest = b->seg->kind == segment_kind::small
                             ? k_block_granule
                             : std::max(opt_.large_split_min_bytes, k_block_granule);
  if (rest < min_rest) return;
  block* r = split_locked(b, size);
  // The rest keeps b's safety; its other neighbour cannot merge with it (b would have).
  if (b->state == block_state::free) {
    free_[class_of(b->seg)].insert(r);
  } else {
    r->stream = b->stream;
    r->ev = b->ev;
    r->stamp = b->stamp;
    r->freed_seq = b->freed_seq;
    stream_cache* sc = find_stream_locked(r->stream);
    if (r->ev != nullptr)
      ++r->ev->refs;
    else
      ++sc->unsealed;
    sc->index[class_of(r->seg)].insert(r);
    sc->fifo_insert_after(b->fifo_prev, r); // where b was (unlist_locked kept b's links)
    st_.stream_free_bytes += rest;
  }
}

alloc_result pool_impl::make_live_locked(block* b, std::size_t requested, stream_handle s,
                                         event_handle& release, thread_cache* tag) {
  release = drop_event_locked(b);
  b->state = block_state::live;
  b->requested = requested;
  b->stream = s;
  b->owner = tag;
  live_.insert(b->address, b);
  st_.live_bytes += b->size;
  st_.live_requested_bytes += requested;
  ++st_.live_blocks;
  ++st_.total_allocs;
  st_.total_alloc_bytes += b->size;
  if (st_.live_bytes > st_.peak_live_bytes) st_.peak_live_bytes = st_.live_bytes;
  if (st_.live_bytes > window_peak_live_) window_peak_live_ = st_.live_bytes;
  if (++window_allocs_ == opt_.grow_window_allocs) { // a new window (never when 0)
    window_allocs_ = 0;
    prev_window_peak_live_ = window_peak_live_;
    window_peak_live_ = st_.live_bytes;
  }
  return alloc_result{b->address, pool_status::ok, b->size};
}

event_handle pool_impl::drop_event_locked(block* b) {
  event_ref* r = b->ev;
  if (r == nullptr) return 0;
  b->ev = nullptr;
  if (--r->refs != 0) return 0;
  event_handle e = r->event;
  events_.put(r);
  return e;
}

void pool_impl::merge_into_locked(block* left, block* right) {
  left->size += right->size;
  left->next = right->next;
  if (right->next != nullptr)
    right->next->prev = left;
  else
    left->seg->last = left;
  left->seg->starts.clear((right->address - left->seg->base) / k_block_granule);
  blocks_.put(right);
}

void pool_impl::insert_free_locked(block* b) {
  b->state = block_state::free;
  unsigned cls = class_of(b->seg);
  if (block* p = b->prev; p != nullptr && p->state == block_state::free) {
    free_[cls].remove(p);
    merge_into_locked(p, b);
    b = p;
  }
  if (block* n = b->next; n != nullptr && n->state == block_state::free) {
    free_[cls].remove(n);
    merge_into_locked(b, n);
  }
  free_[cls].insert(b);
  if (b->size == b->seg->size && !b->seg->arena) idle_push_locked(b->seg);
}

// Stream-free neighbours on the same stream merge when they share the event, when either is
// unsealed (the event a later seal records on the stream covers both frees: the merged block
// stays unsealed), or when one thread sealed both: then the later event covers both frees and
// the merged block keeps it. The merged block keeps the later stamp and free order; the
// event it gives up loses a reference (returned for release).
void pool_impl::insert_stream_free_locked(block* b, stream_cache& sc, event_handle (&released)[2]) {
  b->state = block_state::stream_free;
  unsigned cls = class_of(b->seg);
  free_index& index = sc.index[cls];
  if (b->ev == nullptr) ++sc.unsealed;
  auto mergeable = [&](const block* x) {
    return x != nullptr && x->state == block_state::stream_free && x->stream == b->stream &&
           (x->ev == nullptr || b->ev == nullptr || x->ev == b->ev ||
            x->ev->thread == b->ev->thread);
  };
  int k = 0;
  // keep absorbs gone (already out of the index and the FIFO); keep ends with the later event
  // (no event, unsealed, is the latest of all).
  auto absorb = [&](block* keep, block* gone) {
    sc.unsealed -= (keep->ev == nullptr ? 1u : 0u) + (gone->ev == nullptr ? 1u : 0u);
    event_ref* drop = gone->ev; // the reference given up
    if (keep->ev != gone->ev && keep->ev != nullptr &&
        (gone->ev == nullptr || gone->ev->seq > keep->ev->seq)) {
      drop = keep->ev;
      keep->ev = gone->ev;
    }
    keep->stamp = std::max(keep->stamp, gone->stamp);
    keep->freed_seq = std::max(keep->freed_seq, gone->freed_seq);
    if (keep->ev == nullptr) ++sc.unsealed;
    if (drop != nullptr && --drop->refs == 0) { // never the kept event: keep still holds it
      released[k++] = drop->event;
      events_.put(drop);
    }
    merge_into_locked(keep, gone);
  };
  if (block* p = b->prev; mergeable(p)) {
    index.remove(p);
    sc.fifo_remove(p);
    st_.stream_free_bytes -= p->size;
    absorb(p, b);
    b = p;
  }
  if (block* n = b->next; mergeable(n)) {
    index.remove(n);
    sc.fifo_remove(n);
    st_.stream_free_bytes -= n->size;
    absorb(b, n);
  }
  index.insert(b);
  sc.fifo_insert_sorted(b);
  st_.stream_free_bytes += b->size;
}

void pool_impl::enforce_cache_cap_locked(deferred& d) {
  while (idle_head_ != nullptr && free_bytes_locked() > opt_.max_cached_bytes)
    detach_segment_locked(idle_head_, d);
  if (page_ != 0 && free_bytes_locked() > opt_.max_cached_bytes)
    trim_arena_locked(opt_.max_cached_bytes, d);
}

void pool_impl::run_deferred(deferred& d) {
  if (!d.any()) return;
  if (d.few_count == 1 && d.unmaps.empty() &&
      d.segment_events.empty()) { // the fast path's one event
    fe_.release(d.few[0]);
    return;
  }
  std::size_t unmapped = 0;
  if (!d.unmaps.empty()) drain_unstitches(); // kept ranges on those pages go first
  for (auto [base, bytes] : d.unmaps) {
    up_.unmap(base, bytes);
    unmapped += bytes;
  }
  if (obs_ != nullptr)
    for (const auto& e : d.segment_events) {
      if (e.mapped)
        obs_->on_segment_map(e.base, e.bytes);
      else
        obs_->on_segment_unmap(e.base, e.bytes);
    }
  if (unmapped != 0) {
    std::lock_guard lock(mu_);
    in_flight_unmap_bytes_ -= unmapped;
  }
  if (d.trimmed_bytes != 0 && obs_ != nullptr) obs_->on_trim(d.trimmed_bytes);
  for (std::size_t i = 0; i < d.few_count; ++i)
    fe_.release(d.few[i]);
  for (event_handle e : d.more)
    fe_.release(e);
}

void pool_impl::check_locked() const {
#ifdef GMEM_DEBUG
  if (!is_valid_locked()) {
    std::fprintf(stderr, "gmem: pool: internal structures are inconsistent after an update "
                         "(is_valid failed); aborting\n");
    std::abort();
  }
#endif
}

alloc_result pool_impl::allocate(std::size_t bytes, stream_handle s) {
  if (bytes > (std::size_t{1} << 62)) { // no device has this; also keeps rounding exact
    {
      std::lock_guard lock(mu_);
      ++st_.ooms;
    }
    if (obs_ != nullptr) obs_->on_oom(bytes);
    return alloc_result{0, pool_status::out_of_memory, 0};
  }
  const std::size_t size = round_up(bytes == 0 ? 1 : bytes, k_block_granule);
  if (s != k_no_stream && opt_.thread_caches && size <= thread_cache::k_max_block)
    if (thread_cache* c = this_thread_cache(id_, this)) return allocate_cached(*c, size, bytes, s);
  return allocate_shared(size, bytes, s, nullptr);
}

alloc_result pool_impl::allocate_shared(std::size_t size, std::size_t requested, stream_handle s,
                                        thread_cache* tag) {
  const unsigned cls = class_of_size(size);
  {
    event_handle release = 0;
    std::unique_lock lock(mu_);
    if (block* b = find_fit_locked(size, cls, s); b != nullptr && !fence_first_locked(size, cls)) {
      alloc_result r = take_locked(b, size, requested, s, release, tag);
      ++st_.cache_hits;
      check_locked();
      lock.unlock();
      if (release != 0) fe_.release(release);
      return r;
    }
  }
  return allocate_slow(size, requested, s, tag);
}

void pool_impl::make_pending_locked(block* b, std::uint64_t stamp) {
  b->state = block_state::pending;
  b->stamp = stamp;
  if (pending_tail_ == nullptr || pending_tail_->stamp <= stamp) { // the usual case: at the end
    b->fifo_next = nullptr;
    if (pending_tail_ != nullptr)
      pending_tail_->fifo_next = b;
    else
      pending_head_ = b;
    pending_tail_ = b;
  } else if (pending_head_->stamp > stamp) {
    b->fifo_next = pending_head_;
    pending_head_ = b;
  } else { // an older free (a destroyed stream's): in stamp order
    block* at = pending_head_;
    while (at->fifo_next->stamp <= stamp)
      at = at->fifo_next;
    b->fifo_next = at->fifo_next;
    at->fifo_next = b;
  }
  st_.pending_bytes += b->size;
  ++st_.pending_blocks;
  pending_class_bytes_[class_of(b->seg)] += b->size;
}

void pool_impl::release_block_locked(block* b, stream_handle s, event_handle (&released)[2],
                                     std::unique_ptr<deferred>* d, bool program_free) {
  st_.live_bytes -= b->size;
  st_.live_requested_bytes -= b->requested;
  --st_.live_blocks;
  if (program_free) ++st_.total_frees;
  b->requested = 0;
  b->owner = nullptr;
  if (b->seg->stitched) { // its pages go back to the arena with this free's safety
    release_range_locked(b, s);
  } else if (!opt_.reuse_safety) {
    insert_free_locked(b);
  } else if (s == k_no_stream) { // stream-less: pending
    make_pending_locked(b, seq_);
  } else { // stream-free, unsealed: reusable at once on s, by others once sealed
    stream_cache* sc = get_stream_locked(s);
    sc->retiring = false; // a free on s: the program uses the handle (again)
    b->ev = nullptr;
    b->stream = s;
    b->stamp = seq_;
    b->freed_seq = ++free_seq_;
    insert_stream_free_locked(b, *sc, released);
  }
  if (d != nullptr && (idle_head_ != nullptr || page_ != 0) && opt_.max_cached_bytes != SIZE_MAX &&
      free_bytes_locked() > opt_.max_cached_bytes) {
    if (!*d) *d = std::make_unique<deferred>();
    enforce_cache_cap_locked(**d);
  }
}

// No driver call on this path: a free on a stream leaves its block unsealed (no event yet);
// the slow path records one event per stream for many frees when another stream needs them.
pool_status pool_impl::deallocate(std::uintptr_t address, stream_handle s) {
  if (opt_.thread_caches)
    if (thread_cache* c = this_thread_cache(id_, nullptr)) {
      const pool_status status = deallocate_cached(*c, address, s);
      if (status != pool_status::not_owned) return status;
    }
  return deallocate_shared(address, s, false);
}

pool_status pool_impl::deallocate_shared(std::uintptr_t address, stream_handle s, bool from_cache) {
  std::unique_ptr<deferred> d; // only when the cache cap trims (rare; keeps the fast path lean)
  event_handle released[2] = {};
  pool_status status = pool_status::ok;
  {
    std::lock_guard lock(mu_);
    block* b = live_.erase(address); // one probe; put back below on a double free (rare)
    if (b != nullptr && b->owner != nullptr && !from_cache && !untag_locked(b)) {
      live_.insert(address, b); // freed already: it waits in its owner's cache
      b = nullptr;
    }
    if (b == nullptr) {
      status = segment_of_locked(address) != nullptr || kept_of_locked(address)
                   ? pool_status::invalid
                   : pool_status::not_owned;
      if (status == pool_status::invalid) ++st_.invalid_frees;
    } else {
      release_block_locked(b, s, released, &d, true);
      check_locked();
    }
  }
  for (event_handle e : released)
    if (e != 0) fe_.release(e);
  if (d) run_deferred(*d);
  drain_unstitches();
  return status;
}

// --- public wrappers ---

pool::pool(upstream& up, fences& fe, const pool_options& options, pool_observer* observer)
    : impl_(std::make_unique<pool_impl>(up, fe, options, observer)) {}
pool::~pool() = default;
alloc_result pool::allocate(std::size_t bytes, stream_handle s) {
  return impl_->allocate(bytes, s);
}
pool_status pool::deallocate(std::uintptr_t address, stream_handle s) {
  return impl_->deallocate(address, s);
}
std::optional<block_info> pool::find(std::uintptr_t a) const {
  return impl_->find(a);
}
bool pool::owns(std::uintptr_t a) const {
  return impl_->owns(a);
}
std::uint64_t pool::begin_external_fence() {
  return impl_->begin_fence();
}
void pool::end_external_fence(std::uint64_t ticket) {
  impl_->end_fence(ticket, 0);
}
void pool::stream_synchronized(stream_handle s) {
  impl_->end_stream_sync(s, ~std::uint64_t{0});
}
std::uint64_t pool::begin_stream_sync() {
  return impl_->begin_fence();
}
void pool::end_stream_sync(stream_handle s, std::uint64_t ticket) {
  impl_->end_stream_sync(s, ticket);
}
void pool::stream_destroying(stream_handle s) {
  impl_->stream_destroying(s);
}
std::size_t pool::trim(std::size_t keep_free_bytes) {
  return impl_->trim(keep_free_bytes);
}
void pool::set_limit(std::size_t bytes) {
  impl_->set_limit(bytes);
}
void pool::abandon() {
  impl_->abandon();
}
pool_stats pool::stats() const {
  return impl_->stats();
}
spin_mutex::contention pool::lock_contention() const {
  return impl_->lock_contention();
}
pool::slow_path_counters pool::slow_path() const {
  return impl_->slow_path();
}
void pool::reset_peaks() {
  impl_->reset_peaks();
}
void pool::for_each_segment(const std::function<void(const segment_view&)>& f) const {
  impl_->for_each_segment(f);
}
bool pool::is_valid() const {
  return impl_->is_valid();
}
const pool_options& pool::options() const {
  return impl_->options();
}

} // namespace gmem
