// Python frames of an allocation: when a CPython interpreter (3.10 to 3.13) is loaded in the
// process and the allocating thread runs Python code, the writer appends that thread's Python
// stack (file, function, line; innermost first) to the native stack, as tagged words of the
// same stack record (layout::python_word), so stacks stay deduplicated by one id.
//
// Without the GIL: PyTorch and CuPy release the GIL before they allocate, so the frames are
// read without calling the interpreter, the way debuggers and sampling profilers (py-spy,
// Austin) read them, from the thread's own thread state (PyGILState_GetThisThreadState) and
// the frame structures of each supported version (docs/trace-format.md, "Python frames").
// Why that is safe: the frames walked are the calling thread's own; while it is inside the
// allocation hook it cannot pop them, and each frame holds a reference to its code object, so
// nothing read can be freed under us. Other threads only ever add frame objects to them
// (sys._current_frames). No reference count is touched and nothing is allocated by Python.
// What is checked before anything is dereferenced: the interpreter is initialized and not
// finalizing (finalization frees other threads' states), the thread state names the main
// interpreter, every code object has PyCode_Type's type, every string PyUnicode_Type's, the
// instruction offset lies inside its code; a frame that fails a check ends the walk. Nothing
// runs in a forked child (the recorder stops there too). Free-threaded builds (no GIL, other
// layouts) and other versions: no Python frames.
//
// Cost: frames are walked at each allocation, not kept in a shadow stack by a profiling hook:
// GPU allocations are rare next to Python calls, so paying per allocation beats paying per
// call. A code object's "file\0function" string is interned once and cached by the code
// object's address, checked against its file, name and line-table objects (a dead code object
// whose address is reused by another one has other ones); lines are cached the same way by
// (code object, instruction offset). Before both, each thread's memo of the frames its
// captures met (python_frame_memo.h), by frame address and instruction: the frames a capture
// shares with earlier ones (most of them: a program allocates from a few hundred lines under a
// few callers) cost a few loads each, whatever the depth and order of the call sites.
#pragma once

#include <cstdint>
#include <string_view>

namespace gmem::trace {

// Looks for CPython in the process (idempotent; call again after a dlopen: an interpreter
// embedded later is found then). Returns whether a supported one is there.
bool python_init() noexcept;

enum class python_capture : std::uint8_t {
  absent,     // no supported interpreter in the process, or Python frames are off
  frames,     // wrote the calling thread's frames
  no_gil,     // an interpreter is there but this thread runs no Python code (no thread state,
              // or no frame: a thread the program's native code started)
  finalizing, // the interpreter is shutting down (or not initialized yet)
};

// Whether the interpreter's shutdown has begun (or ended) after it ran: the program's own
// code is over, and what is freed from now on was still held by it. Sticky; false when no
// supported interpreter is there or it never ran. Cheap: for every free.
bool python_program_ended() noexcept;

// Interns "file\0function" and returns its string id (0 = no room). The writer's.
using python_intern_fn = std::uint32_t (*)(void* ctx, std::string_view text) noexcept;

// Writes up to `max` tagged words (layout::python_word) for the calling thread's Python stack,
// innermost first, into `out`; `*written` = how many. `ctx` identifies the string table
// (cached ids are valid for one ctx only; a new ctx empties the cache).
python_capture capture_python(std::uint64_t* out, unsigned max, unsigned* written,
                              python_intern_fn intern, void* ctx) noexcept;

} // namespace gmem::trace
