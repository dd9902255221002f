#include "tools/render/html_report.h"

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <set>

#include "common/units.h"
#include "tools/analysis/frag_report.h"
#include "tools/analysis/leak_report.h"
#include "tools/analysis/timeline.h"
#include "tools/render/flame_graph.h"
#include "tools/render/printers.h"
#include "tools/render/svg_charts.h"

namespace gmem::tools {
namespace {

constexpr const char* k_style = R"(
body{font:14px/1.45 -apple-system,"Segoe UI",Helvetica,Arial,sans-serif;color:#1d2330;margin:0;background:#f4f5f8}
main{max-width:1100px;margin:0 auto;padding:24px 28px 40px;background:#fff;min-height:100vh}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #e3e6ec;padding-bottom:4px}
h3{font-size:14px;margin:16px 0 6px}.sub{color:#5a6275;margin:0 0 16px}
.cards{display:flex;flex-wrap:wrap;gap:10px;margin:12px 0}
.card{border:1px solid #e3e6ec;border-radius:6px;padding:8px 12px;min-width:120px;background:#fafbfd}
.card b{display:block;font-size:18px}.card span{color:#5a6275;font-size:12px}
.card.bad b{color:#c0392b}
table{border-collapse:collapse;width:100%;margin:6px 0 10px;font-size:13px}
th,td{text-align:left;padding:4px 8px;border-bottom:1px solid #eceef3;vertical-align:top}
th{background:#f6f7fa;font-weight:600}td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
code,pre{font:12px/1.4 ui-monospace,Menlo,Consolas,monospace}pre{margin:4px 0;white-space:pre-wrap}
.legend span{display:inline-block;margin-right:16px;font-size:12px;color:#5a6275}
.sw{display:inline-block;width:12px;height:12px;vertical-align:-2px;margin-right:4px;border:1px solid #0002}
.ax{font-size:11px;fill:#5a6275}.mk{font-size:11px;fill:#6b4fa0}
.note{color:#5a6275;font-size:12px}.warn{color:#a0522d}
ul.advice li{margin:4px 0}
)";

constexpr std::size_t k_max_charts = 64; // timeline charts and segment maps per report

std::string pool_title(int device) {
  return device < 0 ? std::string("Host (pinned) pool") : "Device " + std::to_string(device);
}

std::string card(const std::string& value, const std::string& label, bool bad = false) {
  return std::string("<div class=\"card") + (bad ? " bad" : "") + "\"><b>" + html_escape(value) +
         "</b><span>" + html_escape(label) + "</span></div>";
}

std::string pct(double v) {
  char b[16];
  std::snprintf(b, sizeof b, "%.0f%%", v * 100);
  return b;
}

std::string wall_time(std::uint64_t unix_ns) {
  const std::time_t secs = static_cast<std::time_t>(unix_ns / 1'000'000'000u);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char b[40];
  std::strftime(b, sizeof b, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return b;
}

} // namespace

std::string html_report(const gmem::trace::trace& t, symbolizer& symbols, frame_view view) {
  const timeline tl = build_timeline(t);
  const frag_report fr = build_frag_report(t);
  const suppression_list supp = suppression_list::defaults();
  leak_filter filter;
  filter.view = view;
  filter.suppressions = &supp;
  filter.verdicts = leak_filter::show::all; // one table, each site with its verdict
  leak_report lr = build_leak_report(t, symbols, filter);
  std::stable_partition(lr.sites.begin(), lr.sites.end(),
                        [](const leak_site& s) { return s.verdict == leak_verdict::leak; });
  gmem::pool_stats sum;
  for (const auto& d : t.devices) {
    sum.peak_live_bytes += d.stats.peak_live_bytes;
    sum.peak_reserved_bytes += d.stats.peak_reserved_bytes;
    sum.total_allocs += d.stats.total_allocs;
    sum.cache_hits += d.stats.cache_hits;
    sum.fences += d.stats.fences;
    sum.ooms += d.stats.ooms;
  }
  std::uint64_t oom_events = 0; // the ring may hold OOMs of a pool whose counters are older
  for (const auto& m : tl.marks)
    oom_events += m.kind == mark_kind::oom;
  sum.ooms = std::max(sum.ooms, oom_events);
  std::string h = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>gmem "
                  "report: pid " +
                  std::to_string(t.info.pid) + "</title>\n<style>" + k_style +
                  "</style></head>\n<body><main>\n";
  h += "<h1>gmem report</h1>\n<p class=\"sub\"><code>" + html_escape(t.info.command_line) +
       "</code><br>pid " + std::to_string(t.info.pid) + ", " +
       gmem::trace::to_string(t.info.state) + ", started " + wall_time(t.info.start_realtime_ns) +
       ", " + html_escape(t.info.source) + "</p>\n";
  h += "<div class=\"cards\">";
  h += card(format_bytes(sum.peak_live_bytes), "peak live");
  h += card(format_bytes(sum.peak_reserved_bytes), "peak reserved");
  h += card(format_bytes(lr.all_bytes), std::to_string(lr.all_count) + " outstanding allocations",
            lr.all_count > 0 && !lr.process_alive);
  h += card(sum.total_allocs
                ? pct(static_cast<double>(sum.cache_hits) / static_cast<double>(sum.total_allocs))
                : "-",
            "cache hit rate");
  h += card(std::to_string(sum.fences), "fences");
  h += card(std::to_string(sum.ooms), "out-of-memory errors", sum.ooms > 0);
  std::uint64_t peak_graph = 0, graph_now = 0, graph_count = 0;
  for (const auto& d : tl.devices)
    peak_graph = std::max(peak_graph, d.peak_graph);
  for (const auto& d : fr.devices) {
    graph_now += d.graph_bytes;
    graph_count += d.graph_allocations;
  }
  if (peak_graph != 0 || graph_count != 0)
    h += card(format_bytes(std::max(peak_graph, graph_now)),
              "peak graph memory (not pooled; " + std::to_string(graph_count) + " live now)");
  h += "</div>\n";
  if (t.losses.lost_events || t.losses.live_overflow || t.losses.stack_overflow)
    h += "<p class=\"warn\">Not everything was recorded: " + std::to_string(t.losses.lost_events) +
         " events lost, " + std::to_string(t.losses.live_overflow) +
         " allocations missing from the live table, " + std::to_string(t.losses.stack_overflow) +
         " stacks not stored.</p>\n";

  h += "<h2>Timeline</h2>\n<p class=\"legend\"><span><i class=\"sw\" "
       "style=\"background:#3b6fd8\"></i>live</span>"
       "<span><i class=\"sw\" "
       "style=\"background:#f2c14e88;border-color:#d99a00\"></i>reserved</span>"
       "<span><i class=\"sw\" style=\"background:#6b4fa0\"></i>marker</span>"
       "<span><i class=\"sw\" style=\"background:#d0312d\"></i>OOM</span>"
       "<span><i class=\"sw\" style=\"background:#2a9d5c\"></i>fence</span></p>\n";
  if (tl.devices.empty()) h += "<p class=\"note\">No pooled memory was recorded.</p>\n";
  // Charts only for pools that have counters (when any pool has): the device ids of events
  // are the writer's word, and a chart per id would make a small hostile file a huge report.
  std::set<int> counted;
  for (const auto& d : t.devices)
    counted.insert(d.device);
  std::size_t charts = 0, uncharted = 0;
  for (const auto& d : tl.devices) {
    if ((!counted.empty() && counted.count(d.device) == 0) || charts == k_max_charts) {
      ++uncharted;
      continue;
    }
    ++charts;
    h += "<h3>" + pool_title(d.device) + ": peak live " + format_bytes(d.peak_live) +
         ", peak reserved " + format_bytes(d.peak_reserved) +
         (d.peak_graph != 0 ? ", peak graph memory " + format_bytes(d.peak_graph) + " (not pooled)"
                            : std::string()) +
         "</h3>\n";
    std::size_t not_drawn = 0;
    h += timeline_svg(tl, d, 1040, 320, &not_drawn);
    if (not_drawn != 0)
      h += "<p class=\"note\">" + std::to_string(not_drawn) + " more markers not drawn (at most " +
           std::to_string(k_max_chart_markers) + " markers and " +
           std::to_string(k_max_chart_marks) + " other marks per chart).</p>\n";
  }
  if (uncharted != 0)
    h += "<p class=\"note\">" + std::to_string(uncharted) +
         " more pools not drawn (pools without counters, or beyond " +
         std::to_string(k_max_charts) + " charts).</p>\n";
  if (tl.lost_events)
    h += "<p class=\"note\">The event ring lost its oldest events; the curves are anchored at the "
         "final state.</p>\n";

  h += "<h2>Segments</h2>\n<p class=\"legend\"><span><i class=\"sw\" "
       "style=\"background:#3b6fd8\"></i>requested</span>"
       "<span><i class=\"sw\" style=\"background:#9db7ea\"></i>rounding</span>"
       "<span><i class=\"sw\" style=\"background:#e6e8ee\"></i>free</span> (bar width: square root "
       "of the segment size)</p>\n";
  std::size_t maps = 0;
  for (const auto& d : fr.devices) {
    if (maps++ == k_max_charts) {
      h += "<p class=\"note\">" + std::to_string(fr.devices.size() - k_max_charts) +
           " more pools not drawn (at most " + std::to_string(k_max_charts) + ").</p>\n";
      break;
    }
    h += "<h3>" + pool_title(d.device) + "</h3>\n";
    h += "<table><tr><th>reserved</th><th>used</th><th>requested</th><th>free</th><th>largest free "
         "block</th>"
         "<th>fragmentation</th><th>largest request without growing</th><th>pending</th></tr><tr>";
    for (const auto v : {d.reserved_bytes, d.used_bytes, d.requested_bytes, d.free_bytes,
                         d.has_pool_counters ? d.pool_largest_free : d.largest_free})
      h += "<td class=\"n\">" + format_bytes(v) + "</td>";
    h += "<td class=\"n\">" + pct(d.fragmentation()) + "</td><td class=\"n\">" +
         format_bytes(d.largest_request) + "</td><td class=\"n\">" + format_bytes(d.pending_bytes) +
         "</td></tr></table>\n";
    if (const std::string stitching = stitching_summary(d); !stitching.empty())
      h += "<p class=\"note\">Stitching: " + html_escape(stitching) + ".</p>\n";
    h += segment_map_svg(d, 1040);
    h += "<ul class=\"advice\">";
    for (const auto& a : d.advice)
      h += "<li>" + html_escape(a) + "</li>";
    h += "</ul>\n";
  }

  h += "<h2>Outstanding allocations by call site</h2>\n";
  if (lr.process_alive)
    h += "<p class=\"note\">The process is running: these may still be freed.</p>\n";
  if (lr.sites.empty())
    h += "<p class=\"note\">None.</p>\n";
  else {
    h += "<table><tr><th>#</th><th>bytes</th><th>count</th><th>oldest</th><th>verdict</th><th>call "
         "site</th></tr>\n";
    std::size_t n = 0;
    for (const auto& s : lr.sites) {
      if (++n > 50) break;
      const std::string top = site_summary(s);
      std::string stack;
      for (const auto& f : s.frames)
        stack += f.name() + (f.file.empty() ? "" : "  " + f.location()) + "\n";
      h += "<tr><td class=\"n\">" + std::to_string(n) + "</td><td class=\"n\">" +
           format_bytes(s.bytes) + "</td><td class=\"n\">" + std::to_string(s.count) +
           "</td><td class=\"n\">" + format_duration_ns(s.oldest_age_ns) + "</td><td>" +
           html_escape(verdict_text(s, lr)) + "</td><td><details><summary><code>" +
           html_escape(top) + "</code></summary><pre>" + html_escape(stack) +
           "</pre></details></td></tr>\n";
    }
    h += "</table>\n";
    if (lr.sites.size() > 50)
      h += "<p class=\"note\">" + std::to_string(lr.sites.size() - 50) +
           " more sites: see gmem leaks.</p>\n";
  }
  for (const framework_cache* c : lr.caches) {
    std::uint64_t bytes = 0, count = 0;
    for (const auto& s : lr.cached)
      if (s.cache == c) bytes += s.bytes, count += s.count;
    h += "<p class=\"note\">" + html_escape(c->cache) + " holds " + format_bytes(bytes) + " in " +
         plural(count, "allocation", "allocations") +
         ", not counted above: " + html_escape(cache_note(*c, lr.observed(c), lr.tensor_bytes)) +
         " (see gmem leaks).</p>\n";
  }
  if (!lr.suppressed.empty())
    h += "<p class=\"note\">Suppressed (library-lifetime allocations, not leaks): " +
         format_bytes(lr.suppressed_bytes) + " in " + std::to_string(lr.suppressed_count) +
         " allocations from " + std::to_string(lr.suppressed.size()) +
         " call sites (CUDA library handles and workspaces, pinned host caches; see gmem "
         "leaks).</p>\n";

  h += "<h2>Flame graphs</h2>\n<p class=\"legend\"><span><i class=\"sw\" "
       "style=\"background:#78b0e0\"></i>Python frame</span><span><i class=\"sw\" "
       "style=\"background:#ea8a40\"></i>native frame</span> (callers below callees; width: "
       "bytes; hover a frame for its name and bytes)</p>\n";
  bool complete = true;
  std::uint64_t peak_ns = 0;
  const std::string peak_svg =
      flame_svg(t, symbols, live_at_peak_by_stack(t, &complete, &peak_ns), 1040);
  h += "<h3>Live at the peak (" + format_duration_ns(peak_ns) + " after start)</h3>\n";
  h += peak_svg.empty() ? "<p class=\"note\">No allocation in the event ring.</p>\n" : peak_svg;
  if (!complete)
    h += "<p class=\"note\">The event ring lost its oldest events: allocations made before its "
         "window are missing here.</p>\n";
  const std::string leak_svg = flame_svg(t, symbols, outstanding_by_stack(t), 1040);
  h += std::string("<h3>") +
       (lr.process_alive ? "Outstanding now" : "Leaked (outstanding at exit)") + "</h3>\n";
  h += leak_svg.empty() ? "<p class=\"note\">None.</p>\n" : leak_svg;
  h += "<p class=\"note\">Generated by <code>gmem report</code> from " +
       html_escape(t.info.source) + " (trace format " + std::to_string(t.info.format_version) +
       ").</p>\n</main></body></html>\n";
  return h;
}

} // namespace gmem::tools
