#include <cstdio>

#include "common/escape.h"
#include "common/units.h"
#include "tools/render/printers.h"

namespace gmem::tools {

std::string print_stats(const gmem::trace::trace& t) {
  std::string out = "gmem stats: " + describe_source(t) + "\n";
  if (t.devices.empty()) out += "No pool counters recorded.\n";
  for (const auto& d : t.devices) {
    out += "\n" +
           (d.device < 0 ? std::string("host (pinned)") : "device " + std::to_string(d.device)) +
           "\n";
    auto line = [&out](const char* name, std::uint64_t value, const char* desc) {
      const std::string n(name);
      const bool bytes = n.find("bytes") != std::string::npos || n == "largest_free_block";
      char b[96];
      std::snprintf(b, sizeof b, "  %-22s %14llu %-12s ", name,
                    static_cast<unsigned long long>(value),
                    bytes ? format_bytes(value).c_str() : "");
      out += b;
      out += desc;
      out += "\n";
    };
#define GMEM_X_LINE(n, desc) line(#n, d.stats.n, desc);
    GMEM_POOL_STATS(GMEM_X_LINE)
#undef GMEM_X_LINE
    for (const auto& [name, value] : d.unknown)
      line(escape_text(name).c_str(), value, "(unknown to this gmem)");
  }
  const auto& l = t.losses;
  out += "\nrecorded: " + std::to_string(l.last_seq) + " events (" +
         std::to_string(t.events.size()) + " in the ring, " + std::to_string(l.lost_events) +
         " lost), " + std::to_string(t.live.size()) + " live allocations (" +
         std::to_string(l.live_overflow) + " not recorded), " + std::to_string(t.segments.size()) +
         " segments, " + std::to_string(t.stacks.size()) + " stacks, " +
         std::to_string(t.modules.size()) + " modules\n";
  if (const auto& o = t.observed; o.allocs + o.frees != 0) {
    const std::uint64_t own = o.alloc_ns + o.free_ns, wall = recorded_wall_ns(t.info);
    char b[320];
    std::snprintf(
        b, sizeof b,
        "observing: %llu allocations at %.0f ns, %llu frees at %.0f ns (stacks "
        "included): %.3f ms of gmem's own host time, %.3f%% of the %.1f s since the trace "
        "began\n",
        static_cast<unsigned long long>(o.allocs),
        o.allocs ? static_cast<double>(o.alloc_ns) / static_cast<double>(o.allocs) : 0.0,
        static_cast<unsigned long long>(o.frees),
        o.frees ? static_cast<double>(o.free_ns) / static_cast<double>(o.frees) : 0.0,
        static_cast<double>(own) / 1e6,
        wall ? 100.0 * static_cast<double>(own) / static_cast<double>(wall) : 0.0,
        static_cast<double>(wall) / 1e9);
    out += b;
  }
  if (t.info.full || l.growth_refused != 0)
    out += "trace full: it stopped growing at " + format_bytes(t.info.total_bytes) + " (" +
           std::to_string(l.growth_refused) +
           " extents refused: GMEM_TRACE_MAX or a full /dev/shm); " +
           std::to_string(l.dropped_events) + " events, " + std::to_string(l.live_overflow) +
           " allocations, " + std::to_string(l.stack_overflow) + " stacks not recorded\n";
  return out;
}

} // namespace gmem::tools
