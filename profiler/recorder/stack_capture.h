// Call-stack capture for allocations. First the cached-rule walk (cfi_unwind.h: a table lookup
// and two loads a frame once its call sites are known); for the captures it gives up on,
// libunwind's unw_backtrace (about 0.2-0.5 us for 16 frames), loaded with dlopen at init:
// Debian's static libunwind.a is not PIC and cannot be linked into libgmem.so, and GPU hosts
// often have no libunwind at all. Tried in order: the system's libunwind.so.8, the copy the
// build puts next to the library (build/lib), then libgcc's _Unwind_Backtrace (always present,
// about 10x slower).
#pragma once

#include <cstddef>
#include <cstdint>

namespace gmem::trace {

enum class unwinder_kind : std::uint8_t { none, libunwind, libgcc };
// dlopen()s `soname` from the system's search path or else from the directory libgmem.so was
// loaded from, preloading `deps` from there first (the bundled copies have no rpath).
void* open_bundled_library(const char* soname, const char* const* deps, std::size_t ndeps);
const char* to_string(unwinder_kind) noexcept;

// Loads the unwinder once (thread-safe, idempotent); `prefer_libgcc` skips libunwind (tests,
// GMEM_STACK_UNWINDER=libgcc) and the cached-rule walk. `cached_rules` = false leaves the
// cached-rule walk off (tests compare it with libunwind). Returns the fallback in use.
unwinder_kind init_unwinder(bool prefer_libgcc = false, bool cached_rules = true) noexcept;
// Whether captures try the cached-rule walk first.
bool cached_rules_enabled() noexcept;
// Captures the cached-rule walk gave up on (libunwind or libgcc took them), since start.
std::uint64_t capture_fallbacks() noexcept;

// Writes up to `max` return addresses of the caller's stack into `ips`, innermost first,
// skipping the `skip` innermost frames above the caller. Returns how many it wrote. Safe to
// call before init_unwinder() (uses libgcc then). Call it before taking any lock.
unsigned capture_ips(std::uintptr_t* ips, unsigned max, unsigned skip) noexcept;

} // namespace gmem::trace
