#include "tools/render/analysis_printers.h"

#include <cstdio>

#include "common/escape.h"
#include "common/units.h"
#include "tools/analysis/growth_report.h"
#include "tools/analysis/oom_report.h"
#include "tools/analysis/trace_diff.h"
#include "tools/render/json_output.h"

namespace gmem::tools {
namespace {

using nlohmann::json;

// The frames of a site, indented, as gmem leaks prints them.
std::string frames_text(const call_site& s, const print_options& o) {
  if (s.frames.empty()) return "    (no stack recorded)\n";
  std::string out;
  for (std::size_t i = 0; i < s.frames.size() && i < o.frames; ++i) {
    out += frame_head(s.frames[i], i, o) + "\n";
  }
  if (s.frames.size() > o.frames)
    out += "    ... " + plural(s.frames.size() - o.frames, "more frame", "more frames") + "\n";
  return out;
}

json site_json(const call_site& s) {
  json frames = json::array();
  for (const auto& f : s.frames)
    frames.push_back(frame_json(f));
  return json{{"site", s.id}, {"frame", s.label}, {"caller", s.caller}, {"frames", frames}};
}

} // namespace

std::string format_signed_bytes(std::int64_t bytes) {
  if (bytes == 0) return "0 B";
  const std::uint64_t mag =
      bytes < 0 ? static_cast<std::uint64_t>(-(bytes + 1)) + 1 : static_cast<std::uint64_t>(bytes);
  return (bytes < 0 ? "-" : "+") + format_bytes(mag);
}

std::string print_growth(const gmem::trace::trace& t, const growth_report& r,
                         const site_resolver& sites, const print_options& o) {
  std::string out = "gmem leaks --growth: " + describe_source(t) + "\n";
  out += "Window: the last " + format_duration_ns(r.window_ns);
  if (r.from_ns == 0) out += " (the whole trace: " + format_duration_ns(r.now_ns) + ")";
  out += ".\n";
  if (r.incomplete)
    out += "warning: the trace lost events from before the window (oldest kept: " +
           format_duration_ns(r.now_ns - std::min(r.now_ns, r.oldest_event_ns)) + " ago); " +
           format_bytes(r.unknown_freed_bytes) + " in " +
           plural(r.unknown_freed_count, "free", "frees") +
           " could not be charged to a site, so growth is an upper bound.\n";
  if (r.sites.empty()) return out + "No call site allocated or holds memory.\n";
  out += "\n";
  std::size_t n = 0;
  for (const auto& g : r.sites) {
    const call_site& s = sites.site(g.site);
    char head[64];
    std::snprintf(head, sizeof head, "#%zu ", ++n);
    out += head + format_signed_bytes(g.growth_bytes) + " in the window (" +
           format_bytes(g.new_live_bytes) + " new and still live, " +
           format_bytes(g.freed_old_bytes) + " older freed); " + format_bytes(g.live_bytes) +
           " live in " + plural(g.live_count, "allocation", "allocations") + "; site " + s.id +
           "\n";
    out += frames_text(s, o) + "\n";
  }
  if (r.hidden_sites > 0)
    out += plural(r.hidden_sites, "more site", "more sites") + " not shown (--top).\n";
  return out;
}

json growth_json(const gmem::trace::trace& t, const growth_report& r, const site_resolver& sites) {
  json arr = json::array();
  for (const auto& g : r.sites) {
    json j = site_json(sites.site(g.site));
    j["growth_bytes"] = g.growth_bytes;
    j["live_bytes"] = g.live_bytes;
    j["live_count"] = g.live_count;
    j["new_live_bytes"] = g.new_live_bytes;
    j["new_live_count"] = g.new_live_count;
    j["freed_old_bytes"] = g.freed_old_bytes;
    j["freed_old_count"] = g.freed_old_count;
    j["allocs_in_window"] = g.allocs_in_window;
    arr.push_back(std::move(j));
  }
  return json{{"source", source_json(t)},
              {"window_ns", r.window_ns},
              {"from_ns", r.from_ns},
              {"now_ns", r.now_ns},
              {"incomplete", r.incomplete},
              {"unknown_freed_bytes", r.unknown_freed_bytes},
              {"unknown_freed_count", r.unknown_freed_count},
              {"hidden_sites", r.hidden_sites},
              {"sites", arr}};
}

std::string print_diff(const gmem::trace::trace& a, const gmem::trace::trace& b,
                       const trace_diff& d, const print_options& o) {
  std::string out = "gmem diff\n  A: " + describe_source(a) + "\n  B: " + describe_source(b) + "\n";
  if (d.same_process) {
    out += "Same process: B was taken " +
           (d.b_now_ns >= d.a_now_ns
                ? format_duration_ns(d.b_now_ns - d.a_now_ns) + " after A"
                : format_duration_ns(d.a_now_ns - d.b_now_ns) + " BEFORE A (arguments swapped?)") +
           "; allocations are matched one by one.\n";
  } else {
    out += "Different processes: no allocation is shared; sites are matched by their frames.\n";
  }
  if (d.sites.empty()) return out + "Neither trace holds outstanding allocations.\n";
  out += "\n";
  std::size_t n = 0;
  for (const auto& s : d.sites) {
    char head[64];
    std::snprintf(head, sizeof head, "#%zu ", ++n);
    out += head + format_signed_bytes(s.net_bytes()) + " net (" + format_bytes(s.a_bytes) + " -> " +
           format_bytes(s.b_bytes) + "): added " + format_bytes(s.added_bytes) + " in " +
           plural(s.added_count, "allocation", "allocations") + ", freed " +
           format_bytes(s.freed_bytes) + " in " +
           plural(s.freed_count, "allocation", "allocations") + "; site " + s.site.id + "\n";
    out += frames_text(s.site, o) + "\n";
  }
  const auto& t = d.total;
  out += "TOTAL: " + format_signed_bytes(t.net_bytes()) + " net (" + format_bytes(t.a_bytes) +
         " in " + plural(t.a_count, "allocation", "allocations") + " -> " +
         format_bytes(t.b_bytes) + " in " + plural(t.b_count, "allocation", "allocations") +
         "); added " + format_bytes(t.added_bytes) + ", freed " + format_bytes(t.freed_bytes) +
         ", " + plural(d.sites.size(), "call site", "call sites") + ".\n";
  return out;
}

json diff_json(const gmem::trace::trace& a, const gmem::trace::trace& b, const trace_diff& d) {
  auto counts = [](const site_diff& s) {
    return json{{"a_bytes", s.a_bytes},         {"a_count", s.a_count},
                {"b_bytes", s.b_bytes},         {"b_count", s.b_count},
                {"added_bytes", s.added_bytes}, {"added_count", s.added_count},
                {"freed_bytes", s.freed_bytes}, {"freed_count", s.freed_count},
                {"net_bytes", s.net_bytes()},   {"net_count", s.net_count()}};
  };
  json arr = json::array();
  for (const auto& s : d.sites) {
    json j = site_json(s.site);
    j.update(counts(s));
    arr.push_back(std::move(j));
  }
  return json{{"a", source_json(a)},
              {"b", source_json(b)},
              {"same_process", d.same_process},
              {"total", counts(d.total)},
              {"sites", arr}};
}

std::string print_ooms(const gmem::trace::trace& t, const oom_report& r, const site_resolver& sites,
                       const print_options& o) {
  std::string out = "gmem oom: " + describe_source(t) + "\n";
  if (r.ooms.empty()) {
    out += r.counted_ooms == 0
               ? "No out-of-memory failure was recorded.\n"
               : "The pools counted " + plural(r.counted_ooms, "OOM", "OOMs") +
                     " but their events are no longer in the trace (the ring lapped).\n";
    return out;
  }
  if (r.counted_ooms > r.ooms.size())
    out += "The pools counted " + std::to_string(r.counted_ooms) + "; the ring still holds " +
           std::to_string(r.ooms.size()) + ".\n";
  for (const auto& e : r.ooms) {
    out += "\nOOM at +" + format_duration_ns(e.time_ns) + " on " +
           (e.device < 0 ? std::string("host") : "device " + std::to_string(e.device)) +
           ", thread " + std::to_string(e.thread) + ": request of " + format_bytes(e.requested) +
           "\n";
    if (e.at_failure) {
      const pool_stats& s = *e.at_failure;
      char frag[32];
      std::snprintf(frag, sizeof frag, "%.2f", s.fragmentation());
      out += "  pool: reserved " + format_bytes(s.reserved_bytes) + ", live " +
             format_bytes(s.live_bytes) + ", cached free " + format_bytes(s.free_bytes) +
             ", pending " + format_bytes(s.pending_bytes) + ", limit " +
             (s.limit_bytes == 0 ? std::string("none") : format_bytes(s.limit_bytes)) + "\n";
      out += "  fragmentation " + std::string(frag) + ", largest free block " +
             format_bytes(s.largest_free_block) + "\n";
    } else {
      out += "  (the pool's snapshot of this failure is no longer in the trace)\n";
    }
    out += std::string(e.holders_exact ? "  top holders then"
                                       : "  top holders (allocations "
                                         "made before it and still live; "
                                         "older events were lost)") +
           ": " + format_bytes(e.held_bytes) + " held on that device\n";
    for (const auto& h : e.holders) {
      const call_site& s = sites.site(h.site);
      out += "    " + format_bytes(h.bytes) + " in " +
             plural(h.count, "allocation", "allocations") + "  " + s.label +
             (s.caller.empty() ? "" : "  <  " + s.caller) + "  (site " + s.id + ")\n";
    }
  }
  (void)o; // one-line holders; the full stacks are in gmem leaks
  return out;
}

json ooms_json(const gmem::trace::trace& t, const oom_report& r, const site_resolver& sites) {
  json arr = json::array();
  for (const auto& e : r.ooms) {
    json holders = json::array();
    for (const auto& h : e.holders) {
      json j = site_json(sites.site(h.site));
      j["bytes"] = h.bytes;
      j["count"] = h.count;
      holders.push_back(std::move(j));
    }
    arr.push_back(json{{"seq", e.seq},
                       {"time_ns", e.time_ns},
                       {"device", e.device},
                       {"thread", e.thread},
                       {"requested", e.requested},
                       {"at_failure", e.at_failure ? counters_json(*e.at_failure) : json()},
                       {"held_bytes", e.held_bytes},
                       {"holders_exact", e.holders_exact},
                       {"holders", holders}});
  }
  return json{{"source", source_json(t)}, {"counted_ooms", r.counted_ooms}, {"ooms", arr}};
}

} // namespace gmem::tools
