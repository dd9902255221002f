// The fast path of stack capture: a walk that replays, for each return address, the unwind
// rule its module's call-frame information (.eh_frame) gives there, from a cache keyed by the
// return address. A program's allocations come from a few hundred call sites, so after the
// first few captures every frame costs a table lookup and two loads from the stack instead of
// libunwind's per-frame work (~20-30 ns a frame on the GPU hosts, and far more for stacks its
// own cache refuses).
//
// Rules are read with elfutils' libdw (loaded with dlopen, like libunwind: the system's, then
// the copy next to libgmem.so) the first time a return address is met, and kept only when they
// are the common x86-64 shape the walk replays exactly: CFA = rsp or rbp + offset, the return
// address at CFA - 8, rbp unchanged, saved at CFA + offset, or undefined. Anything else (signal
// frames, DWARF expressions, code without CFI such as JIT output, a module that is not a file)
// makes cfi_backtrace() give up, and the caller uses libunwind for that capture. Every load
// the walk makes lies inside the calling thread's stack, above the frame before it.
//
// Cache: 32768 return addresses, lock-free to read; learning takes a mutex. Each thread keeps
// copies (8.5 KiB on the heap, freed at its exit): the rules of its last walk by depth, and the
// 512 it met last (direct-mapped), so a repeated call site costs no shared-table lookup. All are
// emptied when a module was unloaded (cfi_unwind_modules_changed), since new code may then sit
// at old addresses.
#pragma once

#include <cstdint>

namespace gmem::trace {

// Loads libdw once (thread-safe). false: not available; cfi_backtrace() then always gives up.
bool cfi_unwind_init() noexcept;

// Writes up to `max` return addresses of the caller's stack into `ips`, innermost first; the
// first is in the caller itself (as with unw_backtrace). Returns how many, or -1 when the walk
// met a frame whose rule it cannot replay or left the thread's stack (ips then hold garbage).
int cfi_backtrace(std::uintptr_t* ips, unsigned max) noexcept;

// Empties the cache when a module was unloaded since the last call (dl_iterate_phdr's count).
void cfi_unwind_modules_changed() noexcept;

// Slow-path counters (the hot path counts nothing): return addresses whose rule was learned,
// and those refused (not replayable), since start.
struct cfi_unwind_counters {
  std::uint64_t learned = 0;
  std::uint64_t refused = 0;
  std::uint64_t resets = 0;
};
cfi_unwind_counters cfi_unwind_stats() noexcept;

} // namespace gmem::trace
