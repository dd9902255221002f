// Per-thread caches in front of the shared pool, for stream-ordered allocations.
//
// A thread that frees a block on stream s and then asks for a similar size on s (the cycle of
// every stream-ordered loop) gets the block back from its own cache, without the pool's lock:
// at 16 threads the lock was taken twice per pair and most of those took it contended
// (GMEM_VERBOSE pool_lock line; docs/pool.md, "Threads").
//
// Ownership. A block served to a thread by the pool on a stream is "tagged" with the thread's
// cache (block::owner, under the pool lock) and entered in the cache's table of blocks handed
// out. The pool still counts it live while the thread holds it and while it sits free in the
// cache; the cache's counters say how much of that is free, and stats() subtracts it.
//   - A free on a stream by the owning thread finds the block in its table, takes it out and
//     keeps it in its free list, with the freeing stream.
//   - An allocation on stream s by the owning thread takes a free block of stream s, of the
//     request's segment class, at least the request and at most twice it (best fit); it goes
//     back into the table.
//   - Any other free of a tagged block (another thread's, or a stream-less one) goes through
//     the pool, which takes the block out of its owner's table under the cache's lock and then
//     frees it as usual. A tagged block that is not in its owner's table (free in the cache, or
//     on its way back to the pool) is not the program's: freeing it is a double free.
// Reuse safety: a cached block freed on stream s serves only stream s (stream order makes that
// safe at once, as for the pool's own stream-free blocks). A stream about to be destroyed has
// its entries returned to the pool first (pool::stream_destroying), so a new stream that gets
// the same handle never receives them.
// Bounds: at most k_max_free free blocks and k_max_free_bytes per cache, blocks of at most
// k_max_block bytes; beyond that the oldest go back to the pool, as many as take the cache under
// them, under one lock. The pool takes every cache's free blocks back before it grows, and on
// trim and set_limit, so the caches hold memory only while the pool has what it needs. A
// thread's exit returns its free blocks and leaves its live ones to the pool.
//
// Locks, outermost first: caches_mutex() (registration, thread exit, pool teardown, flushes),
// the pool lock, a cache's lock. The owning thread never calls into the pool while it holds
// its cache's lock.
#pragma once

#include "common/spin_mutex.h"
#include "pool/pool.h"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>

namespace gmem {

class pool_impl;

struct thread_cache {
  static constexpr unsigned k_slots = 128;     // handed-out table (power of two)
  static constexpr unsigned k_max_handed = 96; // entries in it at most (load <= 3/4)
  static constexpr unsigned k_max_free = 16;   // free blocks kept
  static constexpr std::size_t k_max_free_bytes = std::size_t{8} << 20;
  static constexpr std::size_t k_max_block = std::size_t{4} << 20;

  // A block the program holds (address 0: empty slot).
  struct handed {
    std::uintptr_t address = 0;
    std::size_t size = 0;           // the block's (rounded)
    std::size_t requested = 0;      // as the program asked
    std::size_t pool_requested = 0; // what the pool counts for the block (its first request)
  };
  // A block free in the cache, freed on `stream`.
  struct cached {
    std::uintptr_t address = 0;
    std::size_t size = 0;
    std::size_t pool_requested = 0;
    stream_handle stream = k_no_stream;
  };

  spin_lock mu; // the owner takes it on every call; others rarely
  // The pool served; nullptr once the pool is gone (its teardown or abandon()). Changed
  // under caches_mutex() and mu; the owner reads it without them.
  std::atomic<pool_impl*> pool{nullptr};
  // Guarded by mu. Open addressing with linear probing, no tombstones (removal shifts back).
  handed table[k_slots];
  // Changed under mu; the owner reads it without: only the owner adds entries, so what it
  // reads is never below the count.
  std::atomic<unsigned> handed_count{0};
  cached free_list[k_max_free + 1]; // oldest first; free_blocks entries

  // What stats() adds to the pool's view; written under mu, read without it.
  // The free list's length and bytes. The owner reads free_blocks without mu too: only the
  // owner adds blocks, so 0 means none.
  std::atomic<std::size_t> free_bytes{0};
  std::atomic<std::size_t> free_blocks{0};
  std::atomic<std::size_t> hits{0};      // allocations served from the cache
  std::atomic<std::size_t> hit_bytes{0}; // their rounded bytes
  std::atomic<std::size_t> frees{0};     // frees kept in the cache
  std::atomic<std::size_t> invalid{0};   // double frees it recognized
  // Sum over its blocks of pool_requested - requested (free ones: pool_requested): the pool's
  // live_requested_bytes counts pool_requested for every block of the cache.
  std::atomic<std::int64_t> requested_excess{0};

  static unsigned home(std::uintptr_t address) {
    return static_cast<unsigned>(((address >> 9) * 0x9E3779B97F4A7C15ull) >> 57); // 7 bits
  }
  // The slot holding address, or -1.
  int find_locked(std::uintptr_t address) const {
    for (unsigned i = home(address);; i = (i + 1) & (k_slots - 1)) {
      if (table[i].address == 0) return -1; // first: 0 marks an empty slot, never a block
      if (table[i].address == address) return static_cast<int>(i);
    }
  }
  void insert_locked(const handed& h) {
    unsigned i = home(h.address);
    while (table[i].address != 0)
      i = (i + 1) & (k_slots - 1);
    table[i] = h;
    handed_count.store(handed_count.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    add_excess(static_cast<std::int64_t>(h.pool_requested) -
               static_cast<std::int64_t>(h.requested));
  }
  // Removes slot i; entries after it move back so that every probe path stays unbroken.
  handed remove_locked(unsigned i) {
    const handed out = table[i];
    add_excess(-(static_cast<std::int64_t>(out.pool_requested) -
                 static_cast<std::int64_t>(out.requested)));
    handed_count.store(handed_count.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
    for (unsigned j = (i + 1) & (k_slots - 1);; j = (j + 1) & (k_slots - 1)) {
      if (table[j].address == 0) break;
      const unsigned h = home(table[j].address);
      // table[j] may fill the hole at i if its home is not in (i, j] (cyclically).
      if (((j - h) & (k_slots - 1)) >= ((j - i) & (k_slots - 1))) {
        table[i] = table[j];
        i = j;
      }
    }
    table[i] = handed{};
    return out;
  }
  unsigned free_count_locked() const {
    return static_cast<unsigned>(free_blocks.load(std::memory_order_relaxed));
  }
  std::size_t free_bytes_locked() const { return free_bytes.load(std::memory_order_relaxed); }
  void push_free_locked(const cached& c) {
    free_list[free_count_locked()] = c;
    bump(free_blocks, 1);
    bump(free_bytes, c.size);
    add_excess(static_cast<std::int64_t>(c.pool_requested));
  }
  cached take_free_locked(unsigned k) {
    const cached out = free_list[k];
    for (unsigned m = k + 1; m < free_count_locked(); ++m)
      free_list[m - 1] = free_list[m];
    bump(free_blocks, std::size_t(0) - 1);
    bump(free_bytes, std::size_t(0) - out.size);
    add_excess(-static_cast<std::int64_t>(out.pool_requested));
    return out;
  }
  // The free block at address, or -1.
  int find_free_locked(std::uintptr_t address) const {
    for (unsigned k = 0; k < free_count_locked(); ++k)
      if (free_list[k].address == address) return static_cast<int>(k);
    return -1;
  }
  void add_excess(std::int64_t v) {
    requested_excess.store(requested_excess.load(std::memory_order_relaxed) + v,
                           std::memory_order_relaxed);
  }
  static void bump(std::atomic<std::size_t>& c, std::size_t v) {
    c.store(c.load(std::memory_order_relaxed) + v, std::memory_order_relaxed);
  }
};

// Outermost lock of the caches of every pool (rare paths only).
std::mutex& caches_mutex();

// The calling thread's cache for the pool with this id, registered on first use with
// register_cache (called under caches_mutex()); nullptr when the thread has no room for
// another pool's cache. The thread's exit calls pool_impl::thread_exited for each.
thread_cache* this_thread_cache(std::uint64_t pool_id, pool_impl* pool);

} // namespace gmem
