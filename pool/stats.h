// The pool's counters: ONE list, used by the pool, the trace header, the tools and the client
// API, so that a counter added here shows up everywhere. All counters are std::uint64_t.
#pragma once

#include <cstdint>

// X(name, "description")
#define GMEM_POOL_STATS(X)                                                                         \
  X(live_bytes, "bytes in live blocks (rounded sizes)")                                            \
  X(live_requested_bytes, "bytes the program asked for in live blocks")                            \
  X(live_blocks, "live blocks")                                                                    \
  X(reserved_bytes, "bytes in segments obtained from the driver")                                  \
  X(peak_live_bytes, "highest live_bytes since start or reset_peaks()")                            \
  X(peak_reserved_bytes, "highest reserved_bytes since start or reset_peaks()")                    \
  X(total_allocs, "successful allocations")                                                        \
  X(total_frees, "successful frees")                                                               \
  X(total_alloc_bytes, "bytes handed out by successful allocations (rounded sizes)")               \
  X(cache_hits, "allocations served without mapping a new segment")                                \
  X(upstream_allocs, "allocations that had to map a new segment")                                  \
  X(segments, "segments currently mapped")                                                         \
  X(segment_maps, "segments mapped since start")                                                   \
  X(segment_unmaps, "segments unmapped since start")                                               \
  X(pending_bytes, "bytes freed without a stream, waiting for a fence (pending)")                  \
  X(pending_blocks, "pending blocks")                                                              \
  X(fences, "fences completed (issued by the pool or reported by the program)")                    \
  X(ooms, "allocations that failed with out of memory")                                            \
  X(free_bytes, "bytes in free blocks that are safe for every stream")                             \
  X(largest_free_block, "size of the largest free block that is safe for every stream")            \
  X(trims, "segments released by trim(), the cache cap or the OOM ladder")                         \
  X(trimmed_bytes, "bytes released by trims")                                                      \
  X(limit_bytes, "memory limit in bytes (0 = none)")                                               \
  X(stream_free_bytes, "bytes freed on a stream, reusable on that stream only (for now)")          \
  X(invalid_frees, "frees of addresses inside a segment that are no live block")                   \
  X(barriers, "pool fences made as device-side barriers (the host did not wait)")                  \
  X(stitches, "stitched ranges made since start: requests served from free arena pages")           \
  X(stitched_ranges, "stitched ranges live now")                                                   \
  X(stitched_bytes, "bytes of the live blocks that stitched ranges serve")                         \
  X(kept_ranges, "stitched ranges kept mapped after their free, for reuse (serving nothing now)")  \
  X(kept_range_bytes, "address space of the kept stitched ranges (their pages are the arena's)")   \
  X(kept_reuses, "requests served by a kept stitched range: no page mapped")                       \
  X(stitch_ns, "host nanoseconds in stitching's page maps and unmaps (upstream stitch, unstitch)") \
  X(stitch_budget_grows, "requests that grew the arena because stitching's time budget was spent")

namespace gmem {

struct pool_stats {
#define GMEM_X_FIELD(n, d) std::uint64_t n = 0;
  GMEM_POOL_STATS(GMEM_X_FIELD)
#undef GMEM_X_FIELD

  // 1 - largest_free_block / free_bytes; 0 when nothing is free. 0 = all free memory is one
  // block, close to 1 = free memory is scattered in many small pieces.
  double fragmentation() const {
    if (free_bytes == 0) return 0.0;
    return 1.0 - static_cast<double>(largest_free_block) / static_cast<double>(free_bytes);
  }
};

} // namespace gmem
