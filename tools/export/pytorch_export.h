// `gmem export --format pytorch`: the memory snapshot that PyTorch's viewer reads
// (torch.cuda.memory._snapshot() layout; `python -m torch.cuda._memory_viz trace_plot FILE`,
// pytorch.org/memory_viz). Device pools only: the host pool has no place in that layout.
//   segments: [{device, address, total_size, allocated_size, active_size, requested_size,
//               stream, segment_type, segment_pool_id, is_expandable, frames,
//               blocks: [{address, size, requested_size, state, frames}]}]
//     blocks cover each segment exactly: live blocks "active_allocated", gaps "inactive".
//   device_traces: one list per device ordinal, oldest first, of
//     {action, addr, size, stream, time_us, frames}; actions alloc, free_requested,
//     free_completed, segment_alloc, segment_free, oom (with device_free).
//   frames: [{filename, line, name}], innermost first.
#pragma once

#include "profiler/format/trace_model.h"
#include "tools/export/pickle_writer.h"

namespace gmem::tools {

class symbolizer;

// Stacks as the mixed view shows them (stack_view.h: internals and frameworks' Python code
// folded); `all_frames`: every frame (--all-frames).
py_value pytorch_snapshot(const gmem::trace::trace& t, symbolizer& symbols,
                          bool all_frames = false);

} // namespace gmem::tools
