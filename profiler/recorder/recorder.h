// The process's trace recorder: owns the shared-memory object, the trace_writer in it and the
// sampler thread, and applies the GMEM_TRACE* options. interpose/trace_hooks.cpp forwards the
// hooks here; tests drive it directly.
//
// Lifecycle: init() reads options and does nothing else (it runs in libgmem.so's constructor
// in every process that preloads it). The object is created lazily by the first event that
// needs it (an allocation, segment, marker, option change or OOM), so processes that never
// allocate GPU memory leave no trace; it starts small and grows with the trace, within
// GMEM_TRACE_MAX. shutdown() stops the sampler, takes a final sample, marks the trace
// "exited", saves it if GMEM_TRACE_SAVE is set and removes it if GMEM_TRACE_KEEP says so;
// recording continues after. A shutdown that finds the object being created by another
// thread waits for it; one that finds none lets no later event create it. The sampler thread (when
// the object is created) and shutdown apply the retention budget (GMEM_TRACE_KEEP_MAX/_FREE/_AGE)
// to the traces of processes that are gone; creation does it at once only when /dev/shm is short of
// room; shutdown only when the process's last pass is more than a minute old. Each pass walks at
// most k_retention_scan of /dev/shm (profiler/reader/retention.h). In a forked child recording
// stops (the child must not write its parent's trace).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "common/units.h"
#include "profiler/format/trace_types.h"
#include "profiler/reader/retention.h"
#include "profiler/recorder/trace_writer.h"

namespace gmem::trace {

// What a process that exits normally leaves in /dev/shm (GMEM_TRACE_KEEP).
enum class keep_mode { all, outstanding, none };

struct recorder_options {
  bool enabled = true;
  writer_config config;
  std::string save_path;     // "" = none; "%p" becomes the pid
  size_or_percent max_bytes; // GMEM_TRACE_MAX: most /dev/shm the trace grows to
  keep_mode keep = keep_mode::all;
  retention_policy retention; // applied when the trace is created and at exit
  // From the GMEM_TRACE* rows of common/options.h; bad values warn once each on stderr.
  static recorder_options from_env();
};

// True once recording is off for good (declared for the hooks in interpose/trace_hooks.h).
extern std::atomic<bool> g_recording_off;

// Configures the recorder (first call wins; later calls are ignored).
void recorder_init(const recorder_options& options) noexcept;
// The writer once the object exists (set once; cleared only in a forked child). Read inline
// by the functions below, which every traced allocation and free calls.
extern std::atomic<trace_writer*> g_writer;
trace_writer* recorder_writer_create() noexcept; // recorder_writer()'s slow path

// The writer, creating the object on first use; nullptr when recording is off or failed.
inline trace_writer* recorder_writer() noexcept {
  if (trace_writer* w = g_writer.load(std::memory_order_acquire)) return w;
  return recorder_writer_create();
}
// The writer if the object exists already; never creates it.
inline trace_writer* recorder_writer_if_open() noexcept {
  return g_writer.load(std::memory_order_acquire);
}
void recorder_set_stats_source(stats_source source) noexcept;
// A periodic counter sample now, off the sampler's schedule (a pool's context was destroyed);
// nothing when the object does not exist yet or after shutdown.
void recorder_sample_now() noexcept;
void recorder_shutdown() noexcept;
// "gmem.<pid>.<ticks>.<nonce>" once created, "" before.
std::string recorder_object_name();
// How the object's file grew so far (all 0 before it exists or with the trace off).
trace_growth recorder_growth() noexcept;

} // namespace gmem::trace
