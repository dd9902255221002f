// Flame graphs of the HTML report, drawn as inline SVG by gmem itself (no script, no network):
// bytes by mixed call stack (Python frames, then native frames with internals folded), root at
// the bottom, callees above, each frame as wide as the bytes allocated through it. Frames show
// their name when wide enough and a tooltip (<title>) always; Python frames are drawn in a
// cooler colour than native ones.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "profiler/format/trace_model.h"
#include "tools/stack_view.h"

namespace gmem::tools {

// Bytes held per stack id.
struct stack_bytes {
  std::uint32_t stack_id = 0;
  std::uint64_t bytes = 0;
};

// Outstanding allocations now (the live table).
std::vector<stack_bytes> outstanding_by_stack(const gmem::trace::trace& t);
// Allocations live at the moment the most bytes were live. `complete` is false when the ring
// lost events (the peak may lie before its window); `peak_time_ns` receives when.
std::vector<stack_bytes> live_at_peak_by_stack(const gmem::trace::trace& t, bool* complete,
                                               std::uint64_t* peak_time_ns);

// The allocations live when the most bytes were live at or after `since_ns` (trace time; 0 =
// any time the ring covers), as live-table records. Replayed backwards from the live table
// through the event ring, so allocations older than the ring's window still count: one that a
// later free re-adds but whose allocating event the ring no longer holds has stack 0 and time
// 0. Invariant: the result's requested bytes are the peak.
std::vector<gmem::trace::live_allocation> live_at_peak(const gmem::trace::trace& t,
                                                       std::uint64_t since_ns, bool* complete,
                                                       std::uint64_t* peak_time_ns);

// At most k_max_flame_frames frames are drawn (the widest first), 64 levels deep; narrower ones
// are merged into their parent's width.
inline constexpr std::size_t k_max_flame_frames = 4000;
std::string flame_svg(const gmem::trace::trace& t, symbolizer& symbols,
                      const std::vector<stack_bytes>& input, int width);

} // namespace gmem::tools
