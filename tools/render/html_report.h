// `gmem report`: one self-contained HTML file (inline CSS and SVG, no scripts, no network):
// summary, per-pool timeline of live vs reserved with markers/OOMs/fences, segment map,
// leak table and fragmentation table with advice, flame graphs by mixed Python/native stack.
#pragma once

#include <string>

#include "profiler/format/trace_model.h"
#include "tools/stack_view.h"

namespace gmem::tools {

class symbolizer;

// Leaks are grouped and shown with `view`; the default suppressions list library-lifetime
// allocations apart. Flame graphs of the bytes live at the peak and of the outstanding bytes.
std::string html_report(const gmem::trace::trace& t, symbolizer& symbols,
                        frame_view view = frame_view::python_first);

} // namespace gmem::tools
