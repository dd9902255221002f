#include "interpose/retired_pools.h"

#include <algorithm>
#include <string>

#include "interpose/trace_hooks.h"

namespace gmem::shim {

namespace {

// The trace: live blocks freed and segments unmapped with the context, before the driver can
// hand their addresses to anyone else (hence before the real cuCtxDestroy).
void trace_release(const pool& p, int device, trace::alloc_kind kind, std::size_t* live_blocks,
                   std::size_t* live_bytes) {
  p.for_each_segment([&](const segment_view& s) {
    for (const block_view& b : s.blocks) {
      if (b.state != block_state::live || b.lent) continue; // lent: a stitched range's memory
      trace::free(b.address, device, 0, kind);
      ++*live_blocks;
      *live_bytes += b.size;
    }
    trace::segment(false, s.base, s.size, device, s.stitched);
  });
}

// A dropped pool's contribution to its device's figures: what it did, nothing of what is now.
pool_stats history_of(const pool& p) {
  pool_stats s = p.stats();
  s.segment_unmaps = s.segment_maps; // every segment left went with the context
  s.live_bytes = s.live_requested_bytes = s.live_blocks = 0;
  s.reserved_bytes = s.segments = 0;
  s.pending_bytes = s.pending_blocks = s.stream_free_bytes = 0;
  s.stitched_ranges = s.stitched_bytes = 0;
  s.free_bytes = s.largest_free_block = 0;
  s.limit_bytes = 0;
  return s;
}

void add(pool_stats& sum, const pool_stats& s) {
  const std::uint64_t peak_live = std::max(sum.peak_live_bytes, s.peak_live_bytes);
  const std::uint64_t peak_reserved = std::max(sum.peak_reserved_bytes, s.peak_reserved_bytes);
  const std::uint64_t largest = std::max(sum.largest_free_block, s.largest_free_block);
  const std::uint64_t limit = std::max(sum.limit_bytes, s.limit_bytes);
#define GMEM_X_SUM(n, d) sum.n += s.n;
  GMEM_POOL_STATS(GMEM_X_SUM)
#undef GMEM_X_SUM
  sum.peak_live_bytes = std::max(peak_live, sum.live_bytes);
  sum.peak_reserved_bytes = std::max(peak_reserved, sum.reserved_bytes);
  sum.largest_free_block = largest;
  sum.limit_bytes = limit;
}

void print_stats(std::FILE* out, int device, const char* kind, const char* why,
                 const pool_stats& s) {
  std::fprintf(out, "gmem: pool device=%d kind=%s context=%s", device, kind, why);
#define GMEM_PRINT_STAT(n, d)                                                                      \
  std::fprintf(out, " %s=%llu", #n, static_cast<unsigned long long>(s.n));
  GMEM_POOL_STATS(GMEM_PRINT_STAT)
#undef GMEM_PRINT_STAT
  std::fprintf(out, "\n");
}

} // namespace

void retire_entry(context_entry& e, const char* why) noexcept {
  e.drop_reason = why;
  e.device_at_drop = e.device_pool->stats();
  const std::size_t h = e.host_count.load(std::memory_order_acquire);
  for (std::size_t j = 0; j < h; ++j)
    e.host_at_drop[j] = e.host[j].host_pool->stats();
  std::size_t blocks = 0, bytes = 0;
  try {
    trace_release(*e.device_pool, e.device(), trace::alloc_kind::device, &blocks, &bytes);
    for (std::size_t j = 0; j < h; ++j)
      trace_release(*e.host[j].host_pool, -1, trace::alloc_kind::host_pinned, &blocks, &bytes);
    const std::string label = std::string(e.primary ? "primary" : "private") + " context " + why +
                              " (device " + std::to_string(e.device()) +
                              "): " + std::to_string(e.device_at_drop.total_allocs) +
                              " allocations; " + std::to_string(blocks) + " live blocks (" +
                              std::to_string(bytes) + " bytes) released with it";
    trace::marker(label.c_str());
  } catch (...) { // out of memory building the views or the label: the figures are kept
  }
}

void record_retirement() noexcept {
  trace::sample_now();
}

void add_figures(const context_entry& e, trace::device_stats* out, std::size_t max,
                 std::size_t* filled) noexcept {
  auto slot = [&](int device) -> pool_stats* {
    for (std::size_t i = 0; i < *filled; ++i)
      if (out[i].device == device) return &out[i].stats;
    if (*filled == max) return nullptr;
    out[*filled] = {device, pool_stats{}};
    return &out[(*filled)++].stats;
  };
  const bool dropped = e.dropped();
  if (pool_stats* s = slot(e.device()))
    add(*s, dropped ? history_of(*e.device_pool) : e.device_pool->stats());
  const std::size_t h = e.host_count.load(std::memory_order_acquire);
  for (std::size_t j = 0; j < h; ++j) {
    const pool& p = *e.host[j].host_pool;
    if (pool_stats* s = slot(-1)) add(*s, dropped ? history_of(p) : p.stats());
  }
}

void print_retired(const context_entry& e, std::FILE* out) {
  if (!e.dropped()) return;
  const char* why = e.drop_reason != nullptr ? e.drop_reason : "dropped";
  print_stats(out, e.device(), "device", why, e.device_at_drop);
  const std::size_t h = e.host_count.load(std::memory_order_acquire);
  for (std::size_t j = 0; j < h; ++j)
    print_stats(out, e.device(), "host", why, e.host_at_drop[j]);
}

} // namespace gmem::shim
