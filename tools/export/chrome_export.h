// `gmem export --format chrome`: the Chrome trace event format (JSON object form) that
// Perfetto and chrome://tracing open. Counter tracks per pool (live, reserved; pending, free,
// largest free block from the counter samples), instant events for markers and OOMs, complete
// events for fences, and the process and thread names.
#pragma once

#include <nlohmann/json.hpp>

#include "profiler/format/trace_model.h"

namespace gmem::tools {

class symbolizer;

// Stacks as the mixed view shows them (stack_view.h: internals and frameworks' Python code
// folded); `all_frames`: every frame (--all-frames).
nlohmann::json chrome_trace(const gmem::trace::trace& t, symbolizer& symbols,
                            bool all_frames = false);

} // namespace gmem::tools
