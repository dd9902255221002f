#include "tools/render/svg_charts.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "common/escape.h"
#include "common/units.h"
#include "tools/analysis/frag_report.h"
#include "tools/analysis/timeline.h"

namespace gmem::tools {
namespace {

std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", v);
  return b;
}

// 1, 2, 5 x 10^k steps giving about `target` ticks over [0, max].
double nice_step(double max, int target) {
  if (max <= 0) return 1;
  const double raw = max / target;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (const double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * p) return m * p;
  return 10 * p;
}

// Bytes on an axis: powers of 1024 are nicer to read than decimal steps.
double nice_bytes_step(double max, int target) {
  if (max <= 0) return 1;
  double unit = 1;
  while (max / unit >= 1024)
    unit *= 1024;
  return nice_step(max / unit, target) * unit;
}

} // namespace

std::string html_escape(const std::string& s) {
  // Text from a trace first goes through escape_text() line by line (the line breaks of a
  // stack stay, every other control byte, invalid UTF-8 and bidirectional control becomes
  // visible text as in the terminal), then markup is escaped.
  std::string text;
  text.reserve(s.size());
  for (std::size_t at = 0;;) {
    const std::size_t nl = s.find('\n', at);
    text += escape_text(std::string_view(s).substr(at, nl == std::string::npos ? nl : nl - at));
    if (nl == std::string::npos) break;
    text += '\n';
    at = nl + 1;
  }
  std::string o;
  o.reserve(text.size());
  for (const char c : text) {
    switch (c) {
    case '&':
      o += "&amp;";
      break;
    case '<':
      o += "&lt;";
      break;
    case '>':
      o += "&gt;";
      break;
    case '"':
      o += "&quot;";
      break;
    default:
      o += c;
    }
  }
  return o;
}

std::string timeline_svg(const timeline& tl, const device_timeline& d, int width, int height,
                         std::size_t* not_drawn) {
  const double left = 78, right = 16, top = 14, bottom = 36;
  const double pw = width - left - right, ph = height - top - bottom;
  const double t0 = static_cast<double>(tl.begin_ns);
  const double span = std::max(1.0, static_cast<double>(tl.end_ns) - t0);
  const double ymax =
      std::max(1.0, static_cast<double>(std::max(d.peak_reserved, d.peak_live)) * 1.08);
  auto x = [&](std::uint64_t t) { return left + (static_cast<double>(t) - t0) / span * pw; };
  auto y = [&](std::uint64_t v) { return top + ph - static_cast<double>(v) / ymax * ph; };

  // Peak-preserving reduction to at most one step per pixel column.
  struct col {
    double x;
    std::uint64_t live, reserved;
  };
  std::vector<col> cols;
  for (const auto& p : d.points) {
    const double px = std::floor(x(p.t_ns));
    if (!cols.empty() && cols.back().x == px) {
      cols.back().live = std::max(cols.back().live, p.live);
      cols.back().reserved = std::max(cols.back().reserved, p.reserved);
    } else {
      cols.push_back({px, p.live, p.reserved});
    }
  }
  auto area = [&](bool live) {
    std::string path = "M" + num(left) + "," + num(y(0));
    double prev_y = y(0);
    for (const auto& c : cols) {
      const double cy = y(live ? c.live : c.reserved);
      path += " L" + num(c.x) + "," + num(prev_y) + " L" + num(c.x) + "," + num(cy);
      prev_y = cy;
    }
    path +=
        " L" + num(left + pw) + "," + num(prev_y) + " L" + num(left + pw) + "," + num(y(0)) + " Z";
    return path;
  };

  std::string s = "<svg class=\"timeline\" xmlns=\"http://www.w3.org/2000/svg\" width=\"100%\" "
                  "viewBox=\"0 0 " +
                  std::to_string(width) + " " + std::to_string(height) + "\">\n";
  s += "<rect x=\"" + num(left) + "\" y=\"" + num(top) + "\" width=\"" + num(pw) + "\" height=\"" +
       num(ph) + "\" fill=\"#fbfbfd\" stroke=\"#d0d4dc\"/>\n";
  // Grid and axes.
  const double ystep = nice_bytes_step(ymax, 5);
  for (double v = 0; v <= ymax; v += ystep) {
    const double yy = y(static_cast<std::uint64_t>(v));
    s += "<line x1=\"" + num(left) + "\" x2=\"" + num(left + pw) + "\" y1=\"" + num(yy) +
         "\" y2=\"" + num(yy) + "\" stroke=\"#e3e6ec\"/>\n";
    s += "<text x=\"" + num(left - 6) + "\" y=\"" + num(yy + 4) +
         "\" text-anchor=\"end\" class=\"ax\">" +
         html_escape(format_bytes(static_cast<std::uint64_t>(v))) + "</text>\n";
  }
  const double tstep = nice_step(span, 8);
  for (double v = 0; v <= span; v += tstep) {
    const double xx = left + v / span * pw;
    s += "<line x1=\"" + num(xx) + "\" x2=\"" + num(xx) + "\" y1=\"" + num(top + ph) + "\" y2=\"" +
         num(top + ph + 4) + "\" stroke=\"#8a90a0\"/>\n";
    s += "<text x=\"" + num(xx) + "\" y=\"" + num(top + ph + 17) +
         "\" text-anchor=\"middle\" class=\"ax\">" +
         html_escape(format_duration_ns(static_cast<std::uint64_t>(v))) + "</text>\n";
  }
  s += "<path class=\"reserved\" d=\"" + area(false) +
       "\" fill=\"#f2c14e\" fill-opacity=\"0.35\" stroke=\"#d99a00\" stroke-width=\"1.5\"/>\n";
  s += "<path class=\"live\" d=\"" + area(true) +
       "\" fill=\"#3b6fd8\" fill-opacity=\"0.75\" stroke=\"#1f4fb0\" stroke-width=\"1\"/>\n";
  // Marks of this device.
  int label_row = 0;
  std::size_t markers = 0, others = 0, skipped = 0;
  for (const auto& m : tl.marks) {
    if (m.device != d.device && m.kind != mark_kind::marker) continue;
    if (m.kind == mark_kind::marker ? markers++ >= k_max_chart_markers
                                    : others++ >= k_max_chart_marks) {
      ++skipped;
      continue;
    }
    const double mx = x(m.t_ns);
    switch (m.kind) {
    case mark_kind::marker:
      s += "<line x1=\"" + num(mx) + "\" x2=\"" + num(mx) + "\" y1=\"" + num(top) + "\" y2=\"" +
           num(top + ph) + "\" stroke=\"#6b4fa0\" stroke-dasharray=\"4 3\"/>\n";
      {
        const bool right_half = mx > left + pw * 0.75; // labels near the right edge go left
        s += "<text x=\"" + num(right_half ? mx - 3 : mx + 3) + "\" y=\"" +
             num(top + 12 + 12 * (label_row++ % 4)) + "\" class=\"mk\"" +
             (right_half ? " text-anchor=\"end\"" : "") + ">" + html_escape(m.label) + "</text>\n";
      }
      break;
    case mark_kind::oom:
      s += "<line x1=\"" + num(mx) + "\" x2=\"" + num(mx) + "\" y1=\"" + num(top) + "\" y2=\"" +
           num(top + ph) + "\" stroke=\"#d0312d\" stroke-width=\"2\"/>\n";
      s += "<path d=\"M" + num(mx - 6) + "," + num(top) + " L" + num(mx + 6) + "," + num(top) +
           " L" + num(mx) + "," + num(top + 10) +
           " Z\" fill=\"#d0312d\"><title>OOM: " + html_escape(format_bytes(m.bytes)) +
           " requested</title></path>\n";
      break;
    case mark_kind::fence:
      s += "<rect x=\"" + num(mx - 1) + "\" y=\"" + num(top + ph - 8) +
           "\" width=\"2\" height=\"8\" "
           "fill=\"#2a9d5c\"><title>fence " +
           html_escape(format_duration_ns(m.duration_ns)) + ", released " +
           html_escape(format_bytes(m.bytes)) + "</title></rect>\n";
      break;
    case mark_kind::trim:
      s += "<rect x=\"" + num(mx - 1) + "\" y=\"" + num(top + ph - 14) +
           "\" width=\"2\" height=\"6\" "
           "fill=\"#9a6324\"><title>trim " +
           html_escape(format_bytes(m.bytes)) + "</title></rect>\n";
      break;
    }
  }
  s += "</svg>\n";
  if (not_drawn != nullptr) *not_drawn = skipped;
  return s;
}

std::string segment_map_svg(const device_frag& d, int width) {
  const double left = 170, right = 10, bar = 18, gap = 8;
  const double pw = width - left - right;
  std::uint64_t biggest = 1;
  for (const auto& seg : d.segments)
    biggest = std::max(biggest, seg.bytes);
  const std::size_t shown = std::min<std::size_t>(d.segments.size(), 200);
  const int height = static_cast<int>(static_cast<double>(shown) * (bar + gap) + gap + 4);
  std::string s = "<svg class=\"segmap\" xmlns=\"http://www.w3.org/2000/svg\" width=\"100%\" "
                  "viewBox=\"0 0 " +
                  std::to_string(width) + " " + std::to_string(height) + "\">\n";
  char addr[40];
  for (std::size_t i = 0; i < shown; ++i) {
    const segment_frag& seg = d.segments[i];
    const double y0 = gap + static_cast<double>(i) * (bar + gap);
    // Sizes span orders of magnitude: a square-root scale keeps small segments visible.
    const double w = std::max(
        4.0, pw * std::sqrt(static_cast<double>(seg.bytes) / static_cast<double>(biggest)));
    std::snprintf(addr, sizeof addr, "0x%llx", static_cast<unsigned long long>(seg.base));
    s += "<text x=\"4\" y=\"" + num(y0 + 13) + "\" class=\"ax\">" + addr + " " +
         html_escape(format_bytes(seg.bytes)) + "</text>\n";
    s += "<rect x=\"" + num(left) + "\" y=\"" + num(y0) + "\" width=\"" + num(w) + "\" height=\"" +
         num(bar) + "\" fill=\"#e6e8ee\" stroke=\"#9aa1b0\"><title>" +
         html_escape(format_bytes(seg.free_bytes)) + " free of " +
         html_escape(format_bytes(seg.bytes)) + "</title></rect>\n";
    const double scale = w / static_cast<double>(seg.bytes);
    for (const auto& r : seg.ranges) {
      if (!r.used) continue;
      const double rx = left + static_cast<double>(r.offset) * scale;
      const double rw = std::max(0.8, static_cast<double>(r.bytes) * scale);
      const double qw = std::max(0.8, static_cast<double>(r.requested) * scale);
      s += "<rect x=\"" + num(rx) + "\" y=\"" + num(y0) + "\" width=\"" + num(rw) + "\" height=\"" +
           num(bar) + "\" fill=\"#9db7ea\"/>\n";
      s += "<rect x=\"" + num(rx) + "\" y=\"" + num(y0) + "\" width=\"" + num(std::min(qw, rw)) +
           "\" height=\"" + num(bar) + "\" fill=\"#3b6fd8\"><title>" + std::to_string(r.blocks) +
           " live block(s), " + html_escape(format_bytes(r.bytes)) + "</title></rect>\n";
    }
  }
  s += "</svg>\n";
  if (shown < d.segments.size())
    s += "<p class=\"note\">" + std::to_string(d.segments.size() - shown) +
         " more segments not drawn.</p>\n";
  return s;
}

} // namespace gmem::tools
