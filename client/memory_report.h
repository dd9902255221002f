// The text of gmem_memory_report(), shared by libgmem_client.so (driver figures only) and
// libgmem.so (pool figures): header-only so each library compiles its own copy and neither
// links the other.
//
// Every recommendation states the threshold that triggered it, so a reader can tell how far
// over the line a figure is and tune accordingly.
#pragma once

#include "common/units.h"
#include "gmem/gmem.h"

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace gmem::client {

// Thresholds the recommendations use; documented in docs/api.md.
inline constexpr double k_frag_threshold = 0.30;           // of cached free bytes
inline constexpr std::uint64_t k_frag_min_free = 64 << 20; // ignore small caches
inline constexpr double k_hit_rate_threshold = 0.50;
inline constexpr std::uint64_t k_hit_rate_min_allocs = 1000;
inline constexpr double k_idle_cache_threshold = 0.25; // cached-free share of reserved
inline constexpr std::uint64_t k_idle_cache_min = 256 << 20;
inline constexpr double k_pressure_threshold = 0.90; // peak reserved vs limit or device
inline constexpr double k_pending_threshold = 0.10;  // pending share of reserved
inline constexpr std::uint64_t k_pending_min = 64 << 20;

struct report_device {
  gmem_stats_t stats{};
  std::string name; // "NVIDIA H200" or "simulated device"; may be empty
};

inline std::string report_percent(double fraction) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", fraction * 100.0);
  return buf;
}

inline double report_ratio(std::uint64_t a, std::uint64_t b) {
  return b == 0 ? 0.0 : static_cast<double>(a) / static_cast<double>(b);
}

// Recommendations for one device; empty when nothing crosses a threshold.
inline std::vector<std::string> recommendations(const gmem_stats_t& s, bool pooled) {
  std::vector<std::string> out;
  if (!pooled) {
    out.push_back("gmem is not preloaded: pool figures are unavailable. Run under `gmem run -- "
                  "CMD` (or LD_PRELOAD=libgmem.so) for allocation caching, limits and traces.");
    return out;
  }
  const double frag =
      s.free_bytes == 0 ? 0.0 : 1.0 - report_ratio(s.largest_free_block, s.free_bytes);
  if (frag > k_frag_threshold && s.free_bytes >= k_frag_min_free)
    out.push_back("fragmentation " + report_percent(frag) + " (threshold " +
                  report_percent(k_frag_threshold) + " with >= " + format_bytes(k_frag_min_free) +
                  " cached free): largest free block " + format_bytes(s.largest_free_block) +
                  " of " + format_bytes(s.free_bytes) +
                  " free. Allocate long-lived buffers first, reuse equal sizes, or call "
                  "gmem_empty_cache() between phases.");
  const double hit = report_ratio(s.cache_hits, s.total_allocs);
  if (s.total_allocs >= k_hit_rate_min_allocs && hit < k_hit_rate_threshold)
    out.push_back("cache hit rate " + report_percent(hit) + " (threshold " +
                  report_percent(k_hit_rate_threshold) +
                  " over >= " + std::to_string(k_hit_rate_min_allocs) +
                  " allocations): most allocations reach the driver. Raise GMEM_MAX_CACHED or "
                  "avoid gmem_empty_cache() in loops.");
  const std::uint64_t idle = s.free_bytes + s.pending_bytes;
  if (s.reserved_bytes > 0 && idle >= k_idle_cache_min &&
      report_ratio(idle, s.reserved_bytes) > k_idle_cache_threshold)
    out.push_back("cached but unused " + format_bytes(idle) + " = " +
                  report_percent(report_ratio(idle, s.reserved_bytes)) +
                  " of reserved (threshold " + report_percent(k_idle_cache_threshold) +
                  " and >= " + format_bytes(k_idle_cache_min) +
                  "): call gmem_empty_cache() if other processes need the memory.");
  const std::uint64_t cap = s.limit_bytes != 0 ? s.limit_bytes : s.device_total_bytes;
  if (cap != 0 && report_ratio(s.peak_reserved_bytes, cap) > k_pressure_threshold)
    out.push_back(std::string("peak reserved ") + format_bytes(s.peak_reserved_bytes) + " = " +
                  report_percent(report_ratio(s.peak_reserved_bytes, cap)) + " of the " +
                  (s.limit_bytes != 0 ? "limit" : "device") + " (threshold " +
                  report_percent(k_pressure_threshold) +
                  "): close to out of memory. Process work in chunks (gmem/chunking.hpp, "
                  "gmem.chunked) sized from gmem_allocatable_bytes().");
  if (s.ooms > 0)
    out.push_back(std::to_string(s.ooms) +
                  " out-of-memory failure(s) (threshold: any): see `gmem frag` for the "
                  "fragmentation at the failure; chunked processing retries with smaller "
                  "chunks.");
  if (s.pending_bytes >= k_pending_min &&
      report_ratio(s.pending_bytes, s.reserved_bytes) > k_pending_threshold)
    out.push_back("pending frees " + format_bytes(s.pending_bytes) + " = " +
                  report_percent(report_ratio(s.pending_bytes, s.reserved_bytes)) +
                  " of reserved (threshold " + report_percent(k_pending_threshold) +
                  " and >= " + format_bytes(k_pending_min) +
                  "): freed blocks wait for a device synchronization; free with "
                  "cudaFreeAsync on the stream that used the memory to reuse it sooner.");
  return out;
}

// The whole report. `pooled` = the figures come from libgmem.so's pool.
inline std::string memory_report(const std::vector<report_device>& devices, bool pooled) {
  std::string r = "gmem memory report (";
  r += pooled ? "pool figures from libgmem.so" : "driver figures only; libgmem.so not preloaded";
  r += ")\n";
  if (devices.empty()) r += "  no device answered\n";
  for (const auto& d : devices) {
    const gmem_stats_t& s = d.stats;
    char line[512];
    std::snprintf(line, sizeof line, "device %d%s%s\n", s.device, d.name.empty() ? "" : ": ",
                  d.name.c_str());
    r += line;
    r += "  device memory   total " + format_bytes(s.device_total_bytes) + ", free " +
         format_bytes(s.device_free_bytes) + " (driver)\n";
    r += "  allocatable     " + format_bytes(s.allocatable_bytes) +
         (s.limit_bytes != 0 ? ", limit " + format_bytes(s.limit_bytes)
                             : std::string(", no limit")) +
         "\n";
    if (pooled) {
      r += "  pool allocated  " + format_bytes(s.live_bytes) + " in " +
           std::to_string(s.live_blocks) + " blocks (requested " +
           format_bytes(s.live_requested_bytes) + "), peak " + format_bytes(s.peak_live_bytes) +
           "\n";
      r += "  pool reserved   " + format_bytes(s.reserved_bytes) + " in " +
           std::to_string(s.segments) + " segments, peak " + format_bytes(s.peak_reserved_bytes) +
           "\n";
      r += "  cached free     " + format_bytes(s.free_bytes) + ", largest block " +
           format_bytes(s.largest_free_block) + ", fragmentation " +
           report_percent(
               s.free_bytes == 0 ? 0.0 : 1.0 - report_ratio(s.largest_free_block, s.free_bytes)) +
           ", pending " + format_bytes(s.pending_bytes) + "\n";
      r += "  allocations     " + std::to_string(s.total_allocs) + " (" +
           format_bytes(s.total_alloc_bytes) + "), cache hit rate " +
           report_percent(report_ratio(s.cache_hits, s.total_allocs)) + ", driver calls " +
           std::to_string(s.upstream_allocs) + ", OOMs " + std::to_string(s.ooms) + "\n";
    }
    const auto recs = recommendations(s, pooled);
    if (recs.empty()) {
      r += "  recommendations none (no threshold crossed)\n";
    } else {
      r += "  recommendations\n";
      for (const auto& rec : recs)
        r += "    - " + rec + "\n";
    }
  }
  return r;
}

// Copies `text` into buf (NUL-terminated, cut if needed).
inline gmem_status copy_report(const std::string& text, char* buf, std::size_t len) {
  if (buf == nullptr || len == 0) return GMEM_ERROR_INVALID_ARGUMENT;
  const std::size_t n = text.size() < len ? text.size() : len - 1;
  text.copy(buf, n);
  buf[n] = '\0';
  return n == text.size() ? GMEM_OK : GMEM_ERROR_TRUNCATED;
}

} // namespace gmem::client
