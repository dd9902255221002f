#include "tools/render/top_view.h"

#include <cstdio>

#include "common/escape.h"
#include "common/units.h"
#include "tools/analysis/leak_report.h"
#include "tools/analysis/trace_facts.h"
#include "tools/render/printers.h"

namespace gmem::tools {

top_sample take_top_sample(const gmem::trace::trace& t) {
  top_sample s;
  s.now_ns = trace_now_ns(t);
  for (const auto& d : t.devices)
    s.total_allocs += d.stats.total_allocs;
  return s;
}

std::string render_top(const gmem::trace::trace& t, symbolizer& symbols, const top_sample* previous,
                       std::size_t sites, frame_view view) {
  const top_sample now = take_top_sample(t);
  std::string out =
      "gmem top: " + describe_source(t) + ", up " + format_duration_ns(now.now_ns) + "\n\n";
  char line[256];
  std::snprintf(line, sizeof line, "%-6s %11s %11s %11s %11s %11s %9s %6s %11s %5s\n", "POOL",
                "LIVE", "RESERVED", "PEAK LIVE", "PEAK RES", "LIMIT", "ALLOCS/S", "HIT%", "PENDING",
                "OOMS");
  out += line;
  for (const auto& d : t.devices) {
    const auto& s = d.stats;
    double rate = 0;
    std::uint64_t dt = now.now_ns, da = now.total_allocs;
    if (previous != nullptr && now.now_ns > previous->now_ns) {
      dt = now.now_ns - previous->now_ns;
      da = now.total_allocs - previous->total_allocs;
    }
    if (t.devices.size() > 1 && previous == nullptr) da = s.total_allocs;
    if (dt > 0) rate = static_cast<double>(da) * 1e9 / static_cast<double>(dt);
    char hit[16];
    if (s.total_allocs == 0)
      std::snprintf(hit, sizeof hit, "-");
    else
      std::snprintf(hit, sizeof hit, "%.1f",
                    100.0 * static_cast<double>(s.cache_hits) /
                        static_cast<double>(s.total_allocs));
    std::snprintf(line, sizeof line, "%-6s %11s %11s %11s %11s %11s %9.0f %6s %11s %5llu\n",
                  d.device < 0 ? "host" : std::to_string(d.device).c_str(),
                  format_bytes(s.live_bytes).c_str(), format_bytes(s.reserved_bytes).c_str(),
                  format_bytes(s.peak_live_bytes).c_str(),
                  format_bytes(s.peak_reserved_bytes).c_str(),
                  s.limit_bytes ? format_bytes(s.limit_bytes).c_str() : "none", rate, hit,
                  format_bytes(s.pending_bytes).c_str(), static_cast<unsigned long long>(s.ooms));
    out += line;
  }
  if (t.devices.empty()) out += "(no pool counters yet)\n";
  leak_filter f;
  f.view = view;
  f.top = sites;
  f.verdicts = leak_filter::show::all; // every holder, leak or held, largest first
  f.by_bytes = true;
  f.framework_caches = false; // what holds memory, caches included: not a leak list
  const leak_report r = build_leak_report(t, symbols, f);
  out += "\nTOP CALL SITES BY LIVE BYTES (" + std::to_string(r.all_count) + " live allocations, " +
         format_bytes(r.all_bytes);
  // Observed tensors lie inside their cache's segments, which are listed too.
  if (r.tensor_count > 0)
    out += "; " + format_bytes(r.tensor_bytes) + " of it in " + std::to_string(r.tensor_count) +
           " tensors inside frameworks' caches";
  out += ")\n";
  for (const auto& s : r.sites) {
    const std::string where = site_summary(s);
    std::snprintf(line, sizeof line, "%11s %7llu  ", format_bytes(s.bytes).c_str(),
                  static_cast<unsigned long long>(s.count));
    out += line + escape_text(where) + "\n";
  }
  return out;
}

} // namespace gmem::tools
