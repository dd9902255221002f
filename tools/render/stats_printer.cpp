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
  if (t.info.full || l.growth_refused != 0)
    out += "trace full: it stopped growing at " + format_bytes(t.info.total_bytes) + " (" +
           std::to_string(l.growth_refused) +
           " extents refused: GMEM_TRACE_MAX or a full /dev/shm); " +
           std::to_string(l.dropped_events) + " events, " + std::to_string(l.live_overflow) +
           " allocations, " + std::to_string(l.stack_overflow) + " stacks not recorded\n";
  return out;
}

} // namespace gmem::tools
