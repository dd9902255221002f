// The interposer's recorder glue: each hook is one branch when recording is off, then a call
// into the writer (profiler/recorder/trace_writer.h). The object is created by the first hook that
// records something (see profiler/recorder/recorder.h), so frees and fences of a process that never
// allocated through us cost one atomic load.
#include "interpose/trace_hooks.h"

#include <cstring>
#include <string_view>

#include "profiler/format/module_map.h"
#include "profiler/recorder/cfi_unwind.h"
#include "profiler/recorder/python_frames.h"
#include "profiler/recorder/recorder.h"

namespace gmem::trace {

void init(int) noexcept {
  try {
    recorder_init(recorder_options::from_env());
  } catch (...) {
    recorder_options off;
    off.enabled = false;
    recorder_init(off);
  }
}

void set_stats_source(stats_source source) noexcept {
  recorder_set_stats_source(source);
}

// noinline: the frames skipped below are this one and the writer's.
__attribute__((noinline)) std::uint32_t capture_stack() noexcept {
  trace_writer* w = recorder_writer();
  if (!w) return 0;
  if (w->stacks_off()) { // GMEM_STACK_DEPTH=0 GMEM_PYTHON_DEPTH=0: no walk, no call
    w->prefetch_event();
    return 0;
  }
  const std::uint32_t id = w->capture_stack(1);
  asm volatile("" ::: "memory"); // no tail call: the skipped frame must exist
  return id;
}

void alloc(std::uintptr_t addr, std::size_t requested, std::size_t rounded, int device,
           std::uintptr_t stream, alloc_kind kind, std::uint32_t stack) noexcept {
  if (trace_writer* w = recorder_writer())
    w->alloc(addr, requested, rounded, device, stream, kind, stack);
}

void free(std::uintptr_t addr, int device, std::uintptr_t stream, alloc_kind kind) noexcept {
  if (trace_writer* w = recorder_writer_if_open()) w->free(addr, device, stream, kind);
}

void segment(bool mapped, std::uintptr_t base, std::size_t bytes, int device,
             bool stitched) noexcept {
  if (trace_writer* w = recorder_writer()) w->segment(mapped, base, bytes, device, stitched);
}

void fence(int device, std::uint64_t duration_ns, std::size_t released_bytes) noexcept {
  if (trace_writer* w = recorder_writer_if_open()) w->fence(device, duration_ns, released_bytes);
}

void trim(int device, std::size_t released_bytes) noexcept {
  if (trace_writer* w = recorder_writer_if_open()) w->trim(device, released_bytes);
}

void oom(int device, std::size_t requested, const pool_stats& at_failure) noexcept {
  if (trace_writer* w = recorder_writer()) w->oom(device, requested, at_failure);
}

void marker(const char* label) noexcept {
  if (trace_writer* w = recorder_writer())
    w->marker(label ? std::string_view(label, strnlen(label, 65536)) : std::string_view());
}

bool mark_observed(observed_framework framework, bool observed) noexcept {
  trace_writer* w = recorder_writer();
  if (w == nullptr) return false;
  w->mark_observed(framework, observed);
  return true;
}

void observed(bool alloc, std::uint64_t since) noexcept {
  if (trace_writer* w = recorder_writer_if_open()) w->observed(alloc, since);
}

observe_cost observed_cost() noexcept {
  trace_writer* w = recorder_writer_if_open();
  return w != nullptr ? w->observed_cost() : observe_cost{};
}

trace_growth growth() noexcept {
  return recorder_growth();
}

std::uint32_t wait_begin(wait_kind kind, unsigned skip) noexcept {
  // Only into a trace that exists: a program that has allocated nothing on the GPU yet (a
  // CPU-only backward) gets no trace for it.
  trace_writer* w = recorder_writer_if_open();
  return w != nullptr ? w->wait_begin(kind, skip) : 0;
}

void wait_end(std::uint32_t token) noexcept {
  process_waiting_frames().end(token);
}

void sample_now() noexcept {
  recorder_sample_now();
}

void modules_changed() noexcept {
  cfi_unwind_modules_changed(); // an unloaded module's addresses may now hold other code
  if (trace_writer* w = recorder_writer_if_open()) {
    if (w->config().python_depth > 0) python_init(); // an interpreter loaded by dlopen
    try {
      w->update_modules(scan_modules());
    } catch (...) { // out of memory: the module map stays as it was
    }
  }
}

void option_changed(const char* name, const char* value) noexcept {
  if (trace_writer* w = recorder_writer())
    w->option(name ? name : "", value ? std::string_view(value, strnlen(value, 4096)) : "");
}

void shutdown() noexcept {
  recorder_shutdown();
}

} // namespace gmem::trace
