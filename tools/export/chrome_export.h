// `gmem export --format chrome`: the Chrome trace event format (JSON object form) that
// Perfetto and chrome://tracing open. Counter tracks per pool (live, reserved; pending, free,
// largest free block from the counter samples), instant events for markers and OOMs, complete
// events for fences, and the process and thread names.
#pragma once

#include <nlohmann/json.hpp>

#include "profiler/trace_model.h"

namespace gmem::tools {

class symbolizer;

nlohmann::json chrome_trace(const gmem::trace::trace& t, symbolizer& symbols);

} // namespace gmem::tools
