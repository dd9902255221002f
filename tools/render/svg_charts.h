// The two pictures of the HTML report, as inline SVG text (no scripts, no network):
// a timeline of live vs reserved bytes with markers, OOMs and fences, and a segment map.
#pragma once

#include <cstddef>
#include <string>

namespace gmem::tools {

struct device_timeline;
struct device_frag;
struct timeline;

// Live (filled) and reserved (outlined area) over [tl.begin_ns, tl.end_ns] for one pool, with
// the marks of that device drawn on it: at most k_max_chart_markers markers and
// k_max_chart_marks other marks (OOMs, fences, trims), so a trace full of markers cannot blow
// up the report. `not_drawn`, if given, receives how many were left out.
inline constexpr std::size_t k_max_chart_markers = 200;
inline constexpr std::size_t k_max_chart_marks = 2000;
std::string timeline_svg(const timeline& tl, const device_timeline& d, int width, int height,
                         std::size_t* not_drawn = nullptr);

// Each segment as a horizontal bar, width proportional to its size: requested bytes dark,
// rounding slack light, free space grey.
std::string segment_map_svg(const device_frag& d, int width);

// Text for HTML: escape_text() on each line (control bytes, invalid UTF-8 and bidirectional
// controls shown as in the terminal; line breaks kept), then & < > " as entities.
std::string html_escape(const std::string& s);

} // namespace gmem::tools
