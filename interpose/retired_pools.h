// Pools whose context is gone (cuCtxDestroy, primary context reset or last release). The
// driver has released their memory, but their figures belong to the process's history: the
// exit summary (GMEM_VERBOSE), the trace's per-device counters (gmem stats, top, report, the
// exports) and its timeline must still count them.
//
// At the drop, before the pool is abandoned: its final figures are kept on the entry
// (entries are never freed), and the trace records every live block as freed and every
// segment as unmapped (the driver frees them with the context: they are neither leaks nor
// still mapped), then a marker naming the context and a counter sample.
//
// Per-device figures (pool_figures): one record per device (host pools: -1) summing every
// pool of that device, live or dropped, because the trace keeps one counter record per device
// id: two pools writing the same id (a private context beside the primary one, pinned host
// pools of several flag sets) would otherwise overwrite each other. A dropped pool adds its
// cumulative counters (allocations, frees, hits, maps, fences, trims, OOMs, ...; its segments
// count as unmapped) and its peaks, nothing to what is live, reserved, pending or free now.
// Peaks: the largest of the pools' own peaks and of the live sum; exact while a device has one
// pool at a time, a lower bound when several grow at once.
#pragma once

#include <cstddef>
#include <cstdio>

#include "interpose/context_entry.h"
#include "profiler/format/trace_types.h"

namespace gmem::shim {

// With context_pools' mutex held, `e` not yet abandoned. `why`: "destroyed" or "reset".
void retire_entry(context_entry& e, const char* why) noexcept;
// After the drop, without locks: a counter sample, so the timeline shows it at once.
void record_retirement() noexcept;
// Adds the figures of `e`'s pools to the per-device records out[0, *filled) (see above),
// starting a record for a device not there yet while *filled < max.
void add_figures(const context_entry& e, trace::device_stats* out, std::size_t max,
                 std::size_t* filled) noexcept;
// The GMEM_VERBOSE exit lines of a dropped entry's pools ("gmem: pool device=0 kind=device
// context=destroyed ..." with their figures at the drop); nothing for a live one.
void print_retired(const context_entry& e, std::FILE* out);

} // namespace gmem::shim
