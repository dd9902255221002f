// The pool's internal records: blocks, segments and the shared event of stream-free blocks,
// plus the slab they are allocated from (no malloc on the hot path).
#pragma once

#include "pool/pool.h"
#include "pool/start_bitmap.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace gmem {

struct segment;
struct thread_cache;

// An event recorded on the stream a block was freed on, after the free: by the slow path when
// another stream (or a stream-less allocation) wants the block ("sealing", pool_impl::
// seal_streams), never by the free itself. Split pieces of that block share it.
// Invariant: refs == number of stream_free blocks pointing here (+ temporary holds while the
// pool queries it without its lock); the event is released when refs drops to 0.
struct event_ref {
  event_handle event = 0;
  std::uint32_t refs = 0;
  bool complete = false; // a query saw it complete
  bool queued = false;   // collected by refresh_events (dedupe)
  // Order of the seal that recorded it, and the thread that did. One thread's events on one
  // stream are recorded in that order, so the later one covers the earlier (pieces sealed by
  // one thread on one stream may merge and keep the later event).
  std::uint64_t seq = 0;
  const void* thread = nullptr;
  event_ref* list_next = nullptr; // slab free list
};

// Hot fields (those the fast paths and the neighbour checks of coalescing read) fill the first
// cache line; a block is 128-byte aligned so that it never straddles more lines than that.
struct alignas(64) block {
  std::uintptr_t address = 0;
  std::size_t size = 0;
  // Physical neighbours in the same segment; nullptr at the segment's ends.
  // Invariant: prev->address + prev->size == address; the blocks of a segment tile it.
  block* prev = nullptr;
  block* next = nullptr;
  segment* seg = nullptr;
  // Links of the free-index bin, the pending FIFO or the slab free list (one at a time).
  block* list_prev = nullptr;
  block* list_next = nullptr;
  block_state state = block_state::free;
  bool claimed = false;  // taken by a thread waiting on another stream's event
  bool lent = false;     // live: arena memory a stitched range maps (not in live_)
  std::uint16_t bin = 0; // bin while in a free index
  // Second line.
  std::size_t requested = 0;          // live
  stream_handle stream = k_no_stream; // live: allocating stream; stream_free: freeing stream
  // stream_free only: the event that covers its free; nullptr while unsealed (no event
  // recorded since the free yet: reusable on its own stream only, or after a fence / sync).
  event_ref* ev = nullptr;
  std::uint64_t stamp = 0;     // pending / stream_free: fence sequence at free time
  std::uint64_t freed_seq = 0; // stream_free: order of its (latest merged) free, for sealing
  // stream_free only: the stream's blocks in free order (stamps never decrease), so that
  // fences, stream syncs and completed events release a prefix without a walk of all blocks.
  block* fifo_prev = nullptr;
  block* fifo_next = nullptr;
  // live only: the thread cache the block was served through, whose table has it
  // (pool/thread_cache.h); nullptr for blocks the caches know nothing of.
  thread_cache* owner = nullptr;
};
static_assert(sizeof(block) == 128, "two cache lines");

struct segment {
  std::uintptr_t base = 0;
  std::size_t size = 0;
  segment_kind kind = segment_kind::small;
  block* first = nullptr;
  block* last = nullptr;
  bool arena = false; // part of the arena (upstream::extend): never idle, trimmed by page
  // A stitched range (pool_stitch.cpp): one block, live, on the arena blocks in `lent` (in
  // page order; all but the last are whole pages). The range maps the arena pages `pages`, in
  // order, those the lent blocks cover. Never idle, counts nothing in reserved_bytes (its
  // memory is the arena's).
  bool stitched = false;
  std::vector<std::uintptr_t> pages;
  std::vector<block*> lent;
  start_bitmap starts; // bit i set <=> a block starts at base + i * 512 (oversize: 1 bit)
  std::size_t granule(std::uintptr_t address) const {
    return kind == segment_kind::oversize ? 0 : (address - base) / k_block_granule;
  }
  // Wholly free segments (one free block covering it) form a list, the candidates for trim.
  segment* idle_prev = nullptr;
  segment* idle_next = nullptr;
  bool idle = false;
};

// Fixed-size objects recycled through a free list; memory returns to the system only when the
// slab is destroyed.
template <class T> class slab {
public:
  T* get() {
    if (free_ == nullptr) refill();
    T* t = free_;
    free_ = t->list_next;
    *t = T{};
    ++in_use_;
    return t;
  }
  void put(T* t) {
    t->list_next = free_;
    free_ = t;
    --in_use_;
  }
  std::size_t in_use() const { return in_use_; }

private:
  void refill() {
    constexpr std::size_t k_chunk = 256;
    chunks_.push_back(std::make_unique<T[]>(k_chunk));
    T* c = chunks_.back().get();
    for (std::size_t i = 0; i < k_chunk; ++i) {
      c[i].list_next = free_;
      free_ = &c[i];
    }
  }
  std::vector<std::unique_ptr<T[]>> chunks_;
  T* free_ = nullptr;
  std::size_t in_use_ = 0;
};

} // namespace gmem
