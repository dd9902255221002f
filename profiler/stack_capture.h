// Call-stack capture for allocations. Uses libunwind's unw_backtrace (about 0.2-0.3 us for 16
// frames here), loaded with dlopen at init: Debian's static libunwind.a is not PIC and cannot
// be linked into libgmem.so, and GPU hosts often have no libunwind at all. Tried in order: the
// system's libunwind.so.8, the copy the build puts next to the library (build/lib), then
// libgcc's _Unwind_Backtrace (always present, about 10x slower).
#pragma once

#include <cstdint>

namespace gmem::trace {

enum class unwinder_kind : std::uint8_t { none, libunwind, libgcc };
const char* to_string(unwinder_kind) noexcept;

// Loads the unwinder once (thread-safe, idempotent); `prefer_libgcc` skips libunwind (tests,
// GMEM_STACK_UNWINDER=libgcc). Returns the one in use.
unwinder_kind init_unwinder(bool prefer_libgcc = false) noexcept;

// Writes up to `max` return addresses of the caller's stack into `ips`, innermost first,
// skipping the `skip` innermost frames above the caller. Returns how many it wrote. Safe to
// call before init_unwinder() (uses libgcc then). Call it before taking any lock.
unsigned capture_ips(std::uintptr_t* ips, unsigned max, unsigned skip) noexcept;

} // namespace gmem::trace
