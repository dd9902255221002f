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

#include "common/options.h"

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

const options& shim_options(); // read once; valid after init (defaults before)
void ensure_init();            // idempotent; the constructor calls it
bool exiting();                // exit() has started
bool forked_child();

} // namespace gmem::shim
