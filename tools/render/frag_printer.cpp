#include <cstdio>

#include "common/units.h"
#include "tools/analysis/frag_report.h"
#include "tools/render/printers.h"

namespace gmem::tools {
namespace {

std::string percent(double r) {
  char b[16];
  std::snprintf(b, sizeof b, "%.0f%%", r * 100.0);
  return b;
}

std::string hex(std::uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof b, "0x%012llx", static_cast<unsigned long long>(v));
  return b;
}

} // namespace

std::string print_frag(const gmem::trace::trace& t, const frag_report& r, const print_options& o) {
  std::string out = "gmem frag: " + describe_source(t) + "\n";
  if (r.devices.empty()) return out + "No pools: the process made no pooled allocation.\n";
  for (const auto& d : r.devices) {
    const std::string name = d.device < 0 ? "host (pinned)" : "device " + std::to_string(d.device);
    out += "\n" + name + ": " + format_bytes(d.reserved_bytes) + " reserved in " +
           std::to_string(d.segments.size()) + " segment" + (d.segments.size() == 1 ? "" : "s") +
           ", " + format_bytes(d.used_bytes) + " used (" + format_bytes(d.requested_bytes) +
           " requested), " + format_bytes(d.free_bytes) + " free";
    if (d.has_pool_counters && d.pending_bytes != 0)
      out += " (" + format_bytes(d.pool_free_bytes) + " reusable + " +
             format_bytes(d.pending_bytes) + " pending a fence)";
    out += "\n  largest free block " +
           format_bytes(d.has_pool_counters ? d.pool_largest_free : d.largest_free) +
           ", fragmentation " + percent(d.fragmentation()) +
           ", largest request that fits without growing " + format_bytes(d.largest_request) + "\n";
    if (d.largest_request_after_fence > d.largest_request)
      out += "  after a fence (pending blocks reusable): largest free block " +
             format_bytes(d.largest_free) + ", largest request " +
             format_bytes(d.largest_request_after_fence) + "\n";
    if (const std::string stitching = stitching_summary(d); !stitching.empty())
      out += "  stitching: " + stitching + "\n";
    out += "  limit " + (d.limit_bytes ? format_bytes(d.limit_bytes) : std::string("none")) +
           ", out-of-memory errors " + std::to_string(d.ooms) + "\n";
    if (d.graph_allocations != 0)
      out += "  graph memory (the driver's, not pooled: graph memory nodes and allocations "
             "captured into graphs): " +
             format_bytes(d.graph_bytes) + " in " + std::to_string(d.graph_allocations) +
             " allocation" + (d.graph_allocations == 1 ? "" : "s") + "\n";
    if (!d.segments.empty())
      out += "  segments  (map: # used, = mostly used, - partly used, . free)\n";
    for (const auto& s : d.segments) {
      char size[32];
      std::snprintf(size, sizeof size, "%11s", format_bytes(s.bytes).c_str());
      out += "  " + hex(s.base) + size + " [" + segment_map_line(s, o.map_width) + "] " +
             std::to_string(s.live_blocks) + " live, free " + format_bytes(s.free_bytes);
      if (s.stitched) out += ", stitched from arena pages";
      if (s.free_bytes != 0 && s.largest_free != s.free_bytes)
        out += " (largest " + format_bytes(s.largest_free) + ")";
      out += "\n";
    }
    out += "  advice:\n";
    for (const auto& a : d.advice)
      out += "  - " + a + "\n";
  }
  return out;
}

} // namespace gmem::tools
