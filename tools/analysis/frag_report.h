// Fragmentation analysis: per device and per segment, which parts are used and free, the
// largest free block, the fragmentation ratio, the largest request that would succeed
// without growing the pool, and advice naming the option to change.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "profiler/format/trace_model.h"

namespace gmem::tools {

// A used or free stretch of one segment. Invariant: the ranges of a segment are sorted,
// touch each other and cover the segment exactly.
struct segment_range {
  std::uint64_t offset = 0;
  std::uint64_t bytes = 0;
  bool used = false;
  std::uint64_t requested = 0; // used ranges: bytes the program asked for (<= bytes)
  std::uint64_t blocks = 0;    // used ranges: live blocks merged into this range
};

struct segment_frag {
  std::uint64_t base = 0;
  std::uint64_t bytes = 0;
  // A stitched range (GMEM_STITCH): address space over arena pages lent to it, which the
  // arena's own segments show as free gaps. Its bytes are not reserved memory.
  bool stitched = false;
  std::uint64_t used_bytes = 0;
  std::uint64_t free_bytes = 0;
  std::uint64_t largest_free = 0;
  std::uint64_t live_blocks = 0;
  std::vector<segment_range> ranges;
  double fragmentation() const; // 1 - largest_free/free_bytes; 0 when nothing is free
  // Walks the invariant of segment_range and the totals (used, free, largest, live blocks).
  bool is_valid() const;
};

struct device_frag {
  int device = 0;
  std::vector<segment_frag> segments; // by address
  std::uint64_t reserved_bytes = 0;   // sum of segment sizes, stitched ranges excepted
  std::uint64_t used_bytes = 0;       // live blocks, as rounded by the pool
  std::uint64_t requested_bytes = 0;  // live blocks, as asked for
  // Gaps between live blocks, pending blocks included, less the arena memory lent to stitched
  // ranges. Invariant with pool counters: free_bytes == pool_free_bytes + pending_bytes (the
  // end-to-end test checks it on a real run).
  std::uint64_t free_bytes = 0;
  // Stitched ranges live in the map, and the bytes they serve (arena memory lent to them); the
  // pool's count of ranges made since start (0 without counters).
  std::uint64_t stitched_ranges = 0;
  std::uint64_t stitched_bytes = 0;
  std::uint64_t stitches = 0;
  // Ranges kept mapped after their free for reuse (serving nothing, their pages the arena's),
  // their address space, and the requests they served again (pool counters; 0 without).
  std::uint64_t kept_ranges = 0;
  std::uint64_t kept_range_bytes = 0;
  std::uint64_t kept_reuses = 0;
  std::uint64_t largest_free = 0;
  std::uint64_t empty_segments = 0; // segments without a live block
  std::uint64_t empty_bytes = 0;
  // Largest request served now without growing the pool: from the pool's own largest free
  // block (pending blocks excluded) when the trace has counters, else from the map.
  std::uint64_t largest_request = 0;
  // The same once pending blocks are fenced (map-derived: gaps include pending blocks).
  std::uint64_t largest_request_after_fence = 0;
  // From the pool's own counters (0 when the trace has none for this device).
  std::uint64_t pending_bytes = 0;
  std::uint64_t limit_bytes = 0;
  std::uint64_t ooms = 0;
  std::uint64_t pool_free_bytes = 0;
  std::uint64_t pool_largest_free = 0;
  // Graph memory (not pooled, outside the segments): memory-node and captured allocations.
  std::uint64_t graph_bytes = 0;
  std::uint64_t graph_allocations = 0;
  bool has_pool_counters = false;
  std::vector<std::string> advice;
  // The pool's 1 - largest_free_block/free_bytes when it has counters, else the map's.
  double fragmentation() const;
};

struct frag_report {
  std::vector<device_frag> devices; // by device ordinal, host (-1) first
};

frag_report build_frag_report(const gmem::trace::trace& trace);

// Allocation granularity of the pool: a request is rounded up to a multiple of this.
inline constexpr std::uint64_t k_pool_rounding = 512;

// What stitching serves on a device ("8.00 MiB served from free arena pages in 1 stitched range
// live (...); 3 made since start; ..."), for the text and HTML reports; "" when the device has
// no stitched range, made or kept.
std::string stitching_summary(const device_frag& d);

// "################....====......" : `width` characters, one per 1/width of the segment:
// '#' fully used, '=' at least half used, '-' less than half used, '.' free.
std::string segment_map_line(const segment_frag& s, std::size_t width);

} // namespace gmem::tools
