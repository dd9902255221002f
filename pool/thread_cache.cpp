// The per-thread caches of stream-ordered blocks (pool/thread_cache.h): the thread-local
// slots that find a thread's cache, the cache's fast paths, and how blocks go back to the pool
// (evictions, flushes, a thread's exit, the pool's teardown).
#include "pool/pool_impl.h"

#include <algorithm>
#include <pthread.h>
#include <thread>

namespace gmem {

namespace {

// A thread's caches, one per pool it used on a stream (pool ids are never 0 or reused).
struct cache_slot {
  std::uint64_t pool_id;
  thread_cache* cache;
};
constexpr int k_thread_slots = 8;
thread_local cache_slot t_slots[k_thread_slots] __attribute__((tls_model("initial-exec")));
// One past the last slot this thread ever filled: a lookup looks at no more (none at all on a
// thread that never allocated on a stream, which is every free of a cudaMalloc-only thread).
thread_local int t_slot_end __attribute__((tls_model("initial-exec"))) = 0;

pthread_key_t g_exit_key;
std::once_flag g_exit_key_once;

// Thread exit (a pthread key's destructor: thread_local storage is still there).
void on_thread_exit(void*) {
  std::lock_guard guard(caches_mutex());
  for (cache_slot& slot : t_slots) {
    if (slot.cache == nullptr) continue;
    if (pool_impl* pool = slot.cache->pool.load(std::memory_order_relaxed))
      pool->thread_exited(slot.cache); // deletes it
    else
      delete slot.cache; // its pool went first
    slot = cache_slot{};
  }
}

// Kept out of this_thread_cache (which every allocation and free calls): inlined, its
// registers would make the lookup save and restore six of them each time.
__attribute__((noinline)) thread_cache* register_slow(std::uint64_t pool_id, pool_impl* pool) {
  std::call_once(g_exit_key_once, [] { pthread_key_create(&g_exit_key, &on_thread_exit); });
  std::lock_guard guard(caches_mutex());
  cache_slot* room = nullptr;
  for (cache_slot& slot : t_slots) {
    if (slot.cache != nullptr && slot.cache->pool.load(std::memory_order_relaxed) == nullptr) {
      // its pool is gone
      delete slot.cache;
      slot = cache_slot{};
    }
    if (slot.cache == nullptr && room == nullptr) room = &slot;
  }
  if (room == nullptr) return nullptr; // a thread on more pools than slots: no cache for this
  thread_cache* c = nullptr;
  try {
    c = new thread_cache;
  } catch (...) {
    return nullptr;
  }
  pool->register_cache(c);
  *room = cache_slot{pool_id, c};
  t_slot_end = std::max(t_slot_end, static_cast<int>(room - t_slots) + 1);
  pthread_setspecific(g_exit_key, c); // any non-null value: the destructor runs
  return c;
}

} // namespace

std::mutex& caches_mutex() {
  static auto* mu = new std::mutex; // never destroyed: threads may exit after static teardown
  return *mu;
}

thread_cache* this_thread_cache(std::uint64_t pool_id, pool_impl* pool) {
  for (int i = 0; i < t_slot_end; ++i)
    if (t_slots[i].pool_id == pool_id) return t_slots[i].cache;
  return pool != nullptr ? register_slow(pool_id, pool) : nullptr;
}

void pool_impl::register_cache(thread_cache* c) {
  {
    std::lock_guard lock(c->mu);
    c->pool.store(this, std::memory_order_relaxed);
  }
  caches_.push_back(c);
  cache_count_.store(caches_.size(), std::memory_order_relaxed);
}

// Under caches_mutex(): nothing here may reach the observer (which may ask for stats()), so
// the cache cap's trim waits for the next free.
void pool_impl::thread_exited(thread_cache* c) {
  std::vector<event_handle> to_release;
  {
    std::lock_guard lock(mu_);
    std::lock_guard cache_lock(c->mu);
    while (c->free_count_locked() != 0) { // back to the pool, freed on their stream
      const thread_cache::cached f = c->take_free_locked(0);
      block* b = live_.find(f.address);
      if (b == nullptr || b->owner != c) continue;
      live_.erase(f.address);
      event_handle released[2] = {};
      release_block_locked(b, f.stream, released, nullptr, false);
      for (event_handle e : released)
        if (e != 0) to_release.push_back(e);
    }
    for (unsigned i = 0; i < thread_cache::k_slots; ++i) {
      const thread_cache::handed& h = c->table[i];
      if (h.address == 0) continue;
      // Still the program's: an ordinary live block from now on.
      if (block* b = live_.find(h.address); b != nullptr && b->owner == c) {
        st_.live_requested_bytes += h.requested;
        st_.live_requested_bytes -= b->requested;
        b->requested = h.requested;
        b->owner = nullptr;
      }
    }
    c->pool.store(nullptr, std::memory_order_relaxed);
    check_locked();
  }
  retired_caches_.add_history(*c);
  std::erase(caches_, c);
  cache_count_.store(caches_.size(), std::memory_order_relaxed);
  delete c;
  for (event_handle e : to_release)
    fe_.release(e);
}

void pool_impl::detach_caches_locked() {
  for (thread_cache* c : caches_) {
    std::lock_guard cache_lock(c->mu);
    retired_caches_.add_history(*c);
    while (c->free_count_locked() != 0)
      c->take_free_locked(0);
    for (unsigned i = 0; i < thread_cache::k_slots; ++i)
      c->table[i] = thread_cache::handed{};
    c->handed_count.store(0, std::memory_order_relaxed);
    c->pool.store(nullptr, std::memory_order_relaxed); // its thread deletes it
  }
  caches_.clear();
  cache_count_.store(0, std::memory_order_relaxed);
}

alloc_result pool_impl::allocate_cached(thread_cache& c, std::size_t size, std::size_t requested,
                                        stream_handle s) {
  if (c.free_blocks.load(std::memory_order_relaxed) != 0) {
    std::lock_guard lock(c.mu);
    // Best fit among the blocks freed on s: of the request's segment class (small requests
    // stay out of the arena), at most twice its size.
    int best = -1;
    const unsigned cls = class_of_size(size);
    const unsigned n = c.free_count_locked();
    for (unsigned k = 0; k < n; ++k) {
      const thread_cache::cached& f = c.free_list[k];
      // size <= f.size <= 2 x size in one unsigned compare (f.size < size wraps around)
      if (f.size - size > size || f.stream != s || class_of_size(f.size) != cls ||
          (best >= 0 && f.size >= c.free_list[best].size))
        continue;
      best = static_cast<int>(k);
      if (f.size == size) break;
    }
    if (best >= 0) {
      const thread_cache::cached f = c.take_free_locked(static_cast<unsigned>(best));
      c.insert_locked(thread_cache::handed{f.address, f.size, requested, f.pool_requested});
      thread_cache::bump(c.hits, 1);
      thread_cache::bump(c.hit_bytes, f.size);
      return alloc_result{f.address, pool_status::ok, f.size};
    }
  }
  // The pool's, tagged with c when its table has room (only this thread adds to it) and the
  // pool has not let go of c (abandon()).
  const bool tag = c.handed_count.load(std::memory_order_relaxed) < thread_cache::k_max_handed &&
                   c.pool.load(std::memory_order_relaxed) == this;
  const alloc_result r = allocate_shared(size, requested, s, tag ? &c : nullptr);
  if (tag && r.status == pool_status::ok) {
    std::lock_guard lock(c.mu);
    if (c.pool.load(std::memory_order_relaxed) == this)
      c.insert_locked(thread_cache::handed{r.address, r.size, requested, requested});
  }
  return r;
}

pool_status pool_impl::deallocate_cached(thread_cache& c, std::uintptr_t address, stream_handle s) {
  cached_free out[thread_cache::k_max_free + 1];
  std::size_t n = 0;
  bool pending = false;
  {
    std::lock_guard lock(c.mu);
    if (c.pool.load(std::memory_order_relaxed) != this) return pool_status::not_owned;
    const int i = c.find_locked(address);
    if (i < 0) {
      if (c.find_free_locked(address) < 0) return pool_status::not_owned;
      thread_cache::bump(c.invalid, 1); // freed twice
      return pool_status::invalid;
    }
    const thread_cache::handed h = c.remove_locked(static_cast<unsigned>(i));
    // Stream-less: pending until a fence, the pool's business (out of the table first, so
    // that a racing free of the same block is a double free).
    pending = s == k_no_stream;
    if (!pending) {
      c.push_free_locked(thread_cache::cached{h.address, h.size, h.pool_requested, s});
      thread_cache::bump(c.frees, 1);
      // Over a bound: the oldest blocks go back to the pool, as many as take the cache under
      // its bounds (usually one). Returning half at once would make the free that did it the
      // stream-ordered path's p99 (docs/pool.md, "Threads").
      while (c.free_count_locked() > thread_cache::k_max_free ||
             c.free_bytes_locked() > thread_cache::k_max_free_bytes) {
        const thread_cache::cached f = c.take_free_locked(0);
        out[n++] = cached_free{f.address, f.stream};
      }
      if (n != 0) cache_transit_.fetch_add(1, std::memory_order_relaxed); // see flush_caches
    }
  }
  if (pending) return deallocate_shared(address, s, true);
  if (n != 0) {
    return_to_pool(out, n);
    cache_transit_.fetch_sub(1, std::memory_order_release);
  }
  return pool_status::ok;
}

bool pool_impl::untag_locked(block* b) {
  thread_cache* c = b->owner;
  std::lock_guard cache_lock(c->mu);
  const int i = c->find_locked(b->address);
  if (i < 0) return false; // free in the cache, or on its way back: not the program's
  c->remove_locked(static_cast<unsigned>(i));
  b->owner = nullptr;
  return true;
}

bool pool_impl::cached_free_locked(const block* b, stream_handle* stream) const {
  if (b->state != block_state::live || b->owner == nullptr) return false;
  std::lock_guard cache_lock(b->owner->mu);
  const int k = b->owner->find_free_locked(b->address);
  if (k < 0) return false;
  if (stream != nullptr) *stream = b->owner->free_list[k].stream;
  return true;
}

void pool_impl::return_to_pool(const cached_free* blocks, std::size_t n) {
  std::vector<event_handle> to_release;
  std::unique_ptr<deferred> d;
  {
    std::lock_guard lock(mu_);
    for (std::size_t k = 0; k < n; ++k) {
      block* b = live_.find(blocks[k].address);
      if (b == nullptr || b->owner == nullptr) continue; // abandon() forgot it
      live_.erase(b->address);
      event_handle released[2] = {};
      release_block_locked(b, blocks[k].stream, released, &d, false);
      for (event_handle e : released)
        if (e != 0) to_release.push_back(e);
    }
    check_locked();
  }
  for (event_handle e : to_release)
    fe_.release(e);
  if (d) run_deferred(*d);
  drain_unstitches();
}

void pool_impl::flush_caches(stream_handle only) {
  std::vector<cached_free> out;
  {
    std::lock_guard guard(caches_mutex());
    cache_transit_.fetch_add(1, std::memory_order_relaxed);
    for (thread_cache* c : caches_) {
      std::lock_guard cache_lock(c->mu);
      for (unsigned k = 0; k < c->free_count_locked();) {
        if (only != k_no_stream && c->free_list[k].stream != only) {
          ++k;
          continue;
        }
        const thread_cache::cached f = c->take_free_locked(k);
        out.push_back(cached_free{f.address, f.stream});
      }
    }
  }
  // Out of every table and still tagged: a free racing with this one is a double free.
  if (!out.empty()) return_to_pool(out.data(), out.size());
  cache_transit_.fetch_sub(1, std::memory_order_release);
}

void pool_impl::wait_for_cache_transits() {
  // A batch counted here was taken out of its table before flush_caches() looked at that
  // table (both under the table's lock): once the count is 0, every such batch is the pool's.
  while (cache_transit_.load(std::memory_order_acquire) != 0)
    std::this_thread::yield();
}

void pool_impl::cache_totals::add_history(const thread_cache& c) {
  hits += c.hits.load(std::memory_order_relaxed);
  hit_bytes += c.hit_bytes.load(std::memory_order_relaxed);
  frees += c.frees.load(std::memory_order_relaxed);
  invalid += c.invalid.load(std::memory_order_relaxed);
}

void pool_impl::cache_totals::add(const thread_cache& c) {
  add_history(c);
  free_bytes += c.free_bytes.load(std::memory_order_relaxed);
  free_blocks += c.free_blocks.load(std::memory_order_relaxed);
  requested_excess += c.requested_excess.load(std::memory_order_relaxed);
}

pool_impl::cache_totals pool_impl::cache_totals_now() const {
  std::lock_guard guard(caches_mutex());
  cache_totals t = retired_caches_;
  for (const thread_cache* c : caches_)
    t.add(*c);
  return t;
}

} // namespace gmem
