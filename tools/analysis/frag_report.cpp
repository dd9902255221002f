#include "tools/analysis/frag_report.h"
#include "tools/analysis/timeline.h"

#include <algorithm>
#include <map>

#include "common/units.h"
#include "tools/option_names.h"

namespace gmem::tools {
namespace {

double ratio(std::uint64_t largest, std::uint64_t free_bytes) {
  return free_bytes == 0 ? 0.0
                         : 1.0 - static_cast<double>(largest) / static_cast<double>(free_bytes);
}

segment_frag map_segment(const gmem::trace::live_segment& seg,
                         std::vector<const gmem::trace::live_allocation*>& inside) {
  segment_frag s;
  s.base = seg.base;
  s.bytes = seg.bytes;
  std::sort(inside.begin(), inside.end(),
            [](const auto* a, const auto* b) { return a->address < b->address; });
  std::uint64_t at = 0; // offset covered so far
  auto add_free = [&](std::uint64_t upto) {
    if (upto <= at) return;
    s.ranges.push_back({at, upto - at, false, 0, 0});
    s.free_bytes += upto - at;
    s.largest_free = std::max(s.largest_free, upto - at);
    at = upto;
  };
  for (const auto* a : inside) {
    const std::uint64_t off = a->address - seg.base;
    const std::uint64_t size = std::min(std::max(a->rounded, a->requested), seg.bytes - off);
    if (off < at) continue; // overlapping record (corrupt or racing): ignore, keep covering
    add_free(off);
    if (!s.ranges.empty() && s.ranges.back().used) {
      s.ranges.back().bytes += size; // adjacent live blocks merge into one used range
      s.ranges.back().requested += a->requested;
      ++s.ranges.back().blocks;
    } else {
      s.ranges.push_back({off, size, true, a->requested, 1});
    }
    s.used_bytes += size;
    ++s.live_blocks;
    at = off + size;
  }
  add_free(seg.bytes);
  return s;
}

// A size a user can paste into an option: whole MiB, at least 1M.
std::string size_spec(std::uint64_t bytes) {
  return std::to_string(std::max<std::uint64_t>(1, bytes / k_mib)) + "M";
}

// The policy the traced process ran under (pool/pool.h): the arena unless GMEM_ARENA was set
// to a false value (as options::parse reads flags).
bool arena_policy(const gmem::trace::trace& t) {
  for (const auto& [name, value] : t.info.options)
    if (name == k_opt_arena)
      return !(value == "0" || value == "no" || value == "off" || value == "false");
  return true;
}

// GMEM_STITCH set to a true value (off by default).
bool stitch_policy(const gmem::trace::trace& t) {
  for (const auto& [name, value] : t.info.options)
    if (name == k_opt_stitch)
      return value == "1" || value == "yes" || value == "on" || value == "true";
  return false;
}

void advise(device_frag& d, bool arena, bool stitch) {
  const std::string dev = d.device < 0 ? "host" : "device " + std::to_string(d.device);
  if (d.segments.empty()) {
    d.advice.push_back("No pooled segments on " + dev + ": nothing to tune.");
    return;
  }
  const double frag = d.fragmentation();
  if (d.empty_segments > 0 && d.empty_bytes >= d.reserved_bytes / 4) {
    d.advice.push_back(std::to_string(d.empty_segments) + " segment(s) (" +
                       format_bytes(d.empty_bytes) +
                       ") hold no live block: they are cached for reuse. To hand them back "
                       "to the driver, set " +
                       std::string(k_opt_max_cached) + " to cap the cached free memory (e.g. " +
                       k_opt_max_cached + "=" + size_spec(d.empty_bytes / 2) +
                       "), or call gmem_empty_cache() after the phase that needed them.");
  }
  if (d.pending_bytes > 0 && d.pending_bytes >= d.free_bytes / 4) {
    d.advice.push_back(format_bytes(d.pending_bytes) +
                       " are pending: freed with cudaFree/cuMemFree (no stream) and waiting for "
                       "a device synchronization before reuse. The pool synchronizes when it "
                       "needs them; freeing with cudaFreeAsync on the stream that used the "
                       "memory makes them reusable at once.");
  }
  if (frag >= 0.5 && d.free_bytes >= 64 * k_mib) {
    const std::string what =
        "Free memory is fragmented (" + std::to_string(static_cast<int>(frag * 100)) +
        "%): " + format_bytes(d.free_bytes) + " free but the largest block is " +
        format_bytes(d.largest_free) + ", so a larger request grows the pool" +
        (d.limit_bytes != 0 ? " or fails at the limit" : "") + ". ";
    if (arena && stitch) // stitching already serves large requests from scattered pages
      d.advice.push_back(
          "Free memory is split (" + std::to_string(static_cast<int>(frag * 100)) +
          "%): " + format_bytes(d.free_bytes) + " free, the largest block " +
          format_bytes(d.largest_free) + ". Stitching (" + k_opt_stitch +
          "=1) serves a larger request from the whole free pages instead of growing, as long "
          "as they add up to it; what it cannot use is free space inside pages that live "
          "blocks touch, which a smaller " +
          k_opt_arena_page_mb + " narrows. Whole free pages go back to the driver with " +
          k_opt_max_cached + " (e.g. " + k_opt_max_cached + "=" + size_spec(d.free_bytes / 2) +
          ") or gmem_empty_cache().");
    else if (arena) // device pools with GMEM_ARENA=1 (the default): the fallback options do nothing
      d.advice.push_back(
          what +
          "The arena already merges free space across growths: what splits it is live "
          "blocks between free ranges (long-lived buffers allocated after short-lived ones). " +
          k_opt_stitch +
          "=1 serves large requests from the scattered free pages instead of "
          "growing (" +
          k_opt_stitch + "=1 " + k_opt_arena_page_mb +
          "=2 stitches the finest). "
          "Whole free arena pages go back to the driver with " +
          std::string(k_opt_max_cached) + " (e.g. " + k_opt_max_cached + "=" +
          size_spec(d.free_bytes / 2) + ") or gmem_empty_cache(); a smaller " +
          k_opt_arena_page_mb +
          " lets narrower gaps go back. Allocating long-lived buffers "
          "first keeps them together.");
    else
      d.advice.push_back(what + "Large requests of mixed lifetimes share segments; raising " +
                         k_opt_large_segment +
                         " packs them into fewer, larger segments, and lowering " + k_opt_oversize +
                         " gives the biggest requests segments of their own, which return "
                         "whole (" +
                         k_opt_arena + "=0: the fallback policy).");
  }
  if (d.ooms > 0) {
    d.advice.push_back(std::to_string(d.ooms) + " out-of-memory error(s) on " + dev +
                       (d.limit_bytes != 0 ? " with " + std::string(k_opt_limit) + "=" +
                                                 format_bytes(d.limit_bytes) +
                                                 ": raise the limit, or reduce the "
                                                 "cached free memory"
                                           : ": the device itself was full") +
                       ".");
  }
  if (d.advice.empty())
    d.advice.push_back("No action needed on " + dev + ": fragmentation " +
                       std::to_string(static_cast<int>(frag * 100)) + "%, largest free block " +
                       format_bytes(d.largest_free) + ".");
}

} // namespace

bool segment_frag::is_valid() const {
  std::uint64_t at = 0, used = 0, free_total = 0, largest = 0, blocks = 0;
  for (std::size_t i = 0; i < ranges.size(); ++i) {
    const auto& r = ranges[i];
    if (r.offset != at || r.bytes == 0) return false;
    if (i > 0 && !r.used && !ranges[i - 1].used) return false; // free gaps are maximal
    at += r.bytes;
    if (r.used) {
      used += r.bytes;
      blocks += r.blocks;
      if (r.requested > r.bytes || r.blocks == 0) return false;
    } else {
      free_total += r.bytes;
      largest = std::max(largest, r.bytes);
    }
  }
  return at == bytes && used == used_bytes && free_total == free_bytes && largest == largest_free &&
         blocks == live_blocks;
}

double segment_frag::fragmentation() const {
  return ratio(largest_free, free_bytes);
}
double device_frag::fragmentation() const {
  return has_pool_counters ? ratio(pool_largest_free, pool_free_bytes)
                           : ratio(largest_free, free_bytes);
}

frag_report build_frag_report(const gmem::trace::trace& trace) {
  std::map<int, device_frag> by_device;
  std::vector<const gmem::trace::live_segment*> segs;
  for (const auto& s : trace.segments)
    segs.push_back(&s);
  std::sort(segs.begin(), segs.end(), [](const auto* a, const auto* b) {
    return a->device != b->device ? a->device < b->device : a->base < b->base;
  });
  std::vector<const gmem::trace::live_allocation*> allocs;
  for (const auto& a : trace.live)
    allocs.push_back(&a);
  std::sort(allocs.begin(), allocs.end(),
            [](const auto* a, const auto* b) { return a->address < b->address; });
  for (const auto* seg : segs) {
    std::vector<const gmem::trace::live_allocation*> inside;
    auto it = std::lower_bound(allocs.begin(), allocs.end(), seg->base,
                               [](const auto* a, std::uint64_t v) { return a->address < v; });
    for (; it != allocs.end() && (*it)->address - seg->base < seg->bytes; ++it)
      if ((*it)->device == seg->device) inside.push_back(*it);
    device_frag& d = by_device[seg->device];
    d.device = seg->device;
    segment_frag s = map_segment(*seg, inside);
    s.stitched = seg->stitched;
    if (s.stitched) { // its live block counts as used; its bytes are arena gaps, not free
      ++d.stitched_ranges;
      d.stitched_bytes += s.bytes;
      d.used_bytes += s.used_bytes;
      for (const auto* a : inside)
        d.requested_bytes += a->requested;
      d.segments.push_back(std::move(s));
      continue;
    }
    d.reserved_bytes += s.bytes;
    d.used_bytes += s.used_bytes;
    for (const auto* a : inside)
      d.requested_bytes += a->requested;
    d.free_bytes += s.free_bytes;
    d.largest_free = std::max(d.largest_free, s.largest_free);
    if (s.live_blocks == 0) {
      ++d.empty_segments;
      d.empty_bytes += s.bytes;
    }
    d.segments.push_back(std::move(s));
  }
  for (const auto& a : trace.live) {
    if (!is_graph_kind(a.kind)) continue;
    device_frag& d = by_device[a.device];
    d.device = a.device;
    d.graph_bytes += std::max(a.rounded, a.requested);
    ++d.graph_allocations;
  }
  for (const auto& c : trace.devices) {
    device_frag& d = by_device[c.device];
    d.device = c.device;
    d.has_pool_counters = true;
    d.pending_bytes = c.stats.pending_bytes;
    d.limit_bytes = c.stats.limit_bytes;
    d.ooms = c.stats.ooms;
    d.pool_free_bytes = c.stats.free_bytes;
    d.pool_largest_free = c.stats.largest_free_block;
    d.stitches = c.stats.stitches;
    d.kept_ranges = c.stats.kept_ranges;
    d.kept_range_bytes = c.stats.kept_range_bytes;
    d.kept_reuses = c.stats.kept_reuses;
  }
  frag_report r;
  for (auto& [dev, d] : by_device) {
    // The arena's gaps include the pages lent to stitched ranges (the map cannot tell which).
    d.free_bytes -= std::min(d.free_bytes, d.stitched_bytes);
    d.largest_request_after_fence = d.largest_free / k_pool_rounding * k_pool_rounding;
    d.largest_request = (d.has_pool_counters ? d.pool_largest_free : d.largest_free) /
                        k_pool_rounding * k_pool_rounding;
    advise(d, arena_policy(trace) && dev >= 0, stitch_policy(trace)); // host: never the arena
    r.devices.push_back(std::move(d));
  }
  return r;
}

std::string stitching_summary(const device_frag& d) {
  if (d.stitched_ranges == 0 && d.stitches == 0 && d.kept_ranges == 0) return {};
  std::string s = format_bytes(d.stitched_bytes) + " served from free arena pages in " +
                  std::to_string(d.stitched_ranges) + " stitched range" +
                  (d.stitched_ranges == 1 ? "" : "s") +
                  " live (mapped over the arena's gaps, no new memory)";
  if (d.stitches != 0) s += "; " + std::to_string(d.stitches) + " made since start";
  if (d.kept_ranges != 0 || d.kept_reuses != 0)
    s += "; " + std::to_string(d.kept_ranges) + " kept mapped for reuse (" +
         format_bytes(d.kept_range_bytes) + " of address space, no memory), " +
         std::to_string(d.kept_reuses) + " served again";
  return s;
}

std::string segment_map_line(const segment_frag& s, std::size_t width) {
  std::string line(width, '.');
  if (s.bytes == 0 || width == 0) return line;
  std::vector<double> used(width, 0.0);
  const double cell = static_cast<double>(s.bytes) / static_cast<double>(width);
  for (const auto& r : s.ranges) {
    if (!r.used) continue;
    const double b = static_cast<double>(r.offset), e = static_cast<double>(r.offset + r.bytes);
    for (auto i = static_cast<std::size_t>(b / cell); i < width; ++i) {
      const double lo = static_cast<double>(i) * cell, hi = lo + cell;
      if (lo >= e) break;
      used[i] += (std::min(hi, e) - std::max(lo, b)) / cell;
    }
  }
  for (std::size_t i = 0; i < width; ++i)
    line[i] = used[i] >= 0.999 ? '#' : used[i] >= 0.5 ? '=' : used[i] > 0.0 ? '-' : '.';
  return line;
}

} // namespace gmem::tools
