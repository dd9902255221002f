// One frame of `gmem top`: per-pool live/reserved/peak/limit, allocation rate, cache hit rate,
// pending bytes, and the top call sites by live bytes. Pure: the command refreshes it in place.
#pragma once

#include <cstdint>
#include <string>

#include "profiler/format/trace_model.h"
#include "tools/stack_view.h"

namespace gmem::tools {

class symbolizer;

struct top_sample {
  std::uint64_t now_ns = 0;       // trace clock
  std::uint64_t total_allocs = 0; // summed over pools
};

top_sample take_top_sample(const gmem::trace::trace& t);

// `previous` (may be null) gives the rates; without it they are averages since start.
std::string render_top(const gmem::trace::trace& t, symbolizer& symbols, const top_sample* previous,
                       std::size_t sites, frame_view view = frame_view::python_first);

} // namespace gmem::tools
