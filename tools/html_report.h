// `gmem report`: one self-contained HTML file (inline CSS and SVG, no scripts, no network):
// summary, per-pool timeline of live vs reserved with markers/OOMs/fences, segment map,
// leak table and fragmentation table with advice.
#pragma once

#include <string>

#include "profiler/trace_model.h"

namespace gmem::tools {

class symbolizer;

std::string html_report(const gmem::trace::trace& t, symbolizer& symbols);

} // namespace gmem::tools
