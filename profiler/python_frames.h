// Python frames of an allocation: when the allocating thread holds the GIL of a CPython
// interpreter (3.10 to 3.13) loaded in the process, the writer appends the Python stack (file,
// function, line; innermost first) to the native stack, as tagged words of the same stack
// record (layout::python_word), so stacks stay deduplicated by one id.
//
// Safety: the CPython API is resolved with dlsym(RTLD_DEFAULT) (no link-time dependency), and
// called only when, in this order, the interpreter is initialized, this thread holds the GIL
// (PyGILState_Check and a current thread state), and the interpreter is not finalizing: with
// the GIL held, finalization cannot start under us. Nothing runs in a forked child (the
// recorder stops there too). Free-threaded builds (no GIL) are not supported: no Python frames.
//
// Cost: frames are walked at each allocation (PyThreadState_GetFrame / PyFrame_GetBack), not
// kept in a shadow stack by a profiling hook: GPU allocations are rare next to Python calls,
// so paying per allocation beats paying per call (docs/trace-format.md, "Python frames").
// A code object's "file\0function" string is interned once and cached by the code object's
// address, holding a reference so the address is never reused by another code object.
#pragma once

#include <cstdint>
#include <string_view>

namespace gmem::trace {

// Looks for the CPython API in the process (idempotent; call again after a dlopen: an
// interpreter embedded later is found then). Returns whether a supported one is there.
bool python_init() noexcept;

enum class python_capture : std::uint8_t {
  absent,     // no supported interpreter in the process, or Python frames are off
  frames,     // wrote the frames of a thread holding the GIL
  no_gil,     // an interpreter is there but this thread does not hold its GIL
  finalizing, // the interpreter is shutting down (or not initialized yet)
};

// Interns "file\0function" and returns its string id (0 = no room). The writer's.
using python_intern_fn = std::uint32_t (*)(void* ctx, std::string_view text) noexcept;

// Writes up to `max` tagged words (layout::python_word) for the calling thread's Python stack,
// innermost first, into `out`; `*written` = how many. `ctx` identifies the string table
// (cached ids are valid for one ctx only; a new ctx empties the cache).
python_capture capture_python(std::uint64_t* out, unsigned max, unsigned* written,
                              python_intern_fn intern, void* ctx) noexcept;

} // namespace gmem::trace
