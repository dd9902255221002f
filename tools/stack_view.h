// What a reader is shown of a recorded stack: Python frames first (when the allocating thread
// held the GIL), then native frames with the shim's own, the CUDA runtime's internals and the
// interpreter's and bindings' glue folded away, so the first frame shown is the program's.
// Python frames another thread lent (it waited in backward() while an autograd engine thread
// allocated) follow the thread's own, the first of them shown marked "[via backward()]".
// Python frames of the frameworks' own code (torch, jax, cupy, transformers...: frameworks.h)
// fold the same way, unless every Python frame is theirs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "profiler/format/trace_model.h"
#include "tools/symbolizer.h"

namespace gmem::tools {

enum class frame_view : std::uint8_t {
  python_first, // Python frames (frameworks' folded), then the first native frame that is the
                // program's (default); a stack without Python frames shows its native frames
                // folded
  mixed,        // Python frames (frameworks' folded), then every native frame folded (exports)
  native,       // native frames only, folded (--native)
  all,          // every Python frame, then every native frame unfolded (--all-frames)
};

struct shown_stack {
  std::vector<frame_info> frames; // innermost first
  std::size_t python_frames = 0;  // how many of `frames` are Python frames (they come first)
  std::size_t folded = 0;         // native frames left out (runtime internals, glue)
  std::size_t python_folded = 0;  // Python frames of frameworks' own code left out
  gmem::trace::python_note note = gmem::trace::python_note::none;
};

shown_stack show_stack(const gmem::trace::trace& t, std::uint32_t stack_id, symbolizer& symbols,
                       frame_view view);

// Every frame of a stack, Python first then native, nothing folded but the shim's own frames:
// what suppressions are matched against.
std::vector<frame_info> all_frames(const gmem::trace::trace& t, std::uint32_t stack_id,
                                   symbolizer& symbols);

// Frame classes used for folding (exposed for tests).
bool is_shim_frame(const frame_info& f);
bool is_runtime_internal(const frame_info& f); // CUDA runtime/driver internals, cuda* API
bool is_cuda_api(const frame_info& f);         // cudaMalloc, cuMemAlloc_v2, ...
bool is_glue_frame(const frame_info& f);       // libpython eval loop, ctypes/libffi, pybind11
// The observed frameworks' allocator internals (PyTorch's DeviceCachingAllocator::malloc,
// record_trace, alloc_block, cudaMallocMaybeCapturing...): the frames of every tensor's stack
// that gmem observes from, folded like the runtime's.
bool is_allocator_internal(const frame_info& f);

// A call site's identity: two stacks with the same key are one site. With Python frames (and a
// view that shows them) the Python frames alone: two native paths from one Python line are
// one site.
std::string stack_key(const shown_stack& s);

std::string describe(gmem::trace::python_note note); // "" for none

// Python frames lent by a thread that waited while the allocating thread worked for it (an
// autograd engine thread allocating for backward(): profiler/recorder/waiting_frames.h):
// show_stack() sets frame_info::via to this on the first lent frame it shows, after the
// frameworks' frames are folded, so the mark sits on the program's backward() line (or on its
// caller's when that line is in a framework's code). "" without a lender.
std::string lent_mark(const gmem::trace::python_stack& py);
// What the mark means, for the printers (one line).
inline constexpr const char* k_lent_note =
    "[via backward()]: allocated on PyTorch's autograd engine thread while this line waited in "
    "backward()";

} // namespace gmem::tools
