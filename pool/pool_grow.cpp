// The pool's slow path: what happens when no safe free block fits, as the steps of the ladder
// in pool.h's Policy (2, then 3(a)-(e)), each a function below. Also the seals, event queries
// and dependencies those steps use, fences and stream syncs; segments, trim and the limit are
// in pool_segments.cpp.
#include "pool/pool_impl.h"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <thread>

namespace gmem {

std::size_t pool_impl::pending_or_stream_bytes_locked(unsigned cls, stream_handle s) const {
  std::size_t n = pending_class_bytes_[cls];
  for (const auto& sc : streams_)
    if (sc->stream != s) n += sc->index[cls].bytes();
  return n;
}

// The ladder of pool.h's Policy, 2 and 3(a)-(e), one step at a time. Each step is called with
// mu_ held and returns `down` with it still held (it did not apply: try the next step), or
// having released it: `again` (it changed something: look for a fit once more, skipping the
// steps already taken) or `done` (the answer is in `out`). Every driver call (seal, wait,
// fence, flush, map, unmap) is made without mu_.
alloc_result pool_impl::allocate_slow(std::size_t size, std::size_t requested, stream_handle s,
                                      thread_cache* tag) {
  slow_walk w{size, requested, s, tag, class_of_size(size)};
  alloc_result out;
  const std::uint64_t start = now_ns();
  struct timed { // counts the walk however it returns
    slow_path_atomics& c;
    std::uint64_t start;
    ~timed() {
      c.walks.fetch_add(1, std::memory_order_relaxed);
      c.walk_ns.fetch_add(now_ns() - start, std::memory_order_relaxed);
    }
  } timed_walk{slow_, start};
  drain_unstitches();
  for (;;) {
    std::unique_lock lock(mu_);
    step st = take_fit(w, lock, out);                                // 2
    if (st == step::down) st = seal_other_streams(w, lock);          // 3a
    if (st == step::down) st = depend_on_other_stream(w, lock, out); // 3a
    if (st == step::down) st = use_mark(w, lock);                    // 3b
    if (st == step::down) st = fence_for_request(w, lock);           // 3b
    if (st == step::down) st = seal_own_stream(w, lock);             // 3c
    if (st == step::down) st = flush_thread_caches(w, lock);         // 3c
    if (st == step::down) st = stitch(w, lock, out);                 // 3c
    if (st == step::down) st = grow(w, lock, out);                   // 3c
    if (st == step::down) st = fence_for_reuse(w, lock);             // 3d
    if (st == step::down) st = trim_and_retry(w, lock);              // 3d
    if (st == step::down) st = fail(w, lock, out);                   // 3e
    if (st == step::done) return out;
  }
}

// 2. A safe free block fits; in the arena, not before the fence of 3b when pending blocks
// could serve fence_batch such requests (fence_first_locked).
pool_impl::step pool_impl::take_fit(slow_walk& w, std::unique_lock<spin_mutex>& lock,
                                    alloc_result& out) {
  block* b = find_fit_locked(w.size, w.cls, w.s);
  if (b == nullptr || (!w.taken(rung::fence) && !w.marked && fence_first_locked(w.size, w.cls)))
    return step::down;
  deferred d;
  event_handle release = 0;
  out = take_locked(b, w.size, w.requested, w.s, release, w.tag);
  if (release != 0) d.release(release);
  if (!w.grown) ++st_.cache_hits;
  check_locked();
  lock.unlock();
  run_deferred(d);
  return step::done;
}

// 3a. Stream-free blocks whose event has completed are safe for all and merge with their free
// neighbours (own-stream ones too: pieces freed under different events never merge). Other
// streams' unsealed blocks that could serve the request get their event first.
pool_impl::step pool_impl::seal_other_streams(slow_walk& w, std::unique_lock<spin_mutex>& lock) {
  if (w.taken(rung::seal_others) || st_.stream_free_bytes == 0) return step::down;
  w.take(rung::seal_others);
  lock.unlock();
  seal_streams(w.s, w.size, w.cls);
  refresh_events();
  return step::again;
}

// 3a. A block freed on another stream, made safe by a dependency on its event.
pool_impl::step pool_impl::depend_on_other_stream(slow_walk& w, std::unique_lock<spin_mutex>& lock,
                                                  alloc_result& out) {
  const bool others = pending_or_stream_bytes_locked(w.cls, w.s) > pending_class_bytes_[w.cls];
  if (w.taken(rung::depend) || !others || w.s == k_no_stream) return step::down;
  w.take(rung::depend);
  lock.unlock();
  return try_wait_for_other_stream(w.size, w.requested, w.s, out, w.tag) ? step::done : step::again;
}

// 3b. The mark an earlier slow allocation recorded, once complete, is a fence that cost one
// query: no barrier ordering every stream. A new mark serves the next slow allocation.
// Only while fences are contended: one thread's fences leave no blocks a mark could release
// before the barrier that the request needs anyway (PyTorch's fast-step convnet: every slow
// allocation went on to a barrier, marks or not).
pool_impl::step pool_impl::use_mark(slow_walk& w, std::unique_lock<spin_mutex>& lock) {
  if (w.taken(rung::mark) || !opt_.marks ||
      (st_.pending_bytes == 0 && st_.stream_free_bytes == 0) ||
      slow_.fence_calls.load(std::memory_order_relaxed) >=
          marks_until_.load(std::memory_order_relaxed))
    return step::down;
  w.take(rung::mark);
  lock.unlock();
  if (harvest_mark() != 0) w.marked = true;
  return step::again;
}

// 3b. A fence, when what it would release could cover the request: cheaper than growing (about
// 1 us on an idle device), and the program's cuMemFree would have synchronized.
pool_impl::step pool_impl::fence_for_request(slow_walk& w, std::unique_lock<spin_mutex>& lock) {
  const std::size_t waiting = pending_or_stream_bytes_locked(w.cls, w.s);
  if (w.taken(rung::fence) || waiting == 0 || waiting + free_[w.cls].bytes() < w.size)
    return step::down;
  w.take(rung::fence);
  lock.unlock();
  fence_now();
  return step::again;
}

// 3c, before growing: the stream's own unsealed blocks get their event, so that those already
// done become free for all and merge with free neighbours (as they did when every free recorded
// its event). Growing costs a driver allocation; this, one record.
pool_impl::step pool_impl::seal_own_stream(slow_walk& w, std::unique_lock<spin_mutex>& lock) {
  if (w.taken(rung::seal_own) || w.s == k_no_stream) return step::down;
  w.take(rung::seal_own);
  const stream_cache* own = find_stream_locked(w.s);
  if (own == nullptr || own->unsealed == 0) return step::down;
  lock.unlock();
  if (seal_streams(w.s, 0, w.cls, true)) refresh_events();
  return step::again;
}

// 3c, before growing: the threads' caches give back their free blocks (pool/thread_cache.h):
// memory the pool already holds serves first.
pool_impl::step pool_impl::flush_thread_caches(slow_walk& w, std::unique_lock<spin_mutex>& lock) {
  if (w.taken(rung::flush) || cache_count_.load(std::memory_order_relaxed) == 0) return step::down;
  w.take(rung::flush);
  lock.unlock();
  flush_caches(k_no_stream);
  return step::again;
}

bool pool_impl::over_limit_locked(std::size_t bytes) const {
  return opt_.limit_bytes != 0 &&
         st_.reserved_bytes + in_flight_map_bytes_ + in_flight_unmap_bytes_ + bytes >
             opt_.limit_bytes;
}

// 3c. Grow, within the limit: the arena where it ends, or a new segment. Sets w.blocked when
// the growth would cross the limit.
pool_impl::step pool_impl::grow(slow_walk& w, std::unique_lock<spin_mutex>& lock,
                                alloc_result& out) {
  const bool arena = w.cls == k_large && page_ != 0;
  std::uintptr_t at = 0;
  std::size_t bytes = arena ? arena_growth_locked(w.size, at) : segment_bytes_for(w.size);
  // Stitching lacks a few pages: map those at the arena's end, and stitch (pool_stitch.cpp).
  bool top_up = false;
  if (arena && !w.topped_up && w.taken(rung::stitch)) {
    if (const std::size_t lack = stitch_top_up_locked(w.size, bytes); lack != 0) {
      bytes = lack;
      top_up = w.topped_up = true;
    }
  }
  const segment_kind kind = w.cls == k_small   ? segment_kind::small
                            : w.cls == k_large ? segment_kind::large
                                               : segment_kind::oversize;
  if (!arena && over_limit_locked(bytes)) { // a smaller segment may still fit under the limit
    // (it keeps the request's class: a shrunk large segment serves later large requests)
    std::size_t tight = std::min(bytes, round_up(w.size, opt_.segment_granule_bytes));
    if (over_limit_locked(tight)) tight = w.size;
    bytes = tight;
  }
  deferred d;
  if (over_limit_locked(bytes) && !w.taken(rung::trim_for_limit) && trimmable_locked()) {
    // Idle segments and free arena pages cannot serve this request (find_fit saw them):
    // release them all, and retry once they are unmapped (until then they still count
    // against the limit).
    w.take(rung::trim_for_limit);
    trim_locked(0, d);
    lock.unlock();
    run_deferred(d);
    return step::again;
  }
  w.blocked = over_limit_locked(bytes);
  if (w.blocked) return step::down;
  if (!arena) release_for_growth_locked(bytes, w.size, d); // arena segments are never idle
  in_flight_map_bytes_ += bytes;
  lock.unlock();
  run_deferred(d);
  const std::uintptr_t base = arena ? up_.extend(at, bytes) : up_.map(bytes);
  deferred mapped;
  lock.lock();
  in_flight_map_bytes_ -= bytes;
  if (base == 0) return step::down; // the driver is out of memory
  if (arena) {
    add_arena_locked(base, bytes, mapped);
    if (top_up) w.taken_steps &= ~(1u << static_cast<unsigned>(rung::stitch)); // stitch again
    ++st_.upstream_allocs;
    check_locked();
    lock.unlock();
    run_deferred(mapped);
    w.grown = true;
    return step::again; // the grown free block fits, unless another thread took it first
  }
  add_segment_locked(base, bytes, kind);
  event_handle release = 0;
  out = take_locked(segments_.find(base)->second->first, w.size, w.requested, w.s, release, w.tag);
  if (release != 0) mapped.release(release);
  ++st_.upstream_allocs;
  check_locked();
  lock.unlock();
  if (obs_ != nullptr) obs_->on_segment_map(base, bytes);
  run_deferred(mapped);
  return step::done;
}

// 3d. At the limit or out of device memory: a fence (unless 3b made one) and reuse what it
// frees. Every pending or stream-freed block counts here, whatever its class: a fence turns
// them free, which can leave whole segments idle for the trim below to give back (blocks of
// segments shrunk to fit under the limit are not in the request's class).
pool_impl::step pool_impl::fence_for_reuse(slow_walk& w, std::unique_lock<spin_mutex>& lock) {
  if (w.taken(rung::fence) || (st_.pending_bytes == 0 && st_.stream_free_bytes == 0))
    return step::down;
  w.take(rung::fence);
  lock.unlock();
  fence_now();
  return step::again;
}

// 3d. Trim and retry: idle segments go back, and the growth is tried again within the limit.
pool_impl::step pool_impl::trim_and_retry(slow_walk& w, std::unique_lock<spin_mutex>& lock) {
  if (w.taken(rung::trim) || (w.blocked && !trimmable_locked())) return step::down;
  w.take(rung::trim);
  deferred d;
  trim_locked(0, d);
  lock.unlock();
  run_deferred(d);
  return step::again;
}

// 3e. Out of memory: counted, and the observer hears of it (the OOM event and snapshot).
pool_impl::step pool_impl::fail(slow_walk& w, std::unique_lock<spin_mutex>& lock,
                                alloc_result& out) {
  ++st_.ooms;
  lock.unlock();
  if (obs_ != nullptr) obs_->on_oom(w.requested);
  out = alloc_result{0, pool_status::out_of_memory, 0};
  return step::done;
}

bool pool_impl::seal_streams(stream_handle except, std::size_t size, unsigned cls, bool only) {
  struct seal {
    stream_handle stream;
    std::uint64_t cut; // blocks freed up to here (block::freed_seq) are covered
    event_handle event;
  };
  std::vector<seal> seals;
  {
    std::lock_guard lock(mu_);
    for (const auto& sc : streams_) {
      if (sc->unsealed == 0 || sc->retiring || (sc->stream == except) != only) continue;
      if (only) {
        seals.push_back({sc->stream, free_seq_, 0});
        ++sc->calls;
        break;
      }
      // Only streams with a block that could serve the request: a seal is a driver call.
      const bool fits = sc->index[cls].find_fit(size) != nullptr ||
                        (cls == k_oversize && sc->index[k_large].find_fit(size) != nullptr);
      if (fits) {
        seals.push_back({sc->stream, free_seq_, 0});
        ++sc->calls; // its stream stays alive until the record below is done
      }
    }
  }
  if (seals.empty()) return false;
  // Recorded after the cut was taken, so after every free up to it: in stream order, after
  // all work the program issued on the stream before those frees. A failed record (a stream
  // capturing a graph, destroyed, a driver error) leaves the blocks for a fence or a sync.
  for (seal& x : seals)
    x.event = fe_.record(x.stream);
  bool any = false;
  deferred d;
  {
    std::lock_guard lock(mu_);
    for (const seal& x : seals) {
      stream_call_done_locked(x.stream);
      if (x.event == 0) continue;
      stream_cache* sc = find_stream_locked(x.stream);
      event_ref* r = nullptr;
      for (block* b = sc != nullptr ? sc->fifo_head : nullptr; b != nullptr && sc->unsealed != 0;
           b = b->fifo_next) {
        if (b->ev != nullptr || b->freed_seq > x.cut) continue;
        if (r == nullptr) {
          r = events_.get();
          r->event = x.event;
          r->seq = ++event_seq_;
          r->thread = this_thread_tag();
        }
        b->ev = r;
        ++r->refs;
        --sc->unsealed;
        any = true;
      }
      if (r == nullptr) d.release(x.event); // all reused on their stream meanwhile
    }
    check_locked();
  }
  run_deferred(d);
  return any;
}

// Events on one stream complete in order, so each stream's FIFO is queried from its oldest
// event and only up to the first that has not completed.
bool pool_impl::refresh_events() {
  constexpr std::size_t k_max_queries = 64; // per stream and call
  std::vector<event_ref*> refs;
  std::vector<std::size_t> firsts; // refs[firsts[k] ..] belong to the k-th stream
  {
    std::lock_guard lock(mu_);
    for (auto& sc : streams_) {
      firsts.push_back(refs.size());
      std::size_t n = 0;
      for (block* b = sc->fifo_head; b != nullptr && n < k_max_queries; b = b->fifo_next) {
        if (b->ev == nullptr || b->ev->queued) continue;
        b->ev->queued = true;
        ++b->ev->refs; // held while queried without the lock
        refs.push_back(b->ev);
        ++n;
      }
    }
    firsts.push_back(refs.size());
  }
  std::vector<char> done(refs.size(), 0);
  bool any = false;
  for (std::size_t k = 0; k + 1 < firsts.size(); ++k)
    for (std::size_t i = firsts[k]; i < firsts[k + 1]; ++i) {
      if (!fe_.query(refs[i]->event)) break; // later events on this stream cannot be done
      done[i] = 1;
      any = true;
    }
  deferred d;
  {
    std::lock_guard lock(mu_);
    for (std::size_t i = 0; i < refs.size(); ++i) {
      if (done[i]) refs[i]->complete = true;
      refs[i]->queued = false;
      if (--refs[i]->refs == 0) {
        d.release(refs[i]->event);
        events_.put(refs[i]);
      }
    }
    if (any) convert_stream_free_locked(k_no_stream, 0, true, d);
    check_locked();
  }
  run_deferred(d);
  return any;
}

bool pool_impl::try_wait_for_other_stream(std::size_t size, std::size_t requested, stream_handle s,
                                          alloc_result& out, thread_cache* tag) {
  const unsigned cls = class_of_size(size);
  block* b = nullptr;
  bool own_needed = false; // b is unsealed: an event is recorded on its stream below
  {
    std::lock_guard lock(mu_);
    stream_cache* owner = nullptr;
    for (const auto& sc : streams_) {
      if (sc->stream == s || sc->retiring) continue;
      block* t = sc->index[cls].find_fit(size);
      if (t != nullptr && (b == nullptr || t->size < b->size)) {
        b = t;
        owner = sc.get();
      }
    }
    if (b == nullptr) return false;
    own_needed = b->ev == nullptr;
    if (own_needed) ++owner->calls;
    unlist_locked(b);
    carve_locked(b, size);
    b->state = block_state::live; // claimed: in no index, not in live_, keeps its event
    b->claimed = true;
    check_locked();
  }
  // An unsealed block (freed after the last seal) gets an event of its own, recorded now on
  // its stream: it covers the free, and is released once the dependency is made.
  const event_handle own = own_needed ? fe_.record(b->stream) : 0;
  bool ok = (b->ev != nullptr || own != 0) && fe_.wait(s, own != 0 ? own : b->ev->event);
  if (own != 0) fe_.release(own);
  deferred d;
  {
    std::lock_guard lock(mu_);
    if (own_needed) stream_call_done_locked(b->stream);
    b->claimed = false;
    if (ok) {
      event_handle release = 0;
      out = make_live_locked(b, requested, s, release, tag);
      if (release != 0) d.release(release);
      ++st_.cache_hits;
    } else {
      event_handle released[2] = {};
      insert_stream_free_locked(b, *get_stream_locked(b->stream), released);
      for (event_handle e : released)
        if (e != 0) d.release(e);
    }
    check_locked();
  }
  run_deferred(d);
  return ok;
}

std::size_t pool_impl::fence_now() {
  std::uint64_t asked; // blocks freed so far have stamps up to here
  {
    std::lock_guard lock(mu_);
    asked = seq_;
  }
  // Threads that need a fence while one runs (a barrier orders every stream: ~50 us with
  // PyTorch's 32 streams) share the next one instead of making one each.
  const std::uint64_t asked_at = now_ns();
  std::unique_lock fence_lock(fence_mu_, std::try_to_lock);
  const std::uint64_t calls = slow_.fence_calls.fetch_add(1, std::memory_order_relaxed);
  if (!fence_lock.owns_lock()) {
    // Another thread's fence runs: slow allocations use marks for the next k_marked_fences
    // fence calls (pool_options::marks).
    if (opt_.marks) marks_until_.store(calls + k_marked_fences, std::memory_order_relaxed);
    fence_lock.lock();
  }
  std::uint64_t start = now_ns();
  slow_.fence_wait_ns.fetch_add(start - asked_at, std::memory_order_relaxed);
  if (last_fence_ticket_.load(std::memory_order_acquire) > asked) {
    slow_.fences_shared.fetch_add(1, std::memory_order_relaxed);
    return 0;
  }
  std::uint64_t ticket = begin_fence();
  const bool barrier = opt_.barriers && fe_.barrier();
  if (!barrier && !fe_.synchronize()) return 0;
  const std::uint64_t took = now_ns() - start;
  slow_.fence_ns.fetch_add(took, std::memory_order_relaxed);
  const std::size_t released = end_fence(ticket, took, barrier);
  note_fence_ticket(ticket);
  return released;
}

void pool_impl::note_fence_ticket(std::uint64_t ticket) {
  std::uint64_t last = last_fence_ticket_.load(std::memory_order_relaxed);
  while (last < ticket &&
         !last_fence_ticket_.compare_exchange_weak(last, ticket, std::memory_order_release)) {
  }
}

std::size_t pool_impl::harvest_mark() {
  std::lock_guard mark_lock(mark_mu_);
  std::size_t released = 0;
  if (mark_.ev != 0) {
    const std::uint64_t start = now_ns();
    if (!fe_.query(mark_.ev)) return 0; // still running: it stays the one to ask next time
    fe_.release(mark_.ev);
    mark_.ev = 0;
    released = end_fence(mark_.ticket, now_ns() - start);
    note_fence_ticket(mark_.ticket);
    slow_.marks_used.fetch_add(1, std::memory_order_relaxed);
  }
  // Blocks freed from here on have stamps at or above the ticket, so the mark covers only
  // those freed before it.
  const std::uint64_t ticket = begin_fence();
  if (const event_handle e = fe_.mark(); e != 0) {
    mark_.ev = e;
    mark_.ticket = ticket;
    slow_.marks.fetch_add(1, std::memory_order_relaxed);
  } else {
    slow_.marks_refused.fetch_add(1, std::memory_order_relaxed);
  }
  return released;
}

pool::slow_path_counters pool_impl::slow_path() const {
  pool::slow_path_counters c;
  c.walks = slow_.walks.load(std::memory_order_relaxed);
  c.walk_ns = slow_.walk_ns.load(std::memory_order_relaxed);
  c.fence_calls = slow_.fence_calls.load(std::memory_order_relaxed);
  c.fences_shared = slow_.fences_shared.load(std::memory_order_relaxed);
  c.fence_wait_ns = slow_.fence_wait_ns.load(std::memory_order_relaxed);
  c.fence_ns = slow_.fence_ns.load(std::memory_order_relaxed);
  c.marks = slow_.marks.load(std::memory_order_relaxed);
  c.marks_used = slow_.marks_used.load(std::memory_order_relaxed);
  c.marks_refused = slow_.marks_refused.load(std::memory_order_relaxed);
  c.destroy_waits = slow_.destroy_waits.load(std::memory_order_relaxed);
  return c;
}

std::uint64_t pool_impl::begin_fence() {
  std::lock_guard lock(mu_);
  return ++seq_;
}

std::size_t pool_impl::end_fence(std::uint64_t ticket, std::uint64_t duration_ns, bool barrier) {
  deferred d;
  std::size_t released;
  {
    std::lock_guard lock(mu_);
    if (barrier) ++st_.barriers;
    released = complete_fence_locked(ticket, d);
    check_locked();
  }
  run_deferred(d);
  if (obs_ != nullptr) obs_->on_fence(duration_ns, released);
  return released;
}

std::size_t pool_impl::complete_fence_locked(std::uint64_t ticket, deferred& d) {
  ++st_.fences;
  std::size_t released = 0;
  while (pending_head_ != nullptr && pending_head_->stamp < ticket) {
    block* b = pending_head_;
    pending_head_ = b->fifo_next;
    if (pending_head_ == nullptr) pending_tail_ = nullptr;
    st_.pending_bytes -= b->size;
    --st_.pending_blocks;
    pending_class_bytes_[class_of(b->seg)] -= b->size;
    released += b->size;
    insert_free_locked(b);
  }
  released += convert_stream_free_locked(k_no_stream, ticket, false, d);
  enforce_cache_cap_locked(d);
  return released;
}

// A stream created later may get s's handle, and work queued on s may still run: the blocks
// freed on s (the threads' caches' too) wait for a fence, as stream-less frees do.
void pool_impl::stream_destroying(stream_handle s) {
  if (cache_count_.load(std::memory_order_relaxed) != 0) {
    flush_caches(s);
    wait_for_cache_transits(); // another thread's batch may hold frees on s
  }
  deferred d;
  {
    std::unique_lock lock(mu_);
    bool waited = false;
    for (;;) {
      stream_cache* sc = find_stream_locked(s);
      if (sc == nullptr) break;
      sc->retiring = true;
      if (sc->calls == 0) {
        while (block* b = sc->fifo_head) {
          unlist_locked(b);
          if (event_handle e = drop_event_locked(b)) d.release(e);
          make_pending_locked(b, b->stamp); // a fence begun since its free covers it
        }
        check_locked();
        break;
      }
      if (!waited) slow_.destroy_waits.fetch_add(1, std::memory_order_relaxed);
      waited = true;
      lock.unlock(); // a record on s is in progress on another thread: a driver call, short
      std::this_thread::yield();
      lock.lock();
    }
  }
  run_deferred(d);
}

void pool_impl::end_stream_sync(stream_handle s, std::uint64_t ticket) {
  deferred d;
  {
    std::lock_guard lock(mu_);
    convert_stream_free_locked(s, ticket, false, d);
    enforce_cache_cap_locked(d);
    check_locked();
  }
  run_deferred(d);
}

std::size_t pool_impl::convert_stream_free_locked(stream_handle only, std::uint64_t ticket,
                                                  bool complete_only, deferred& d) {
  std::size_t converted = 0;
  for (auto& sc : streams_) {
    if (only != k_no_stream && sc->stream != only) continue;
    // A prefix of the FIFO: freed before the ticket, or under events seen complete.
    while (block* b = sc->fifo_head) {
      if (complete_only ? b->ev == nullptr || !b->ev->complete : b->stamp >= ticket) break;
      unlist_locked(b);
      if (event_handle e = drop_event_locked(b)) d.release(e);
      converted += b->size;
      insert_free_locked(b); // merges only with blocks free for all
    }
  }
  return converted;
}

} // namespace gmem
