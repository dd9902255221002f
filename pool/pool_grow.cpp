// The pool's slow path: what happens when no safe free block fits. In order (pool.h, Policy):
// events of stream-free blocks, a dependency on another stream's event, a fence for pending
// blocks, growth (releasing idle segments first when reserved would run ahead of demand),
// and at the limit or when the driver is out of memory: fence, trim, retry, out_of_memory.
// Also fences and stream syncs; segments, trim and the limit are in pool_segments.cpp.
#include "pool/pool_impl.h"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <thread>

namespace gmem {

namespace {
constexpr std::size_t round_up(std::size_t n, std::size_t to) {
  return (n + to - 1) / to * to;
}
std::uint64_t now_ns() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}
} // namespace

std::size_t pool_impl::pending_or_stream_bytes_locked(unsigned cls, stream_handle s) const {
  std::size_t n = pending_class_bytes_[cls];
  for (const auto& sc : streams_)
    if (sc->stream != s) n += sc->index[cls].bytes();
  return n;
}

alloc_result pool_impl::allocate_slow(std::size_t size, std::size_t requested, stream_handle s,
                                      thread_cache* tag) {
  const unsigned cls = class_of_size(size);
  bool queried = false, waited = false, fenced = false, trimmed = false, limit_trimmed = false;
  bool own_sealed = false, flushed = false;
  bool grown = false; // the arena grew for this request: the fit below is no cache hit
  for (;;) {
    deferred d;
    std::unique_lock lock(mu_);
    block* b = find_fit_locked(size, cls, s);
    if (b != nullptr && (fenced || !fence_first_locked(size, cls))) {
      event_handle release = 0;
      alloc_result r = take_locked(b, size, requested, s, release, tag);
      if (release != 0) d.release(release);
      if (!grown) ++st_.cache_hits;
      check_locked();
      lock.unlock();
      run_deferred(d);
      return r;
    }
    bool others = pending_or_stream_bytes_locked(cls, s) > pending_class_bytes_[cls];
    // 1. Stream-free blocks whose event has completed are safe for all and merge with their
    // free neighbours (own-stream ones too: pieces freed under different events never merge).
    // Other streams' unsealed blocks get their event first.
    if (!queried && st_.stream_free_bytes != 0) {
      queried = true;
      lock.unlock();
      seal_streams(s, size, cls);
      refresh_events();
      continue;
    }
    // 2. A block freed on another stream, made safe by a dependency on its event.
    if (!waited && others && s != k_no_stream) {
      waited = true;
      lock.unlock();
      alloc_result r;
      if (try_wait_for_other_stream(size, requested, s, r, tag)) return r;
      continue;
    }
    // 3. A fence, when what it would release could cover the request: cheaper than growing
    // (about 1 us on an idle device), and the program's cuMemFree would have synchronized.
    std::size_t waiting = pending_or_stream_bytes_locked(cls, s);
    if (!fenced && waiting != 0 && waiting + free_[cls].bytes() >= size) {
      fenced = true;
      lock.unlock();
      fence_now();
      continue;
    }
    // Before growing: the stream's own unsealed blocks get their event, so that those already
    // done become free for all and merge with free neighbours (as they did when every free
    // recorded its event). Growing costs a driver allocation; this, one record.
    if (!own_sealed && s != k_no_stream) {
      own_sealed = true;
      const stream_cache* own = find_stream_locked(s);
      if (own != nullptr && own->unsealed != 0) {
        lock.unlock();
        if (seal_streams(s, 0, cls, true)) refresh_events();
        continue;
      }
    }
    // Before growing, the threads' caches give back their free blocks (pool/thread_cache.h):
    // memory the pool already holds serves first.
    if (!flushed && cache_count_.load(std::memory_order_relaxed) != 0) {
      flushed = true;
      lock.unlock();
      run_deferred(d);
      flush_caches(k_no_stream);
      continue;
    }
    // 4. Grow, within the limit: the arena where it ends, or a new segment.
    const bool arena = cls == k_large && page_ != 0;
    std::uintptr_t at = 0;
    std::size_t bytes = arena ? arena_growth_locked(size, at) : segment_bytes_for(size);
    segment_kind kind = cls == k_small   ? segment_kind::small
                        : cls == k_large ? segment_kind::large
                                         : segment_kind::oversize;
    auto over_limit = [&](std::size_t n) {
      return opt_.limit_bytes != 0 &&
             st_.reserved_bytes + in_flight_map_bytes_ + in_flight_unmap_bytes_ + n >
                 opt_.limit_bytes;
    };
    if (!arena && over_limit(bytes)) { // a smaller segment may still fit under the limit
      // (it keeps the request's class: a shrunk large segment serves later large requests)
      std::size_t tight = std::min(bytes, round_up(size, opt_.segment_granule_bytes));
      if (over_limit(tight)) tight = size;
      bytes = tight;
    }
    if (over_limit(bytes) && !limit_trimmed && trimmable_locked()) {
      // Idle segments and free arena pages cannot serve this request (find_fit saw them):
      // release them all, and retry once they are unmapped (until then they still count
      // against the limit).
      limit_trimmed = true;
      trim_locked(0, d);
      lock.unlock();
      run_deferred(d);
      continue;
    }
    bool blocked = over_limit(bytes);
    if (!blocked) {
      if (!arena) release_for_growth_locked(bytes, size, d); // arena segments are never idle
      in_flight_map_bytes_ += bytes;
      lock.unlock();
      run_deferred(d);
      d = deferred{}; // run: the steps below must not give those segments back again
      std::uintptr_t base = arena ? up_.extend(at, bytes) : up_.map(bytes);
      deferred d2;
      lock.lock();
      in_flight_map_bytes_ -= bytes;
      if (base != 0 && arena) {
        add_arena_locked(base, bytes, d2);
        ++st_.upstream_allocs;
        check_locked();
        lock.unlock();
        run_deferred(d2);
        grown = true;
        continue; // the grown free block fits, unless another thread took it first
      }
      if (base != 0) {
        add_segment_locked(base, bytes, kind);
        event_handle release = 0;
        alloc_result r =
            take_locked(segments_.find(base)->second->first, size, requested, s, release, tag);
        if (release != 0) d2.release(release);
        ++st_.upstream_allocs;
        check_locked();
        lock.unlock();
        if (obs_ != nullptr) obs_->on_segment_map(base, bytes);
        run_deferred(d2);
        return r;
      }
    }
    // 5. At the limit or out of device memory: fence and reuse pending, trim and retry, fail.
    // Every pending or stream-freed block counts here, whatever its class: a fence turns them
    // free, which can leave whole segments idle for the trim below to give back (blocks of
    // segments shrunk to fit under the limit are not in the request's class).
    if (!fenced && (st_.pending_bytes != 0 || st_.stream_free_bytes != 0)) {
      fenced = true;
      lock.unlock();
      run_deferred(d);
      fence_now();
      continue;
    }
    if (!trimmed && (!blocked || trimmable_locked())) {
      trimmed = true;
      trim_locked(0, d);
      lock.unlock();
      run_deferred(d);
      continue;
    }
    ++st_.ooms;
    lock.unlock();
    run_deferred(d);
    if (obs_ != nullptr) obs_->on_oom(requested);
    return alloc_result{0, pool_status::out_of_memory, 0};
  }
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
  std::lock_guard fence_lock(fence_mu_);
  if (last_fence_ticket_ > asked) return 0;
  std::uint64_t ticket = begin_fence();
  std::uint64_t start = now_ns();
  const bool barrier = opt_.barriers && fe_.barrier();
  if (!barrier && !fe_.synchronize()) return 0;
  const std::size_t released = end_fence(ticket, now_ns() - start, barrier);
  last_fence_ticket_ = ticket;
  return released;
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
