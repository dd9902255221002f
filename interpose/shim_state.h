// Process-wide state of the shim: options, whether hooks may use the pool, and the
// per-thread re-entry guard. Hooks test shim_active() in one unlikely branch; everything else
// happens in the slow path.
//
// Lifecycle: a constructor reads the options (GMEM_*), starts the trace and registers the exit
// and fork handlers. After exit() starts, or in a forked child, shim_active() is false forever:
// hooks pass straight to the driver, cached segments are left to the driver's teardown, and no
// pool is ever destroyed (their destructors would call the driver).
#pragma once

#include <atomic>

#include <cstddef>
#include <cstdint>

#include "common/options.h"
#include "profiler/format/trace_types.h"

#define GMEM_LIKELY(x) __builtin_expect(!!(x), 1)
#define GMEM_UNLIKELY(x) __builtin_expect(!!(x), 0)

namespace gmem::shim {

extern std::atomic<bool> g_active; // enabled, initialized, not exiting, not a forked child
extern thread_local bool t_in_hook __attribute__((tls_model("initial-exec")));

inline bool shim_active() {
  return GMEM_LIKELY(g_active.load(std::memory_order_relaxed)) && GMEM_LIKELY(!t_in_hook);
}

// Marks this thread as inside a hook, so a driver call that comes back into an exported hook
// passes through instead of re-entering the pool.
class hook_scope {
public:
  hook_scope() { t_in_hook = true; }
  ~hook_scope() { t_in_hook = false; }
  hook_scope(const hook_scope&) = delete;
  hook_scope& operator=(const hook_scope&) = delete;
};

// Allocations that reached the driver unpooled, by trace kind (GMEM_VERBOSE report).
extern std::atomic<std::uint64_t> g_passthrough_counts[trace::k_alloc_kind_count];
inline void count_passthrough(trace::alloc_kind kind) {
  g_passthrough_counts[static_cast<std::size_t>(kind)].fetch_add(1, std::memory_order_relaxed);
}

const options& shim_options(); // read once; valid after init (defaults before)
// Idempotent; the constructor calls it. Defined with the constructor and the exit and fork
// handlers that change this state (hooks/process_hooks.cpp).
void ensure_init();
bool exiting(); // exit() has started
bool forked_child();

// For the lifecycle handlers alone: set_options() keeps the options read at start for the
// process's life; mark_exiting() (exit() started) and mark_forked_child() turn the hooks off
// for good.
const options& set_options(const options* o);
void mark_exiting();
void mark_forked_child();

} // namespace gmem::shim
