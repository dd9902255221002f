// The pool's private state and the helpers the implementation files share: pool.cpp (fast
// paths and the public wrappers), pool_grow.cpp (slow path: events, fences, growth, the OOM
// ladder), pool_segments.cpp (segments, idle list, trim, limit), pool_arena.cpp (the arena),
// thread_cache.cpp (the per-thread caches), pool_query.cpp (find, owns, stats, reports) and
// pool_check.cpp (is_valid).
//
// Lock order: mu_ only. Helpers named *_locked need mu_ held; they never call upstream, fences
// or the observer, but queue that work in a `deferred` that the caller runs after unlocking.
#pragma once

#include "common/spin_mutex.h"
#include "pool/address_map.h"
#include "pool/block.h"
#include "pool/free_index.h"
#include "pool/pool.h"
#include "pool/thread_cache.h"

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace gmem {

// n rounded up / down to a multiple of `to` (sizes and addresses alike).
constexpr std::size_t round_up(std::size_t n, std::size_t to) {
  return (n + to - 1) / to * to;
}
constexpr std::size_t round_down(std::size_t n, std::size_t to) {
  return n / to * to;
}

// The steady clock, for the pool's own timings.
inline std::uint64_t now_ns() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

// Upstream, fence and observer calls collected under the lock, made after unlocking.
struct deferred {
  std::vector<std::pair<std::uintptr_t, std::size_t>> unmaps; // upstream::unmap calls
  // What the observer hears of segments given back, and of arena segments as their records
  // change (an extended one is unmapped at its old size and mapped at its new one; a cut one
  // is unmapped and its parts mapped), so that a trace's segments are the pool's.
  struct segment_event {
    bool mapped;
    std::uintptr_t base;
    std::size_t bytes;
  };
  std::vector<segment_event> segment_events;
  // Events to release: the fast path releases at most one, so a few live inline (no malloc).
  event_handle few[4] = {};
  std::size_t few_count = 0;
  std::vector<event_handle> more;
  void release(event_handle e) {
    if (few_count < 4)
      few[few_count++] = e;
    else
      more.push_back(e);
  }
  std::size_t trimmed_bytes = 0;
  bool any() const { return few_count != 0 || !unmaps.empty() || !segment_events.empty(); }
};

// Names the calling thread in event_ref::thread.
inline const void* this_thread_tag() {
  static thread_local char tag;
  return &tag;
}

// A stitched range kept mapped after its block's free (pool_stitch.cpp): it maps `pages`
// (arena pages, in order) and serves nothing until a request reuses it.
struct kept_range {
  std::vector<std::uintptr_t> pages;
  std::uint64_t last_use = 0; // larger: used more recently
};

// Stream-free blocks of one stream, by segment class.
struct stream_cache {
  stream_handle stream = k_no_stream;
  free_index index[3];        // by segment class: small, large, oversize
  block* fifo_head = nullptr; // oldest free first
  block* fifo_tail = nullptr;
  std::size_t unsealed = 0; // blocks in index[] without an event (block::ev == nullptr)
  // Driver calls on this stream in progress without the lock (a seal's record, the event of a
  // block claimed from it), and whether the program is destroying it: then no new one starts
  // (pool::stream_destroying). A free on the stream clears it (the handle came back).
  unsigned calls = 0;
  bool retiring = false;
  void fifo_insert_after(block* pos, block* b) { // pos == nullptr: at the head
    b->fifo_prev = pos;
    b->fifo_next = pos != nullptr ? pos->fifo_next : fifo_head;
    if (b->fifo_next != nullptr)
      b->fifo_next->fifo_prev = b;
    else
      fifo_tail = b;
    if (pos != nullptr)
      pos->fifo_next = b;
    else
      fifo_head = b;
  }
  // Keeps b's own links: carve_locked puts a split-off piece where b was.
  void fifo_remove(block* b) {
    if (b->fifo_prev != nullptr)
      b->fifo_prev->fifo_next = b->fifo_next;
    else
      fifo_head = b->fifo_next;
    if (b->fifo_next != nullptr)
      b->fifo_next->fifo_prev = b->fifo_prev;
    else
      fifo_tail = b->fifo_prev;
  }
  void fifo_insert_sorted(block* b) { // by stamp, from the tail (new frees go last)
    block* pos = fifo_tail;
    while (pos != nullptr && pos->stamp > b->stamp)
      pos = pos->fifo_prev;
    fifo_insert_after(pos, b);
  }
};

class pool_impl {
public:
  pool_impl(upstream& up, fences& fe, const pool_options& options, pool_observer* observer);
  ~pool_impl();

  alloc_result allocate(std::size_t bytes, stream_handle s);
  pool_status deallocate(std::uintptr_t address, stream_handle s);
  // --- thread_cache.cpp: the per-thread caches (pool/thread_cache.h) ---
  // Under caches_mutex(): c serves this pool from now on / its thread exited (c is deleted).
  void register_cache(thread_cache* c);
  void thread_exited(thread_cache* c);
  std::optional<block_info> find(std::uintptr_t address) const;
  bool owns(std::uintptr_t address) const;
  std::uint64_t begin_fence();
  // Bytes made free; barrier: the fence was a device-side barrier (counted in stats).
  std::size_t end_fence(std::uint64_t ticket, std::uint64_t duration_ns, bool barrier = false);
  void end_stream_sync(stream_handle s, std::uint64_t ticket);
  void stream_destroying(stream_handle s);
  std::size_t trim(std::size_t keep_free_bytes);
  void set_limit(std::size_t bytes);
  void abandon();
  pool_stats stats() const;
  spin_mutex::contention lock_contention() const { return mu_.contention_stats(); }
  pool::slow_path_counters slow_path() const;
  void reset_peaks();
  void for_each_segment(const std::function<void(const segment_view&)>& f) const;
  bool is_valid() const;
  const pool_options& options() const { return opt_; }

private:
  static constexpr unsigned k_small = 0, k_large = 1, k_oversize = 2, k_classes = 3;
  // With an arena, every request above small_max_bytes is large (oversize_now_ is SIZE_MAX).
  unsigned class_of_size(std::size_t rounded) const {
    return rounded <= opt_.small_max_bytes                            ? k_small
           : rounded <= oversize_now_.load(std::memory_order_relaxed) ? k_large
                                                                      : k_oversize;
  }
  static unsigned class_of(const segment* seg) { return static_cast<unsigned>(seg->kind); }

  // --- pool.cpp: block bookkeeping (all *_locked) ---
  stream_cache* find_stream_locked(stream_handle s) const;
  stream_cache* get_stream_locked(stream_handle s);
  block* find_fit_locked(std::size_t size, unsigned cls, stream_handle s) const;
  block* find_fit_in_locked(std::size_t size, unsigned cls, stream_handle s) const;
  void unlist_locked(block* b); // out of whatever index holds it (free or stream_free)
  void carve_locked(block* b, std::size_t size); // split off the tail beyond size if worth it
  // b becomes live; an event it held and no other block shares is returned for release.
  alloc_result make_live_locked(block* b, std::size_t requested, stream_handle s,
                                event_handle& release, thread_cache* tag);
  // Serves a request of `size` (rounded) from the listed block b: unlist, carve, make live.
  alloc_result take_locked(block* b, std::size_t size, std::size_t requested, stream_handle s,
                           event_handle& release, thread_cache* tag) {
    unlist_locked(b);
    carve_locked(b, size);
    return make_live_locked(b, requested, s, release, tag);
  }
  // The pool's allocation, b tagged with `tag` (may be nullptr) when served.
  alloc_result allocate_shared(std::size_t size, std::size_t requested, stream_handle s,
                               thread_cache* tag);
  // The pool's free of a block that is no longer live for the program (erased from live_,
  // untagged): pending, stream-free on s, or free (reuse_safety off). Events that lost their
  // last reference land in `released`; a trim the cache cap needs is queued in **d (created;
  // d == nullptr: the cap waits for the next free). program_free: the program's free
  // (counted); else a cached block going back (counted when the cache kept it).
  void release_block_locked(block* b, stream_handle s, event_handle (&released)[2],
                            std::unique_ptr<deferred>* d, bool program_free);
  pool_status deallocate_shared(std::uintptr_t address, stream_handle s, bool from_cache);
  // b is tagged: its owner's table lets go of it. false: b is not live for the program
  // (free in the cache, or on its way back to the pool): a double free.
  bool untag_locked(block* b);
  // b sits free in its owner's cache: true, and the stream it was freed on in *stream.
  bool cached_free_locked(const block* b, stream_handle* stream = nullptr) const;
  alloc_result allocate_cached(thread_cache& c, std::size_t size, std::size_t requested,
                               stream_handle s);
  // The owner's free on stream s: kept in c, or returned to the pool; not_owned: c does not
  // know the address (the pool's free decides).
  pool_status deallocate_cached(thread_cache& c, std::uintptr_t address, stream_handle s);
  struct cached_free {
    std::uintptr_t address;
    stream_handle stream;
  };
  // Blocks taken out of a cache's table go back to the pool (their tags are still set).
  void return_to_pool(const cached_free* blocks, std::size_t n);
  // Every cache's free entries (of stream `only`; all with k_no_stream) go back to the pool.
  void flush_caches(stream_handle only);
  void wait_for_cache_transits(); // every batch taken out of a table is back in the pool
  // Under caches_mutex() and mu_: the caches let go of this pool (teardown, abandon()).
  void detach_caches_locked();
  struct cache_totals {
    std::size_t free_bytes = 0, free_blocks = 0, hits = 0, hit_bytes = 0, frees = 0, invalid = 0;
    std::int64_t requested_excess = 0;
    void add_history(const thread_cache& c); // what it served and kept (exited threads)
    void add(const thread_cache& c);         // and what it holds now
  };
  cache_totals cache_totals_now() const;
  void insert_free_locked(block* b); // free for all, merging with neighbours
  // b (unlisted), freed at `stamp` (<= seq_), waits for a fence begun after that.
  void make_pending_locked(block* b, std::uint64_t stamp);
  // b becomes stream_free in sc (b->stream's), merging with neighbours freed on its stream
  // under the same event or by the same thread; events that lost their last reference land in
  // `released`.
  void insert_stream_free_locked(block* b, stream_cache& sc, event_handle (&released)[2]);
  // A driver call on stream s counted in stream_cache::calls is done (none left to count after
  // an abandon()).
  void stream_call_done_locked(stream_handle s) {
    stream_cache* sc = find_stream_locked(s);
    if (sc != nullptr && sc->calls != 0) --sc->calls;
  }
  event_handle drop_event_locked(block* b); // b lets go of its event: returns it if unshared
  void merge_into_locked(block* left, block* right); // right joins left; right is recycled
  void enforce_cache_cap_locked(deferred& d);
  // Arena only: the pending blocks could serve fence_batch requests of `size`, so a fence
  // comes before taking any free block (b) or growing. Pending blocks merge with their free
  // neighbours only when a fence makes them free; taken from the free space beside them
  // instead, large requests carve it up and the arena, which keeps its pages, grows for good.
  // Waiting until they could serve four requests, not one, lets each fence free a bigger
  // batch: replayed, the fast-step convnet's trace peaks at 1.195x peak live with 30% fewer
  // fences than with one, the GPT traces at 1.05x with 29% fewer (docs/pool.md).
  // (A multiply, not a divide: this runs on every large arena allocation's fast path; a batch
  // whose bytes overflow cannot be pending.)
  bool fence_first_locked(std::size_t size, unsigned cls) const {
    std::size_t batch_bytes = 0;
    return page_ != 0 && cls == k_large &&
           !__builtin_mul_overflow(size, opt_.fence_batch, &batch_bytes) &&
           pending_class_bytes_[cls] >= batch_bytes;
  }
  std::size_t free_bytes_locked() const {
    return free_[0].bytes() + free_[1].bytes() + free_[2].bytes();
  }
  void run_deferred(deferred& d);
  void check_locked() const;

  // --- pool_grow.cpp and pool_segments.cpp ---
  // The slow path walks the ladder of pool.h's Policy: 2 (a fit) and 3(a)-(e), one function
  // per step. A step is called with mu_ held; `down`: it did not apply and mu_ is still held;
  // `again`: it released mu_ and changed something, so the walk looks for a fit once more;
  // `done`: it released mu_ and the answer is the walk's.
  enum class step { down, again, done };
  // Steps a request takes at most once (one bit each in slow_walk::taken_steps).
  enum class rung : unsigned {
    seal_others,    // 3a: seal other streams, query events
    depend,         // 3a: a dependency on another stream's block
    mark,           // 3b: the last mark, if complete, as a fence; a new mark
    fence,          // 3b, or 3d when 3b did not fence
    seal_own,       // 3c: seal the request's own stream
    flush,          // 3c: the threads' caches give their free blocks back
    trim_for_limit, // 3c: growth would cross the limit: idle segments go first
    stitch,         // 3c: free arena pages into a stitched range (pool_options::stitch)
    trim,           // 3d
  };
  struct slow_walk {
    std::size_t size;
    std::size_t requested;
    stream_handle s;
    thread_cache* tag;
    unsigned cls;
    unsigned taken_steps = 0;
    bool grown = false;     // 3c extended the arena for this request: its fit is no cache hit
    bool blocked = false;   // 3c: growing would cross the limit
    bool topped_up = false; // 3c: the arena grew by what stitching lacked (once per request)
    bool marked = false;    // 3b: a complete mark released blocks (the arena's batch, too)
    bool taken(rung r) const { return (taken_steps >> static_cast<unsigned>(r) & 1u) != 0; }
    void take(rung r) { taken_steps |= 1u << static_cast<unsigned>(r); }
  };
  alloc_result allocate_slow(std::size_t size, std::size_t requested, stream_handle s,
                             thread_cache* tag);
  step take_fit(slow_walk& w, std::unique_lock<spin_mutex>& lock, alloc_result& out);
  step seal_other_streams(slow_walk& w, std::unique_lock<spin_mutex>& lock);
  step depend_on_other_stream(slow_walk& w, std::unique_lock<spin_mutex>& lock, alloc_result& out);
  step use_mark(slow_walk& w, std::unique_lock<spin_mutex>& lock);
  step fence_for_request(slow_walk& w, std::unique_lock<spin_mutex>& lock);
  step seal_own_stream(slow_walk& w, std::unique_lock<spin_mutex>& lock);
  step flush_thread_caches(slow_walk& w, std::unique_lock<spin_mutex>& lock);
  step stitch(slow_walk& w, std::unique_lock<spin_mutex>& lock, alloc_result& out);
  step grow(slow_walk& w, std::unique_lock<spin_mutex>& lock, alloc_result& out);
  step fence_for_reuse(slow_walk& w, std::unique_lock<spin_mutex>& lock);
  step trim_and_retry(slow_walk& w, std::unique_lock<spin_mutex>& lock);
  step fail(slow_walk& w, std::unique_lock<spin_mutex>& lock, alloc_result& out);
  // reserved + in-flight maps and unmaps + bytes would exceed limit_bytes (0: no limit).
  bool over_limit_locked(std::size_t bytes) const;
  // Records one event on each stream (other than `except`) that has unsealed blocks and a
  // block that could serve `size` of class `cls`, without the lock, and gives it to the
  // blocks freed before the record; true if any was sealed. only: seals `except` alone.
  bool seal_streams(stream_handle except, std::size_t size, unsigned cls, bool only = false);
  bool refresh_events(); // queries stream-free events without the lock; true if any completed
  bool try_wait_for_other_stream(std::size_t size, std::size_t requested, stream_handle s,
                                 alloc_result& out, thread_cache* tag);
  // Pool-issued fence (a barrier when allowed); bytes it made free. One at a time: a thread
  // that asks while another's runs waits for it, and makes none of its own when a fence that
  // began after it asked has completed meanwhile (it covered every block freed before).
  std::size_t fence_now();
  // The last mark, if complete, completes as a fence (bytes it made free); a new mark is
  // recorded unless the last one is still running.
  std::size_t harvest_mark();
  // A fence that began at `ticket` completed: fence_now() callers that asked before it share it.
  void note_fence_ticket(std::uint64_t ticket);
  std::size_t complete_fence_locked(std::uint64_t ticket, deferred& d);
  // Stream-free blocks (of stream `only`, or of all with k_no_stream) become free for all:
  // those freed before `ticket`, or with complete_only, those whose event completed.
  std::size_t convert_stream_free_locked(stream_handle only, std::uint64_t ticket,
                                         bool complete_only, deferred& d);
  std::size_t pending_or_stream_bytes_locked(unsigned cls, stream_handle s) const;
  std::size_t segment_bytes_for(std::size_t size) const;
  segment* new_segment_locked(std::uintptr_t base, std::size_t bytes, segment_kind kind);
  void drop_segment_locked(segment* seg); // forgets the record (its blocks are gone)
  segment* add_segment_locked(std::uintptr_t base, std::size_t bytes, segment_kind kind,
                              bool arena = false);
  void detach_segment_locked(segment* seg, deferred& d);
  std::size_t trim_locked(std::size_t keep_free_bytes, deferred& d);
  bool trimmable_locked() const; // trim_locked(0) would release something

  // --- pool_arena.cpp: the arena (pool_options::arena) ---
  // Bytes to map so that the arena's last free block, extended, fits `size`; `at` = where.
  std::size_t arena_growth_locked(std::size_t size, std::uintptr_t& at) const;
  // [base, base + bytes) was mapped by upstream::extend: it extends the segment that ends
  // at base, and joins the one that starts where it ends (concurrent growth), or is new.
  void add_arena_locked(std::uintptr_t base, std::size_t bytes, deferred& d);
  void join_locked(segment* left, segment* right, deferred& d);
  // Unmaps the whole pages inside free arena blocks, until free bytes <= keep_free_bytes.
  std::size_t trim_arena_locked(std::size_t keep_free_bytes, deferred& d);
  // Unmaps [p0, p1) (whole pages inside the free block b of seg); the part after it becomes
  // a segment of its own, returned (nullptr: none).
  segment* cut_locked(segment* seg, block* b, std::uintptr_t p0, std::uintptr_t p1, deferred& d);
  void release_for_growth_locked(std::size_t new_bytes, std::size_t size, deferred& d);

  // --- pool_stitch.cpp: stitched ranges (pool_options::stitch) ---
  // Lends arena memory for a request of `size` (> page_): whole free pages, all but the last
  // lent whole, the last only as far as the request needs. Appends the lent blocks (live, lent)
  // in page order to `lent`; false (nothing lent) when the free pages do not add up.
  bool lend_pages_locked(std::size_t size, std::vector<block*>& lent);
  // The lent blocks go back to the arena: with b's free (stream-less: pending; on a stream:
  // stream-free there; without reuse safety: free). Events released land in `events`.
  void return_pages_locked(segment* range, stream_handle s, std::vector<event_handle>& events);
  // The stitched block b, freed (its stats already counted): its pages go back to the arena and
  // its range is kept (kept_), or, when none are kept, queued for upstream::unstitch (run by
  // drain_unstitches()).
  void release_range_locked(block* b, stream_handle s);
  // A kept range of the pages `size` needs, whose pages are free for that request: its
  // blocks lent (in `lent`, page order) and its record out of kept_ into `pages`; false: none.
  // *waiting: a candidate's pages would all be free after a fence (pending or stream-free).
  bool reuse_kept_locked(std::size_t size, std::vector<block*>& lent,
                         std::vector<std::uintptr_t>& pages, std::uintptr_t& base, bool* waiting);
  // The kept range at `it` is given back (queued for upstream::unstitch).
  void release_kept_locked(std::map<std::uintptr_t, kept_range>::iterator it);
  // Least recently used kept ranges go while more are kept than the options allow.
  void enforce_keep_budget_locked();
  // Kept ranges that map an arena page in [p0, p1) go: the arena is about to unmap it.
  void release_kept_touching_locked(std::uintptr_t p0, std::uintptr_t p1);
  // Stitching's time budget (pool_options::stitch_time_share) is spent.
  bool stitch_budget_spent() const;
  void drain_unstitches(); // without mu_: the queued unstitch calls and event releases
  std::size_t free_whole_pages_locked() const; // whole pages inside free arena blocks
  // Growth for a request of `size` that stitching could serve after it: the pages the free
  // ones lack, when fewer than `bytes` (growing the arena's end to fit it whole); else 0.
  std::size_t stitch_top_up_locked(std::size_t size, std::size_t bytes) const;
  // Splits b at b->address + offset (0 < offset < size, a multiple of 512): the second part,
  // returned, has b's state and is in no index.
  block* split_locked(block* b, std::size_t offset);
  void idle_push_locked(segment* seg);
  void idle_remove_locked(segment* seg);

  // --- pool_check.cpp ---
  bool is_valid_locked() const;
  // --- pool_query.cpp ---
  segment* segment_of_locked(std::uintptr_t address) const;
  bool kept_of_locked(std::uintptr_t address) const; // inside a kept stitched range

  upstream& up_;
  fences& fe_;
  const std::uint64_t id_; // names the pool in threads' cache slots (never reused)
  // The caches serving this pool, and the counters of those gone (exited threads); guarded by
  // caches_mutex(). cache_count_: caches_.size(), read without it.
  std::vector<thread_cache*> caches_;
  cache_totals retired_caches_;
  std::atomic<std::size_t> cache_count_{0};
  // Batches of cached blocks out of their table (under its lock) and not yet the pool's: a
  // stream being destroyed waits for them (they may be its frees).
  std::atomic<unsigned> cache_transit_{0};
  pool_options opt_;
  pool_observer* obs_;

  std::mutex fence_mu_;                             // serializes fence_now()'s fences
  std::atomic<std::uint64_t> last_fence_ticket_{0}; // the latest completed fence's or mark's
  // Marks are used while fence_calls is below marks_until_: set to k_marked_fences calls past
  // the last fence call that found another thread's fence running.
  static constexpr std::uint64_t k_marked_fences = 256;
  std::atomic<std::uint64_t> marks_until_{0};
  std::mutex mark_mu_; // guards mark_ and its driver calls
  struct {
    event_handle ev = 0;      // the outstanding mark (0: none)
    std::uint64_t ticket = 0; // blocks freed before it have stamps below this
  } mark_;
  struct slow_path_atomics { // pool::slow_path_counters, relaxed
    std::atomic<std::uint64_t> walks{0}, walk_ns{0}, fence_calls{0}, fences_shared{0},
        fence_wait_ns{0}, fence_ns{0}, marks{0}, marks_used{0}, marks_refused{0}, destroy_waits{0};
  } slow_;
  mutable spin_mutex mu_;
  // Everything below is guarded by mu_.
  std::map<std::uintptr_t, std::unique_ptr<segment>> segments_; // by base
  free_index free_[k_classes];                         // safe for all streams, by segment class
  std::vector<std::unique_ptr<stream_cache>> streams_; // stream-free blocks
  mutable stream_cache* last_stream_ = nullptr;        // lookup cache
  address_map live_;
  // Pending blocks in free order (stamps never decrease), linked through fifo_next.
  block* pending_head_ = nullptr;
  block* pending_tail_ = nullptr;
  std::size_t pending_class_bytes_[k_classes] = {};
  segment* idle_head_ = nullptr; // wholly free segments
  static constexpr std::size_t k_spare_segments = 16;
  std::vector<std::unique_ptr<segment>> spare_segments_; // detached records, for reuse
  slab<block> blocks_;
  slab<event_ref> events_;
  // Fence and stream-sync tickets: a free is stamped with seq_; a fence that began later has
  // a larger ticket. Invariant: every pending stamp <= seq_.
  std::uint64_t seq_ = 0;
  std::uint64_t event_seq_ = 0; // orders seals (event_ref::seq)
  std::uint64_t free_seq_ = 0;  // orders stream frees (block::freed_seq)
  // Being mapped or unmapped without the lock; counted against the limit.
  std::size_t in_flight_map_bytes_ = 0;
  std::size_t in_flight_unmap_bytes_ = 0;
  pool_stats st_;
  // Peak live bytes of the current and of the previous window of grow_window_allocs
  // allocations (the growth rule's hysteresis).
  std::size_t window_peak_live_ = 0, prev_window_peak_live_ = 0, window_allocs_ = 0;
  // The oversize threshold in force (pool_options::oversize_fraction), set when reserved
  // changes; read without the lock to classify a request.
  std::atomic<std::size_t> oversize_now_{0};
  void update_oversize_locked();
  // The arena: its page (0: no arena) and the segment it last grew, which it grows next.
  std::size_t page_ = 0;
  segment* arena_tip_ = nullptr;
  // Stitched ranges freed under the lock (bytes: the block's, for the observer) and kept ranges
  // given back (pages != 0: upstream::unstitch; observed: the observer already heard of it),
  // and events their pages let go of; drained without the lock.
  struct unstitch_call {
    std::uintptr_t base;
    std::size_t bytes;
    std::size_t pages;
    bool observed = false;
  };
  std::vector<unstitch_call> unstitches_;
  std::vector<event_handle> unstitch_events_;
  std::atomic<bool> unstitch_queued_{false}; // read without the lock on the free path
  std::size_t lending_blocks_ = 0; // lent while their range is being stitched (no mu_ held)
  // Kept ranges (pool_options::stitch_keep_ranges), by base: mapped, serving nothing, their
  // pages free or used through the arena's addresses. last_use orders them for release.
  std::map<std::uintptr_t, kept_range> kept_;
  std::uint64_t kept_uses_ = 0;
  // Stitching's host time (upstream stitch and unstitch calls) and the pool's start, for the
  // time budget; read without the lock.
  std::atomic<std::uint64_t> stitch_ns_{0};
  const std::uint64_t start_ns_;
};

} // namespace gmem
