// The recorder's entry points, called by the interposer's hooks (and by the pool observer
// glue). Implemented in trace_hooks.cpp on top of profiler/recorder/trace_writer.h.
//
// Every function is noexcept, never throws, never blocks on a reader, and costs one
// predictable branch when tracing is off (GMEM_TRACE=0, init() not called yet, or the
// shared-memory object could not be created). Hooks keep working after shutdown().
//
// Ordering rules the callers follow:
// - capture_stack() runs BEFORE the caller takes any lock (libunwind may take its own).
// - free() is recorded BEFORE the block becomes reusable, so the trace never shows an alloc
//   of an address ahead of the free that released it.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "pool/stats.h"
#include "profiler/format/trace_types.h" // alloc_kind, device_stats, stats_source
#include "profiler/recorder/waiting_frames.h"

namespace gmem::trace {

// device_stats and stats_source are defined in profiler/format/trace_types.h:
//   struct device_stats { int device; pool_stats stats; };   // device -1 = host pool
//   using stats_source = std::size_t (*)(device_stats* out, std::size_t max) noexcept;

// Recording is off for good (GMEM_TRACE=0, the object could not be made, a forked child, after
// shutdown found none): set by profiler/recorder/recorder.cpp, never cleared. The hooks' fast paths
// test it inline, so with the trace off an allocation and a free make no call into the
// recorder.
extern std::atomic<bool> g_recording_off;
inline bool recording_off() noexcept {
  return g_recording_off.load(std::memory_order_relaxed);
}

void init(int argc_unused = 0) noexcept;      // once, after options are read
void set_stats_source(stats_source) noexcept; // sampled for the timeline and the heartbeat
std::uint32_t capture_stack() noexcept;       // call BEFORE taking any lock; 0 = none/off
void alloc(std::uintptr_t addr, std::size_t requested, std::size_t rounded, int device,
           std::uintptr_t stream, alloc_kind kind, std::uint32_t stack) noexcept;
void free(std::uintptr_t addr, int device, std::uintptr_t stream, alloc_kind kind) noexcept;
void segment(bool mapped, std::uintptr_t base, std::size_t bytes, int device,
             bool stitched = false) noexcept;
void fence(int device, std::uint64_t duration_ns, std::size_t released_bytes) noexcept;
void trim(int device, std::size_t released_bytes) noexcept;
void oom(int device, std::size_t requested, const pool_stats& at_failure) noexcept;
void marker(const char* label) noexcept;
// A framework's allocator is observed per allocation (a header flag); false when not recording.
bool mark_observed(observed_framework framework, bool observed = true) noexcept;
// A framework's allocation (or free) observed since `since` (now_ticks() when the observer was
// entered): gmem's own time for it, counted per thread in the trace (trace_writer::observed).
void observed(bool alloc, std::uint64_t since) noexcept;
// What observing cost so far (all zero when not recording).
observe_cost observed_cost() noexcept;
// How the trace's file grew so far: the page helper's growths and the hooks' stalls.
trace_growth growth() noexcept;
// A Python thread starts (ends) waiting in an engine whose worker threads allocate for it: they
// record its Python frames, marked (profiler/recorder/waiting_frames.h). Token 0: not registered.
std::uint32_t wait_begin(wait_kind kind, unsigned skip) noexcept;
void wait_end(std::uint32_t token) noexcept;
void sample_now() noexcept;      // a counter sample now (a pool's context is gone), if recording
void modules_changed() noexcept; // after a successful dlopen / dlclose
// Extension: an option changed at run time (client API, e.g. the limit); name = "GMEM_LIMIT".
void option_changed(const char* name, const char* value) noexcept;
void shutdown() noexcept; // at exit (saves to a file if asked); hooks keep working after

} // namespace gmem::trace
