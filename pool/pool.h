// The segment-block caching pool: serves device allocations from segments it keeps, instead
// of asking the driver each time. Pure address arithmetic: it never touches the memory.
//
// Vocabulary
//   segment  one upstream allocation (upstream::map), the unit obtained from and returned to
//            the driver.
//   block    a sub-range of one segment, live (handed out) or free. A block never spans two
//            segments; the blocks of a segment tile it exactly.
//   pending  a block freed without a stream (cuMemFree) that device work issued before the free
//            may still touch. It becomes free only after a fence that started after the free.
//   stream-free  a block freed on a stream (cuMemFreeAsync): reusable at once on that stream.
//            Other streams need an event recorded on its stream after the free; the free
//            records none (the block is "unsealed": no driver call on the hot path). When
//            another stream or a stream-less allocation wants such blocks, the slow path
//            "seals" their stream: one event for all its frees so far. A sealed block serves
//            others once its event completed or became a dependency of their stream.
//   fence    a synchronization of all streams: issued by the pool (fences::synchronize, or with
//            pool_options::barriers the device-side fences::barrier, which the host does not
//            wait for) or made by the program (begin_external_fence / end_external_fence).
//   trim     returning free memory to the driver.
//
// The default policy (the shim's: pool_options::arena over an upstream with arena pages)
//   1. Sizes round up to 512 bytes. Requests up to small_max_bytes (1 MiB) are packed into
//      small segments (2 MiB); every larger one comes from one arena that grows by pages
//      (16 MiB) where it ends, so its free space merges across growths.
//   2. Good fit in O(1): segregated bins (exact below 16 KiB, 32 per power of two above) with
//      bitmaps, best of a few candidates (within 1/32). A stream's own freed blocks are tried
//      first. A block is split when the rest is worth keeping (512 B small, 1 MiB arena);
//      freed blocks merge with free neighbours of the same safety.
//   3. No safe block fits: the ladder (pool_grow.cpp, one function per step). Each step is
//      taken at most once per request; after one that changed something, 2 is tried again.
//      (a) seal other streams; blocks whose event completed become free for all; a stream may
//      take another stream's block through a dependency (fences::wait);
//      (b) while threads contend for fences (marks), the mark an earlier slow allocation
//      recorded, if complete, frees what was freed before it, and a new mark is recorded;
//      then fence, when pending and stream-free blocks could cover the request; a fence is
//      ~1 us and, with barriers, the host does not wait. In the arena a fence comes first,
//      before any free block is taken, once the pending blocks alone could cover four such
//      requests (fence_batch): they merge with their free neighbours, and large free ranges
//      stay whole;
//      (c) grow: first the request's own stream is sealed and the threads' caches give back
//      their free blocks; with pool_options::stitch, a kept stitched range whose pages are
//      free, or the arena's whole free pages mapped into a new range when they add up to it
//      (within a time budget), serve the request (pool_stitch.cpp); then extend the
//      arena, or map a small segment (unmapping wholly free ones first while reserved would
//      exceed 1.05 x demand); a growth that would cross the limit gives back every idle
//      segment and free arena page first;
//      (d) at the limit or driver OOM: fence (unless (b) did), trim, retry;
//      (e) out_of_memory (observer on_oom).
//   4. Memory goes back to the driver on trim (gmem_empty_cache), at the limit, beyond
//      max_cached_bytes and in out-of-memory recovery; arena pages only then.
// The fallback (no arena: GMEM_ARENA=0, or a device without virtual memory management) differs
// only in 1 and 3c: three segment classes, never mixed: small; large (large_segment_bytes,
// 40 MiB, growing to reserved / 8, at most 256 MiB); oversize (above max(oversize_bytes 20 MiB,
// reserved x oversize_fraction 1/512): a segment of its own, never split, reused for requests
// at most oversize_max_waste 1/4 + 2 MiB smaller); growth releases wholly free segments first,
// demand being at least the peak live bytes of the last window(s) of grow_window_allocs
// allocations. docs/pool.md gives the measurements behind every number.
//
// Threads: every public function is thread-safe. One lock (a short spin, then a futex sleep)
// guards the structures; upstream, fences and the observer are always called without it. In
// front of it, each thread's cache keeps a few blocks it freed on a stream for its next
// allocations on that stream (pool/thread_cache.h; pool_options::thread_caches).
// Two threads may both grow at once; the second segment stays cached. Pool fences run one at
// a time, and threads that ask for one while another runs share the next.
// Reuse safety (docs/design.md, "Reuse safety"): a block is never handed out while device work
// issued before its free may still touch it; reuse_safety = false turns this off (hazard tests
// only).
#pragma once

#include "common/spin_mutex.h"
#include "pool/fences.h"
#include "pool/stats.h"
#include "pool/upstream.h"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

namespace gmem {

inline constexpr std::size_t k_block_granule = 512; // size rounding and block alignment

struct pool_options {
  std::size_t limit_bytes = 0;             // reserved bytes never exceed this; 0 = no limit
  std::size_t max_cached_bytes = SIZE_MAX; // free bytes kept beyond this are trimmed
  std::size_t small_segment_bytes = std::size_t{2} << 20;       // segment size for small requests
  std::size_t large_segment_bytes = std::size_t{40} << 20;      // segment size for large requests
  std::size_t large_segment_max_bytes = std::size_t{256} << 20; // grows to it: reserved / 8
  std::size_t small_max_bytes = std::size_t{1} << 20;           // requests up to this are small
  std::size_t oversize_bytes = std::size_t{20} << 20;           // requests above: own segment
  std::size_t segment_granule_bytes = std::size_t{2} << 20;     // oversize segments rounded to it
  std::size_t large_split_min_bytes = std::size_t{1} << 20;     // smaller remainders stay attached
  // (large segments only: a block of a large segment keeps a tail shorter than this)
  std::size_t warmup_bytes = 0; // mapped at construction (small + large segments)
  bool reuse_safety = true;     // false: frees are reusable at once (hazard tests only)
  // Growth: before mapping, unmap wholly free segments while reserved + new segment would
  // exceed (1 + grow_slack) x demand (Policy, 3c). Negative: never release before growing.
  double grow_slack = 0.05;
  // Growth hysteresis: demand above is at least the peak live bytes of the last one or two
  // windows of this many allocations, so segments idle at the low point of a repeating
  // phase (a training step) are kept for its next high point. 0: current demand only.
  std::size_t grow_window_allocs = 16384;
  // An oversize segment is never split; a free one serves a later oversize request only if
  // it is at most this fraction (plus one granule) larger than the request.
  double oversize_max_waste = 0.25;
  // Oversize grows with the pool: requests above max(oversize_bytes, reserved x this) get a
  // segment of their own. 0: oversize_bytes alone.
  double oversize_fraction = 1.0 / 512;
  // Pool-issued fences are device-side barriers (fences::barrier) when possible: a pending
  // block is handed out at once, and the new owner's work is ordered after the old owner's
  // by the GPU, not by a host-blocking synchronize. Only for memory that nothing but device
  // work touches (device memory; not pinned host memory, which the CPU reads directly).
  bool barriers = false;
  // With barriers, while threads contend for fences (a fence was asked for while another
  // thread's ran, within the last 256 fence calls): each slow allocation that finds blocks
  // waiting for a fence records a mark (fences::mark), and the next one first asks whether it
  // completed: if so, the blocks freed before it are safe for all with no barrier. Under many
  // launching threads a barrier costs ~90 us and the threads that need one queue behind it
  // (docs/pool.md, "Marks before barriers").
  bool marks = false;
  // Requests above small_max_bytes are served from one arena (upstream::extend) that grows
  // where it ends, so free space merges across growths and segments are never reshaped;
  // free arena pages go back to the upstream only on trim, the limit, max_cached_bytes and
  // out-of-memory recovery. Ignored when the upstream has no arena_page().
  bool arena = false;
  // Arena: a fence comes before taking any free block once the arena's pending bytes could
  // cover this many requests of the size asked (pool_impl::fence_first_locked). Each fence then
  // frees a batch that merges into longer free ranges; 1 fences as soon as they could cover
  // one. Replayed on the recorded PyTorch traces, 4 makes 27-50% fewer fences than 1, with
  // peaks between -1.3% and +0.6% of 1's (docs/pool.md). 0 counts as 1.
  std::size_t fence_batch = 4;
  // Per-thread caches of stream-ordered blocks in front of the pool (pool/thread_cache.h): a
  // thread's free on a stream and its next allocation of a similar size on that stream take
  // no shared lock.
  bool thread_caches = true;
  // Arena only: a large request that no free block fits, while the arena's wholly free pages
  // add up to it, is served from those pages mapped into a fresh range of address space
  // (upstream::stitch) before the arena grows; freeing it gives the pages back to the arena,
  // with the free's safety, and keeps the range mapped (pool_stitch.cpp). Ignored when the
  // upstream cannot stitch.
  bool stitch = false;
  // Stitching: a freed range stays mapped ("kept") and serves a later request of as many
  // pages while the pages that request needs are free in the arena, with no driver call.
  // Kept ranges are given back least recently used first beyond this many or this much
  // address space, and when the arena unmaps one of their pages (trim, limit, out of memory).
  // 0 ranges: none kept (a freed range is given back at once).
  std::size_t stitch_keep_ranges = 256;
  std::size_t stitch_keep_bytes = std::size_t{1} << 40;
  // Stitching: the host time spent in the upstream's stitch and unstitch calls stays under this
  // share of the time since the pool was made, counted as at least stitch_time_floor_ns (so
  // that a young pool may stitch: 1% of 10 s is 100 ms, ~2,500 page maps of ~40 us); past it,
  // a request that no free block or kept range serves grows the arena instead of making a new
  // range. 1 or more: no budget.
  double stitch_time_share = 0.01;
  std::uint64_t stitch_time_floor_ns = 10'000'000'000;
};

enum class pool_status {
  ok,
  out_of_memory,
  not_owned, // address in no segment: the caller forwards it to the driver
  invalid,   // inside a segment but not the start of a live block: double or bad free
};

struct alloc_result {
  std::uintptr_t address = 0;
  pool_status status = pool_status::ok;
  std::size_t size = 0; // rounded size of the block
};

// A live block, as find() reports it.
struct block_info {
  std::uintptr_t address = 0;
  std::size_t size = 0;      // rounded
  std::size_t requested = 0; // as asked
  std::uintptr_t segment_base = 0;
  std::size_t segment_size = 0;
  stream_handle stream = k_no_stream; // stream it was allocated on
};

enum class block_state : std::uint8_t { live, free, pending, stream_free };
enum class segment_kind : std::uint8_t { small, large, oversize };

struct block_view {
  std::uintptr_t address = 0;
  std::size_t size = 0;
  std::size_t requested = 0; // live blocks only
  block_state state = block_state::free;
  stream_handle stream = k_no_stream; // live: allocating stream; stream_free: freeing stream
  bool lent = false;                  // live: arena pages a stitched range maps (requested is 0)
};

// One segment and its blocks in address order, for fragmentation reports.
struct segment_view {
  std::uintptr_t base = 0;
  std::size_t size = 0;
  segment_kind kind = segment_kind::small;
  bool stitched = false; // a stitched range (pool_options::stitch): one live block on arena pages
  bool kept = false;     // stitched, kept mapped for reuse: no block (its pages are the arena's)
  std::vector<block_view> blocks;
};

// Optional; called without the pool lock.
class pool_observer {
public:
  virtual ~pool_observer() = default;
  virtual void on_segment_map(std::uintptr_t /*base*/, std::size_t /*bytes*/) noexcept {}
  virtual void on_segment_unmap(std::uintptr_t /*base*/, std::size_t /*bytes*/) noexcept {}
  virtual void on_fence(std::uint64_t /*duration_ns*/, std::size_t /*released_bytes*/) noexcept {}
  virtual void on_trim(std::size_t /*released_bytes*/) noexcept {}
  virtual void on_oom(std::size_t /*requested_bytes*/) noexcept {}
  // A stitched range (pool_options::stitch) of `bytes` (its block) now serves a request (made
  // or kept one reused) / serves nothing any more: its pages are the arena's again (the range
  // may stay mapped, kept for reuse). It maps no new memory.
  virtual void on_stitch(std::uintptr_t /*base*/, std::size_t /*bytes*/) noexcept {}
  virtual void on_unstitch(std::uintptr_t /*base*/, std::size_t /*bytes*/) noexcept {}
};

class pool_impl;

class pool {
public:
  // Maps options.warmup_bytes at once. upstream, fences and observer must outlive the pool.
  pool(upstream& up, fences& fe, const pool_options& options, pool_observer* observer = nullptr);
  ~pool(); // unmaps every segment unless abandon() was called
  pool(const pool&) = delete;
  pool& operator=(const pool&) = delete;

  // A block of at least `bytes` (rounded up to 512) usable by work on `s`; k_no_stream: usable
  // by any stream. bytes == 0 is the caller's business (the pool serves 512).
  alloc_result allocate(std::size_t bytes, stream_handle s = k_no_stream);
  // k_no_stream: the block becomes pending until a fence; a stream: stream-free on `s`.
  // Trace the free before calling this: the block may be reused before it returns.
  pool_status deallocate(std::uintptr_t address, stream_handle s = k_no_stream);

  std::optional<block_info> find(std::uintptr_t any_address_inside) const; // live blocks only
  bool owns(std::uintptr_t any_address) const; // inside one of our segments

  // The program synchronizes all streams itself (cuCtxSynchronize): call begin before it and
  // end with the ticket after it returned successfully (a failed one: just don't call end).
  std::uint64_t begin_external_fence();
  void end_external_fence(std::uint64_t ticket);
  // cuStreamSynchronize(s) returned: blocks freed on s are safe for all streams. Exact form:
  // ticket = begin_stream_sync() before the synchronize, end_stream_sync(s, ticket) after it
  // returned successfully; only blocks freed before begin become safe (a free on s racing with
  // the synchronize on another thread stays stream-free). stream_synchronized(s) is the short
  // form for when no other thread frees on s meanwhile.
  void stream_synchronized(stream_handle s);
  std::uint64_t begin_stream_sync();
  void end_stream_sync(stream_handle s, std::uint64_t ticket);

  // The program is destroying stream s (call before the driver's destroy): no driver call of
  // the pool touches s once this returns (the pool records events on other threads' streams
  // when it seals them). The blocks freed on s, in the pool and in the threads' caches, become
  // pending: they wait for a fence, so a new stream that gets s's handle never receives them
  // while s's work may still run. A later free on a stream with that handle makes it a stream
  // like any other again.
  void stream_destroying(stream_handle s);

  std::size_t trim(std::size_t keep_free_bytes = 0); // unmaps free segments; bytes released
  void set_limit(std::size_t bytes);                 // 0 = none
  void abandon(); // forget all segments without unmapping (context gone, exit)

  pool_stats stats() const;
  spin_mutex::contention lock_contention() const; // the pool lock's, for GMEM_VERBOSE
  // Where allocations that missed every free block spent their host time (GMEM_VERBOSE).
  struct slow_path_counters {
    std::uint64_t walks = 0, walk_ns = 0; // allocate's slow path: calls, host time in all
    // fence_now(): calls; of them, those that waited for another thread's fence and made none
    // (shared); host time waiting for the fence lock (wait_ns) and making fences (fence_ns)
    std::uint64_t fence_calls = 0, fences_shared = 0, fence_wait_ns = 0, fence_ns = 0;
    // marks recorded (pool_options::marks); of them, those found complete and used as fences;
    // marks asked for and refused (a capture may be open, no driver support)
    std::uint64_t marks = 0, marks_used = 0, marks_refused = 0;
    // stream_destroying() calls that waited for a record in progress on their stream
    std::uint64_t destroy_waits = 0;
  };
  slow_path_counters slow_path() const;
  void reset_peaks();
  // Calls f once per segment, in address order, with a snapshot taken under the lock; f runs
  // without the lock and may call the pool.
  void for_each_segment(const std::function<void(const segment_view&)>& f) const;
  // Walks every structure: indexes agree, blocks tile each segment, no two free blocks of the
  // same safety touch, stats match. Debug builds (GMEM_DEBUG) call it after each mutation.
  bool is_valid() const;

  // The options in force (sizes normalized to 512-byte multiples). limit_bytes changes with
  // set_limit(); read it from stats().limit_bytes when other threads may call set_limit().
  const pool_options& options() const;

private:
  std::unique_ptr<pool_impl> impl_;
};

} // namespace gmem
